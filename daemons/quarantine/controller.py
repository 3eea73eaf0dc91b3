"""One cycle of the quarantine controller, and the loop that runs a cycle every ``interval``.

A cycle: query the firing signals, list the Nodes, read the ledger, let :func:`~daemons.quarantine.decide.decide`
decide, and, only on the leader, only when not a dry run, and only after checking leadership once more before each
write, patch the nodes to quarantine and apply the ledger.

Fail-static: with the nodes or the ledger unreadable nothing is decided or written. With the signals unknown
(Prometheus down, a timeout, an error answer) no node is quarantined, but the ledger still follows the nodes
(a release or a deletion is recorded): that writes nothing to a node. Every replica queries, decides and exports
metrics; only the leader writes (node patches, the ledger, Events).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Protocol

from contract.constants import CLUSTER_EVENTS_NAMESPACE
from contract.quarantine_settings import LEDGER_NAME, QuarantineSettings
from daemons.quarantine.decide import (
    Decision,
    LedgerEntry,
    NodeView,
    Outcome,
    Plan,
    Policy,
    Signal,
    build_ledger,
    decide,
)
from daemons.quarantine.kube import TranslationError, node_from, quarantine_ops
from daemons.quarantine.ledger import apply_body, entries_from, to_data
from daemons.quarantine.metrics import Metrics
from daemons.toolkit.controller import Querying, Throttle
from daemons.toolkit.kube import ConflictError, KubeError
from daemons.toolkit.prometheus import QueryError, Sample

log = logging.getLogger("quarantine")

COMPONENT = "gpucluster-quarantine"
#: Where Events about (cluster-scoped) Nodes must live.

# Event reasons (``kubectl describe node``; the ledger's in ``kubectl -n <ns> describe configmap``).
REASON_QUARANTINED = "NodeQuarantined"
REASON_BREAKER = "QuarantineBreakerOpen"
REASON_UPDATE_FAILED = "QuarantineUpdateFailed"
REASON_QUERY_FAILED = "QuarantineSignalQueryFailed"
REASON_LEDGER = "QuarantineLedgerProblem"


class Api(Protocol):
    def list_nodes(self) -> list[Any]: ...

    def patch_node(self, name: str, ops: list[dict[str, Any]]) -> Any: ...

    def get_ledger(self, namespace: str) -> Any: ...

    def apply_ledger(self, body: dict[str, Any]) -> Any: ...

    def create_event(self, body: dict[str, Any]) -> None: ...


@dataclass(frozen=True)
class CycleResult:
    leader: bool
    #: None: the signals are unknown this cycle.
    signals: tuple[Signal, ...] | None
    plan: Plan | None
    #: Nodes patched this cycle.
    quarantined: tuple[str, ...] = ()
    ledger_written: bool = False
    #: What could not be read, by input (signals, nodes, ledger).
    unknown: dict[str, str] = field(default_factory=dict)


def signals_from(samples: tuple[Sample, ...]) -> tuple[list[Signal], list[str]]:
    """The signals of the query's samples, and why each unusable sample was left out (``no-node``, ...)."""
    out: list[Signal] = []
    problems: list[str] = []
    for s in samples:
        node = s.labels.get("node", "")
        alert = s.labels.get("alertname", "")
        if not node:
            problems.append("no-node")
        elif not alert:
            problems.append("no-alertname")
        else:
            out.append(Signal(node, alert, dict(s.labels)))
    return out, problems


@dataclass(eq=False, repr=False)
class Controller(Querying[QuarantineSettings, Api, Metrics]):
    logger = log
    _: KW_ONLY
    identity: str = COMPONENT
    #: Monotonic seconds: how long since a Warning of the same kind.
    clock: Callable[[], float] = time.monotonic
    #: Unix seconds: what decisions, the ledger and Events are stamped with.
    wall_clock: Callable[[], float] = time.time

    def __post_init__(self) -> None:
        # The settings' dryRun is a dry run too.
        self.dry_run = self.dry_run or self.settings.dry_run
        settings = self.settings
        self.policy = Policy(
            max_share=settings.max_share,
            window_s=settings.breaker_window_seconds,
            release_grace_s=settings.release_grace_seconds,
            retention_s=settings.ledger_retention_seconds,
            flavors=tuple((f.name, dict(f.node_labels)) for f in settings.flavors),
            max_quarantined_share=settings.max_quarantined_share,
        )
        self.events = self.recorder(self.api.create_event, COMPONENT, clock=self.wall_clock)
        self._warnings = Throttle(settings.warning_event_interval_seconds)

    # --- events -----------------------------------------------------------------------------------------------

    def _node_event(self, node: NodeView, event_type: str, reason: str, message: str) -> None:
        involved = {"apiVersion": "v1", "kind": "Node", "name": node.name, "uid": node.uid or None}
        self.events.record(involved, CLUSTER_EVENTS_NAMESPACE, event_type, reason, message)

    def _ledger_event(self, reason: str, message: str) -> None:
        ns = self.settings.namespace
        involved = {"apiVersion": "v1", "kind": "ConfigMap", "name": LEDGER_NAME, "namespace": ns}
        self.events.record(involved, ns, "Warning", reason, message)

    def _due(self, key: str) -> bool:
        """True at most once per warningEventInterval for each kind of problem."""
        return self._warnings.due(key, self.clock())

    # --- inputs -----------------------------------------------------------------------------------------------

    def _signals(self, unknown: dict[str, str]) -> tuple[Signal, ...] | None:
        try:
            result = self.querier.query(self.settings.signal_query)
        except QueryError as exc:
            self.metrics.query_errors.labels(exc.reason).inc()
            log.warning("signal query failed; quarantining nothing", extra={"reason": exc.reason, "error": str(exc)})
            unknown["signals"] = f"signal query failed ({exc.reason}): {exc}"
            return None
        signals, problems = signals_from(result.samples)
        for problem in problems:
            self.metrics.signal_problems.labels(problem).inc()
        self.metrics.signals.set(len(result.samples))
        return tuple(signals)

    def _nodes(self, unknown: dict[str, str]) -> list[NodeView] | None:
        try:
            return [node_from(obj) for obj in self.api.list_nodes()]
        except (KubeError, TranslationError) as exc:
            self.metrics.kube_errors.labels("list-nodes").inc()
            log.warning("cannot list the nodes; changing nothing", extra={"error": str(exc)})
            unknown["nodes"] = str(exc)
            return None

    def _ledger(self, unknown: dict[str, str]) -> tuple[list[LedgerEntry], dict[str, str]] | None:
        """The ledger's entries and its data as read (to write only what changed)."""
        try:
            obj = self.api.get_ledger(self.settings.namespace)
        except KubeError as exc:
            self.metrics.kube_errors.labels("read-ledger").inc()
            log.warning("cannot read the ledger; changing nothing", extra={"error": str(exc)})
            unknown["ledger"] = str(exc)
            return None
        data = (obj or {}).get("data") if isinstance(obj, dict) else None
        entries, problems = entries_from(data)
        if problems:
            self.metrics.ledger_problems.inc(len(problems))
            log.warning("ledger entries left out", extra={"problems": problems[:10]})
        raw = {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}
        return entries, raw

    # --- outputs ----------------------------------------------------------------------------------------------

    def _quarantine(self, node: NodeView, decision: Decision, now: float) -> bool:
        if self.dry_run:
            log.info("dry run: would quarantine", extra={"node": node.name, "reason": decision.reason})
            return False
        if not self.is_leader():  # leadership may have lapsed while this cycle was reading
            log.info("lost leadership before writing; not changing the node", extra={"node": node.name})
            return False
        try:
            self.api.patch_node(node.name, quarantine_ops(node, decision.reason, decision.detail, now))
        except ConflictError as exc:
            log.info("the node changed while deciding; trying again next cycle", extra={"error": str(exc)})
            return False
        except KubeError as exc:
            self.metrics.kube_errors.labels("patch-node").inc()
            log.error("cannot quarantine the node", extra={"node": node.name, "error": str(exc)})
            if self._due(f"patch:{node.name}"):
                self._node_event(node, "Warning", REASON_UPDATE_FAILED, f"cannot quarantine ({decision.reason}): {exc}")
            return False
        self.metrics.quarantines.labels(decision.flavor or "none", decision.reason).inc()
        self._node_event(
            node,
            "Warning",
            REASON_QUARANTINED,
            f"quarantined ({decision.reason}, flavor {decision.flavor}): {decision.detail}; training leaves the node, "
            "inference stays. Out: the acceptance roles pass again (node_admission), or the kubectl step of "
            "daemons/quarantine/README.md",
        )
        log.warning(
            "quarantined a node",
            extra={"node": node.name, "flavor": decision.flavor, "reason": decision.reason, "detail": decision.detail},
        )
        return True

    def _write_ledger(self, entries: tuple[LedgerEntry, ...], read: dict[str, str]) -> bool:
        if to_data(entries) == read or self.dry_run:
            return False
        if not self.is_leader():
            return False
        try:
            self.api.apply_ledger(apply_body(self.settings.namespace, entries))
        except KubeError as exc:
            self.metrics.kube_errors.labels("apply-ledger").inc()
            log.error("cannot write the ledger", extra={"error": str(exc)})
            if self._due("ledger"):
                self._ledger_event(REASON_LEDGER, f"cannot write the ledger: {exc}")
            return False
        return True

    # --- the cycle --------------------------------------------------------------------------------------------

    def cycle(self) -> CycleResult:
        leader = self.is_leader()
        self.metrics.is_leader.set(1 if leader else 0)
        self.metrics.cycles.inc()
        unknown: dict[str, str] = {}
        signals = self._signals(unknown)
        nodes = self._nodes(unknown)
        ledger = self._ledger(unknown)
        if leader and "signals" in unknown and self._due("query"):
            self._ledger_event(REASON_QUERY_FAILED, unknown["signals"] + "; quarantining nothing")
        if nodes is None or ledger is None:
            log.log(logging.INFO if leader else logging.DEBUG, "cycle", extra={"leader": leader, "unknown": unknown})
            return CycleResult(leader, signals, None, unknown=unknown)
        previous, read = ledger
        now = self.wall_clock()
        plan = decide(nodes, signals or (), previous, now, self.policy)
        by_name = {n.name: n for n in nodes}
        applied: dict[str, Decision] = {}
        for d in plan.decisions:
            if leader:
                self.metrics.decisions.labels(d.outcome.value).inc()
            if d.outcome is Outcome.QUARANTINE and leader and self._quarantine(by_name[d.node], d, now):
                applied[d.node] = d
            elif d.outcome is Outcome.REFUSED_BY_BREAKER:
                log.warning("circuit breaker: not quarantining", extra={"node": d.node, "detail": d.detail})
                if leader and self._due(f"breaker:{d.node}"):
                    self._node_event(by_name[d.node], "Warning", REASON_BREAKER, f"not quarantined: {d.detail}")
        entries = plan.ledger
        if len(applied) != len(plan.of(Outcome.QUARANTINE)):
            entries = build_ledger(nodes, previous, now, self.policy, applied)
        written = leader and self._write_ledger(entries, read)
        if signals is not None:
            self.metrics.set_breakers(plan.breakers)
        self.metrics.set_ledger(entries, [name for name, _ in self.policy.flavors])
        log.log(
            logging.INFO if applied or written or leader else logging.DEBUG,
            "cycle",
            extra={
                "leader": leader,
                "signals": None if signals is None else len(signals),
                "decisions": {d.node: d.outcome.value for d in plan.decisions},
                "breakers_open": [b.flavor for b in plan.breakers if b.open],
                "quarantined": sorted(applied),
                "ledger_written": written,
                "unknown": unknown,
            },
        )
        return CycleResult(leader, signals, plan, tuple(sorted(applied)), written, unknown)
