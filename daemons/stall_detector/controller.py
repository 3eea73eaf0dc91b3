"""One cycle of the stall detector, and the loop that runs a cycle every ``interval``.

A cycle: read the training JobSets, their pods and the progress reports of every team namespace; send the few
queries of ``queries.py`` (one per input and window, whatever the number of gangs); judge each gang
(``decide.judge``), name the nodes to blame (``suspects.suspects``), and, on the leader only, not in a dry run,
checking leadership again before each write: restart the stalled gangs in place (``restart.py``: the record, then
one eviction; at most ``maxRestartsPerCycle`` a cycle) and remember the suspects (``memory.py``).

Fail-static: with the JobSets unreadable nothing is judged; with a query failed, no gang that needs it is judged
(``unknown``); with the suspects ConfigMap unreadable, no node is named. Every replica reads, judges and exports;
only the leader writes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Protocol

from contract.stall_detector_settings import StallDetectorSettings
from daemons.stall_detector import memory, queries
from daemons.stall_detector.decide import Policy, Readings, Verdict, judge
from daemons.stall_detector.gangs import GangView, gang_view
from daemons.stall_detector.metrics import Metrics
from daemons.stall_detector.restart import Step, next_step
from daemons.stall_detector.suspects import (
    THROTTLED_SHARE,
    NodeEvidence,
    SuspectPolicy,
    repeat_offenders,
    suspects,
)
from daemons.toolkit.controller import Querying
from daemons.toolkit.events import event_body
from daemons.toolkit.kube import ConflictError, KubeError
from daemons.toolkit.prometheus import QueryError, QueryResult

log = logging.getLogger("stall_detector")

COMPONENT = "gpucluster-stall-detector"
JOBSET_API_VERSION = "jobset.x-k8s.io/v1alpha2"
# Event reasons (``kubectl describe jobset``).
REASON_STALLED = "GangStalled"
REASON_SUSPECT = "SuspectNode"
REASON_RESTART_FAILED = "StallRestartFailed"
#: The verdicts under which a gang's nodes are judged for blame: it runs and was seen.
JUDGED = frozenset({Verdict.STALLED, Verdict.BUSY, Verdict.PROGRESSING})


class Api(Protocol):
    def list_jobsets(self, namespace: str) -> list[Mapping[str, Any]]: ...
    def list_pods(self, namespace: str) -> list[Mapping[str, Any]]: ...
    def claim_annotations(self, namespace: str) -> dict[str, str]: ...
    def write_restart(self, namespace: str, name: str, record: str, resource_version: str) -> None: ...
    def evict(self, namespace: str, pod: str) -> bool: ...
    def create_event(self, body: dict[str, Any]) -> None: ...
    def get_suspects(self, namespace: str) -> tuple[str, str] | None: ...
    def put_suspects(self, namespace: str, text: str, resource_version: str | None) -> str: ...


@dataclass(frozen=True)
class Inputs:
    """One window's answers; None where the query failed."""

    #: (namespace, pod) -> gpu -> value.
    tensor_max: Mapping[tuple[str, str], Mapping[str, float]] | None
    tensor_mean: Mapping[tuple[str, str], Mapping[str, float]] | None
    fabric: Mapping[str, float] | None
    transport: Mapping[str, float] | None
    link: Mapping[str, float] | None
    #: node -> GPUs with a new hardware XID; node -> share of the window its most throttled GPU was slowed.
    xids: Mapping[str, float] | None = None
    throttled: Mapping[str, float] | None = None
    #: node -> bytes per second written to its filesystems.
    storage: Mapping[str, float] | None = field(default_factory=dict)


@dataclass(frozen=True)
class GangResult:
    namespace: str
    name: str
    attempt: int
    verdict: Verdict
    detail: str
    suspects: Mapping[str, tuple[str, ...]]
    #: ``restarted`` (record and eviction), ``resumed`` (eviction of a restart recorded before), ``held`` (the
    #: cycle's restart budget was spent), ``failed``, or empty.
    action: str = ""


@dataclass
class CycleResult:
    leader: bool
    unknown: dict[str, str] = field(default_factory=dict)
    gangs: list[GangResult] = field(default_factory=list)
    named: list[str] = field(default_factory=list)
    repeat_offenders: tuple[str, ...] = ()
    seconds: float = 0.0


def _by_pod_gpu(result: QueryResult) -> dict[tuple[str, str], dict[str, float]]:
    out: dict[tuple[str, str], dict[str, float]] = {}
    for s in result.samples:
        ns, pod, gpu = s.labels.get("namespace", ""), s.labels.get("pod", ""), s.labels.get("gpu", "")
        if ns and pod and gpu and s.value == s.value:
            gpus = out.setdefault((ns, pod), {})
            gpus[gpu] = max(s.value, gpus.get(gpu, s.value))
    return out


def _by_node(result: QueryResult) -> dict[str, float]:
    out: dict[str, float] = {}
    for s in result.samples:
        node = s.labels.get("node", "")
        if node and s.value == s.value:
            out[node] = out.get(node, 0.0) + s.value
    return out


def readings_for(view: GangView, inputs: Inputs) -> Readings:
    running = {p.name for p in view.pods if p.phase == "Running"}
    tensor = None
    if inputs.tensor_max is not None:
        by_pod = inputs.tensor_max
        tensor = {(pod, gpu): v for pod in running for gpu, v in by_pod.get((view.namespace, pod), {}).items()}
    fabric = None
    if inputs.fabric is not None:
        fabric = {n: inputs.fabric[n] for n in view.gang.nodes if n in inputs.fabric}
    storage = None
    if inputs.storage is not None:
        storage = {n: inputs.storage[n] for n in view.gang.nodes if n in inputs.storage}
    return Readings(
        tensor_active=tensor, fabric_bytes_per_s=fabric, progress=view.progress, storage_write_bytes_per_s=storage
    )


def evidence_for(view: GangView, inputs: Inputs, verdict: Verdict) -> list[NodeEvidence]:
    """Each node's evidence. A stalled gang's tensor activity says nothing of who is to blame (every GPU idles), so
    it is judged on errors alone."""
    out = []
    for node in view.gang.nodes:
        pods = {p.name for p in view.pods if p.node == node and p.phase == "Running"}
        activity: float | None = None
        if verdict is not Verdict.STALLED and inputs.tensor_mean is not None:
            means = inputs.tensor_mean
            values = [v for pod in pods for v in means.get((view.namespace, pod), {}).values()]
            activity = sum(values) / len(values) if values else None
        out.append(
            NodeEvidence(
                node=node,
                tensor_active=activity,
                transport_errors=(inputs.transport or {}).get(node, 0.0),
                link_errors=(inputs.link or {}).get(node, 0.0),
                hardware_xid=(inputs.xids or {}).get(node, 0.0) > 0,
                throttled=(inputs.throttled or {}).get(node, 0.0) >= THROTTLED_SHARE,
            )
        )
    return out


@dataclass(eq=False, repr=False)
class Controller(Querying[StallDetectorSettings, Api, Metrics]):
    logger = log
    _: KW_ONLY
    #: Unix seconds: what gangs are judged at and Events are stamped with.
    wall: Callable[[], float] = time.time
    #: Measures a cycle's duration.
    monotonic: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        s = self.settings
        self.policy = Policy(
            stall_after_s=s.stall_after_seconds,
            startup_grace_s=s.startup_grace_seconds,
            quiet_max_s=s.quiet_max_seconds,
            tensor_floor=s.tensor_floor,
            fabric_floor=s.fabric_floor_bytes,
            storage_floor=s.storage_floor_bytes,
        )
        self.suspect_policy = SuspectPolicy(
            straggler_ratio=s.straggler_ratio,
            transport_errors=s.transport_errors,
            link_errors=s.link_errors,
            repeat_count=s.repeat_count,
            repeat_window_s=s.repeat_window_seconds,
        )

    # --- reads ------------------------------------------------------------------------------------------------

    def _views(self, unknown: dict[str, str]) -> list[GangView] | None:
        views: list[GangView] = []
        for ns in self.settings.workload_namespaces:
            op = "list-jobsets"
            try:
                jobsets = self.api.list_jobsets(ns)
                op = "list-pods"
                pods = self.api.list_pods(ns) if jobsets else []
                op = "read-claim"
                claim = self.api.claim_annotations(ns) if jobsets else {}
            except KubeError as exc:
                self.metrics.kube_errors.labels(op).inc()
                unknown["gangs"] = str(exc)
                return None
            for js in jobsets:
                try:
                    view = gang_view(js, pods, claim)
                except ValueError as exc:
                    log.warning("jobset unreadable", extra={"namespace": ns, "problem": str(exc)})
                    continue
                for problem in view.problems:
                    self.metrics.report_problems.inc()
                    log.info("report unreadable", extra={"jobset": f"{ns}/{view.name}", "problem": problem})
                views.append(view)
        return views

    def _query(self, name: str, promql: str, unknown: dict[str, str]) -> QueryResult | None:
        try:
            return self.querier.query(promql)
        except QueryError as exc:
            self.metrics.query_errors.labels(name, exc.reason).inc()
            unknown[name] = str(exc)
            return None

    def _inputs(self, window_s: float, unknown: dict[str, str]) -> Inputs:
        s = self.settings
        cycle = queries.cycle_queries(s.dcgm_scrape_job, s.fabric_scrape_job, s.workload_namespaces, window_s)
        tmax, tmean, fabric, writes, transport, link, xids, slowed = (
            self._query(name, promql, unknown) for name, promql in cycle.items()
        )
        return Inputs(
            tensor_max=None if tmax is None else _by_pod_gpu(tmax),
            tensor_mean=None if tmean is None else _by_pod_gpu(tmean),
            fabric=None if fabric is None else _by_node(fabric),
            storage=None if writes is None else _by_node(writes),
            transport=None if transport is None else _by_node(transport),
            link=None if link is None else _by_node(link),
            xids=None if xids is None else _by_node(xids),
            throttled=None if slowed is None else _by_node(slowed),  # one sample a node (max by node)
        )

    # --- the cycle --------------------------------------------------------------------------------------------

    def cycle(self) -> CycleResult:
        started = self.monotonic()
        leader = self.is_leader()
        self.metrics.is_leader.set(1 if leader else 0)
        self.metrics.cycles.inc()
        result = CycleResult(leader)
        views = self._views(result.unknown)
        if views is None:
            log.log(logging.INFO if leader else logging.DEBUG, "cycle", extra={"unknown": result.unknown})
            return result
        now = self.wall()
        windows = sorted({v.gang.stall_after_s or self.policy.stall_after_s for v in views if self._live(v)})
        inputs = {w: self._inputs(w, result.unknown) for w in windows}
        named = self._read_memory(result.unknown)
        budget = self.settings.max_restarts_per_cycle
        self.metrics.verdict.clear()
        self.metrics.suspect.clear()
        counts = dict.fromkeys(Verdict, 0)
        for view in views:
            window = view.gang.stall_after_s or self.policy.stall_after_s
            got = inputs.get(window)
            if got is None:  # not running: judged on its pods alone
                judgement = judge(view.gang, Readings(None, None, view.progress), now, self.policy)
                blamed: dict[str, tuple[str, ...]] = {}
            else:
                judgement = judge(view.gang, readings_for(view, got), now, self.policy)
                blamed = (
                    suspects(evidence_for(view, got, judgement.verdict), self.suspect_policy)
                    if judgement.verdict in JUDGED
                    else {}
                )
            counts[judgement.verdict] += 1
            self.metrics.verdict.labels(view.namespace, view.name, judgement.verdict.value).set(1)
            for node, reasons in blamed.items():
                self.metrics.suspect.labels(node, ",".join(reasons)).set(1)
            if named is not None and blamed:
                named = self._name(view, blamed, named[0], named[1], now, result)
            action = ""
            step = next_step(view, judgement, blamed, now)
            if step is not None:
                if step.record is not None and budget <= 0:
                    self.metrics.held.inc()
                    action = "held"
                    log.warning("restart budget spent: left for the next cycle", extra={"jobset": view.name})
                elif leader and not self.dry_run:
                    action = self._restart(view, step, now)
                    budget -= 1 if step.record is not None else 0
                else:
                    action = "would-restart"
            if judgement.verdict is Verdict.STALLED or action:
                log.warning(
                    "stalled" if judgement.verdict is Verdict.STALLED else "restart",
                    extra={"jobset": f"{view.namespace}/{view.name}", "detail": judgement.detail, "action": action},
                )
            result.gangs.append(
                GangResult(view.namespace, view.name, view.attempt, judgement.verdict, judgement.detail, blamed, action)
            )
        for verdict, count in counts.items():
            self.metrics.gangs.labels(verdict.value).set(count)
        if named is not None:
            self._export_offenders(named[0], now, result)
        result.seconds = self.monotonic() - started
        self.metrics.cycle_seconds.observe(result.seconds)
        return result

    @staticmethod
    def _live(view: GangView) -> bool:
        return view.gang.running_since is not None and not view.suspended

    # --- restart ----------------------------------------------------------------------------------------------

    def _restart(self, view: GangView, step: Step, now: float) -> str:
        ns, name = view.namespace, view.name
        if step.record is not None:
            if not self.is_leader():
                return ""
            try:
                self.api.write_restart(ns, name, step.record.to_json(), view.resource_version)
            except ConflictError:
                return ""  # the JobSet changed since it was read: judged again next cycle
            except KubeError as exc:
                self.metrics.kube_errors.labels("write-record").inc()
                self._event(view, "Warning", REASON_RESTART_FAILED, f"could not record the restart: {exc}", now)
                return "failed"
            blame = "; ".join(f"{n}: {', '.join(r)}" for n, r in sorted(step.record.suspects.items()))
            message = f"restarting attempt {view.attempt} in place: {step.record.evidence}"
            self._event(view, "Warning", REASON_STALLED, message + (f"; suspect {blame}" if blame else ""), now)
        if not self.is_leader():
            return ""
        try:
            self.api.evict(ns, step.evict)
        except KubeError as exc:
            self.metrics.kube_errors.labels("evict").inc()
            self._event(view, "Warning", REASON_RESTART_FAILED, f"could not evict {step.evict}: {exc}", now)
            return "failed"
        if step.record is not None:
            self.metrics.restarts.labels(ns, name).inc()
            return "restarted"
        return "resumed"

    def _event(self, view: GangView, kind: str, reason: str, message: str, now: float) -> None:
        involved = {
            "apiVersion": JOBSET_API_VERSION,
            "kind": "JobSet",
            "name": view.name,
            "namespace": view.namespace,
            "uid": view.uid,
        }
        body = event_body(
            involved,
            view.namespace,
            event_type=kind,
            reason=reason,
            message=message,
            now=now,
            component=COMPONENT,
            identity=self.identity,
        )
        try:
            self.api.create_event(body)
        except KubeError as exc:
            log.warning("event not written", extra={"reason": reason, "problem": str(exc)})

    # --- suspects ---------------------------------------------------------------------------------------------

    def _read_memory(self, unknown: dict[str, str]) -> tuple[dict[str, list[memory.Offence]], str | None] | None:
        try:
            found = self.api.get_suspects(self.settings.namespace)
        except KubeError as exc:
            self.metrics.kube_errors.labels("read-suspects").inc()
            unknown["suspects"] = str(exc)
            return None
        if found is None:
            return {}, None
        return memory.parse(found[0]), found[1]

    def _name(  # noqa: PLR0917 - the memory read this cycle travels with it
        self,
        view: GangView,
        blamed: Mapping[str, tuple[str, ...]],
        named: dict[str, list[memory.Offence]],
        version: str | None,
        now: float,
        result: CycleResult,
    ) -> tuple[dict[str, list[memory.Offence]], str | None] | None:
        """Name each blamed node once per attempt: an Event on the JobSet and an offence remembered."""
        attempt = f"{view.namespace}/{view.name}#{view.attempt}"
        changed = dict(named)
        fresh: list[str] = []
        for node, reasons in sorted(blamed.items()):
            added = memory.add(
                changed, node, memory.Offence(now, attempt, reasons), now, self.suspect_policy.repeat_window_s
            )
            if added is not None:
                changed = added
                fresh.append(node)
        if not fresh:
            return named, version
        if not self.is_leader() or self.dry_run:
            return named, version
        try:
            version = self.api.put_suspects(self.settings.namespace, memory.render(changed), version)
        except KubeError as exc:  # a conflict too: another writer; named again next cycle
            self.metrics.kube_errors.labels("write-suspects").inc()
            log.warning("suspects not remembered", extra={"problem": str(exc)})
            return None
        window = self.settings.repeat_window
        for node in fresh:
            count = len(changed[node])
            self._event(
                view,
                "Warning",
                REASON_SUSPECT,
                f"{node} is suspect ({', '.join(blamed[node])}); named {count} time(s) within {window}, "
                f"quarantined at {self.suspect_policy.repeat_count}",
                now,
            )
            result.named.append(node)
        return changed, version

    def _export_offenders(self, named: Mapping[str, list[memory.Offence]], now: float, result: CycleResult) -> None:
        offenders = repeat_offenders(memory.namings(named), now, self.suspect_policy)
        self.metrics.repeat_offender.clear()
        for node in offenders:
            reasons = sorted({r for o in named[node] for r in o.reasons})
            self.metrics.repeat_offender.labels(node, ",".join(reasons)).set(1)
        result.repeat_offenders = offenders


def summary(result: CycleResult) -> dict[str, object]:
    """One cycle as the JSON ``--once`` prints."""
    return {
        "unknown": dict(result.unknown),
        "gangs": [
            {
                "namespace": g.namespace,
                "jobset": g.name,
                "attempt": g.attempt,
                "verdict": g.verdict.value,
                "detail": g.detail,
                "suspects": {n: list(r) for n, r in g.suspects.items()},
                "action": g.action,
            }
            for g in result.gangs
        ],
        "named": list(result.named),
        "repeatOffenders": list(result.repeat_offenders),
        "seconds": round(result.seconds, 4),
    }


__all__ = ["Controller", "CycleResult", "GangResult", "Inputs", "summary"]
