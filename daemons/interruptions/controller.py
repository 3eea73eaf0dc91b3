"""One cycle of the interruption accounting daemon, and the loop that runs cycles every ``interval``.

A cycle: read the training JobSets, their pods, the nodes, the Workloads, the Events on JobSets and the checkpoint
claims (any read failing: fail-static, the last figures stay and nothing is written); rebuild each job's ledger
(``ledger.reconcile``) from the objects and the record (the annotation, or this process's own copy when that is
ahead: a standby keeps the times it saw); compute the figures; and, on the leader only, after checking leadership
once more: stop a job past its restart bound (``spec.active: false`` on its Workload, a Warning Event
``RestartBoundReached`` on the JobSet), write each ledger annotation that changed and the reliability ConfigMap
when it changed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from contract.constants import TRAINING_JOB_LABEL
from contract.interruptions_settings import FIELD_MANAGER, InterruptionsSettings
from daemons.interruptions import bound
from daemons.interruptions.classify import NodeState
from daemons.interruptions.client import KubeApi
from daemons.interruptions.ettr import ClusterTime, JobTime, cluster_time, job_time
from daemons.interruptions.ledger import Record, counts, parse_record, reconcile, render
from daemons.interruptions.metrics import Figures, JobFigures, Metrics
from daemons.interruptions.model import BOUND_REASON, JOBSET_API, JobView, WorkloadView
from daemons.interruptions.translate import job_view, node_state, owner_uid, workload_view
from daemons.toolkit.controller import OnTheApi
from daemons.toolkit.events import format_time
from daemons.toolkit.kube import ConflictError, KubeError

log = logging.getLogger("interruptions")


@dataclass(frozen=True)
class Observation:
    jobs: tuple[tuple[JobView, str], ...]  # the job, and its JobSet's resourceVersion
    problems: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CycleResult:
    leader: bool
    fail_static: bool
    figures: Figures | None
    records: Mapping[str, Record] = field(default_factory=dict)
    stopped: tuple[str, ...] = ()
    written: tuple[str, ...] = ()
    problems: Mapping[str, str] = field(default_factory=dict)


def resume_command(namespace: str, workload: str) -> str:
    return f'kubectl -n {namespace} patch workload {workload} --type merge -p \'{{"spec":{{"active":true}}}}\''


def _weight(r: Record) -> tuple[int, int]:
    return (r.restarts + r.towards_max + sum(r.evictions.values()), len(r.items))


def choose(annotation: Record, memory: Record | None) -> Record:
    """The record to go on from: this process's own when it accounts for at least as much as the annotation (it
    keeps the times it saw while standing by), else the annotation; the bound's state from either."""
    if memory is None or memory.uid != annotation.uid:
        return annotation
    base, other = (memory, annotation) if _weight(memory) >= _weight(annotation) else (annotation, memory)
    return replace(
        base,
        stopped_at=base.stopped_at if base.stopped_at is not None else other.stopped_at,
        bound_from=max((t for t in (base.bound_from, other.bound_from) if t is not None), default=None),
        first_admitted=min((t for t in (base.first_admitted, other.first_admitted) if t is not None), default=None),
        first_running=min((t for t in (base.first_running, other.first_running) if t is not None), default=None),
    )


def checkpoint_age(job: JobView, now: float) -> float | None:
    """While every pod runs: seconds since the last checkpoint that counts, or, while none does (none reported, or
    none verified where the verifier runs), since the gang began running: a job that never checkpoints, or whose
    checks never pass, is as stale as one that stopped. None while not every pod runs."""
    if job.all_running_since is None:
        return None
    return now - (job.checkpoint_at if job.checkpoint_at is not None else job.all_running_since)


def reliability_data(cluster: ClusterTime) -> dict[str, str] | None:
    """The reliability ConfigMap's data, less ``updatedAt`` (the contract of issue 15); ``nodeMtbiSeconds`` is 0
    before the first interruption. None while interruptions have happened but no training time yet (an MTBI of 0
    would say every node fails at once): nothing is written, and readers keep the last figures or their prior."""
    mtbi = cluster.node_mtbi_s
    if cluster.interruptions > 0 and (mtbi is None or mtbi <= 0):
        return None
    return {
        "nodeMtbiSeconds": f"{mtbi:.1f}" if mtbi is not None else "0",
        "interruptions": str(cluster.interruptions),
        "nodeSeconds": f"{cluster.node_seconds:.1f}",
    }


class Controller(OnTheApi[InterruptionsSettings, KubeApi, Metrics]):
    logger = log

    def __post_init__(self) -> None:
        self.events = self.recorder(self.api.create_event, FIELD_MANAGER, clock=self.clock)
        self._records: dict[str, Record] = {}
        self._written_reliability: dict[str, str] | None = None

    # ---------------------------------------------------------------- reads

    def observe(self) -> Observation | None:
        """Every read, or None (and the problems logged and counted) when one fails: then nothing is known."""
        reads: dict[str, Callable[[], list[Mapping[str, Any]]]] = {
            "jobsets": self.api.list_jobsets,
            "pods": self.api.list_pods,
            "nodes": self.api.list_nodes,
            "workloads": self.api.list_workloads,
            "events": self.api.list_jobset_events,
            "claims": self.api.list_checkpoint_claims,
        }
        got: dict[str, list[Mapping[str, Any]]] = {}
        for what, read in reads.items():
            try:
                got[what] = read()
            except KubeError as exc:
                self.metrics.cycle_errors.labels(what).inc()
                log.warning(
                    "cannot read; keeping the last figures, writing nothing", extra={"read": what, "error": str(exc)}
                )
                return None
        nodes: dict[str, NodeState] = {}
        for obj in got["nodes"]:
            try:
                name, state = node_state(obj, self.settings.quarantine_taint_keys)
                nodes[name] = state
            except ValueError as exc:
                log.warning("cannot read a node", extra={"error": str(exc)})
        workloads: dict[str, WorkloadView] = {}
        for obj in got["workloads"]:
            uid = owner_uid(obj)
            if uid is None:
                continue
            try:
                workloads[uid] = workload_view(obj)
            except ValueError as exc:
                log.warning("cannot read a workload", extra={"error": str(exc)})
        claims: dict[str, Mapping[str, str]] = {}
        for obj in got["claims"]:
            meta = obj.get("metadata") or {}
            if isinstance(meta, Mapping) and isinstance(meta.get("namespace"), str):
                ann = meta.get("annotations") or {}
                claims[str(meta["namespace"])] = ann if isinstance(ann, Mapping) else {}
        jobs: list[tuple[JobView, str]] = []
        problems: dict[str, str] = {}
        for obj in got["jobsets"]:
            meta = obj.get("metadata") or {}
            if not isinstance(meta, Mapping) or TRAINING_JOB_LABEL not in (meta.get("labels") or {}):
                continue
            ns = str(meta.get("namespace", ""))
            try:
                job = job_view(
                    obj,
                    pods=[p for p in got["pods"] if (p.get("metadata") or {}).get("namespace") == ns],
                    nodes=nodes,
                    workload=workloads.get(str(meta.get("uid", ""))),
                    events=[e for e in got["events"] if (e.get("metadata") or {}).get("namespace") == ns],
                    claim_annotations=claims.get(ns, {}),
                    verified_only=self.settings.verified_checkpoints_only,
                )
            except ValueError as exc:
                problems[f"{ns}/{meta.get('name', '?')}"] = str(exc)
                continue
            jobs.append((job, str(meta.get("resourceVersion", ""))))
        return Observation(tuple(jobs), problems)

    # ---------------------------------------------------------------- writes

    def _event(self, job: JobView, reason: str, message: str) -> None:
        involved = {"apiVersion": JOBSET_API, "kind": "JobSet", "name": job.name, "namespace": job.namespace}
        involved["uid"] = job.uid
        self.events.record(involved, job.namespace, "Warning", reason, message)

    def _stop(self, job: JobView, decision: bound.BoundDecision) -> bool:
        wl = job.workload
        if wl is None:
            return False
        try:
            self.api.deactivate_workload(wl.namespace, wl.name)
        except KubeError as exc:
            self.metrics.writes.labels("workload", "error").inc()
            log.warning("cannot stop a job at its restart bound", extra={"job": job.key, "error": str(exc)})
            return False
        self.metrics.writes.labels("workload", "applied").inc()
        self.metrics.bound_stops.inc()
        self._event(
            job,
            BOUND_REASON,
            f"{decision.restarts} restarts in the last hour, more than the bound of {decision.bound} "
            f"(gpucluster.io/max-restarts-per-hour); causes: {decision.causes_text()}. Stopped: Workload {wl.name} "
            f"deactivated, its quota freed. Fix the cause, then resume: {resume_command(wl.namespace, wl.name)}",
        )
        log.warning("stopped a job at its restart bound", extra={"job": job.key, "restarts": decision.restarts})
        return True

    def _write_record(self, job: JobView, text: str, version: str) -> bool:
        try:
            self.api.write_record(job.namespace, job.name, text, version)
        except ConflictError:
            self.metrics.writes.labels("record", "conflict").inc()  # changed since read: the next cycle writes it
            return False
        except KubeError as exc:
            self.metrics.writes.labels("record", "error").inc()
            log.warning("cannot write the ledger annotation", extra={"job": job.key, "error": str(exc)})
            return False
        self.metrics.writes.labels("record", "applied").inc()
        return True

    def _write_reliability(self, cluster: ClusterTime) -> bool:
        data = reliability_data(cluster)
        if data is None or data == self._written_reliability:
            return False
        try:
            self.api.put_config_map(
                self.settings.namespace,
                self.settings.reliability_config_map,
                {**data, "updatedAt": format_time(self.clock())},
            )
        except KubeError as exc:
            self.metrics.writes.labels("reliability", "error").inc()
            log.warning("cannot write the reliability ConfigMap", extra={"error": str(exc)})
            return False
        self.metrics.writes.labels("reliability", "applied").inc()
        self._written_reliability = data
        return True

    # ---------------------------------------------------------------- the cycle

    def cycle(self) -> CycleResult:
        started = self.timer()
        self.metrics.cycles.inc()
        observed = self.observe()
        leader = self.is_leader()
        self.metrics.is_leader.set(1 if leader else 0)
        if observed is None:
            return CycleResult(leader, True, self.metrics.figures.figures)
        now = self.clock()
        writing = leader and not self.dry_run
        records: dict[str, Record] = {}
        times: list[JobTime] = []
        jobs: list[JobFigures] = []
        stopped: list[str] = []
        written: list[str] = []
        problems = dict(observed.problems)
        for job, version in observed.jobs:
            annotation, problem = parse_record(job.record_text, job.uid)
            if problem:
                problems[job.key] = problem
            record = reconcile(choose(annotation, self._records.get(job.uid)), job, now)
            wl = job.workload
            limit = (
                job.max_restarts_per_hour
                if job.max_restarts_per_hour is not None
                else self.settings.default_max_restarts_per_hour
            )
            decision = bound.decide(
                [(i.at, i.cause) for i in record.items if i.restart],
                now,
                limit,
                since=record.bound_from,
                active=wl is not None and wl.active and record.stopped_at is None,
            )
            if decision.stop and writing and self.is_leader() and self._stop(job, decision):
                record = replace(record, stopped_at=now)
                stopped.append(job.key)
            text = render(record, self.settings.ledger_entries)
            if writing and text != job.record_text and self.is_leader() and self._write_record(job, text, version):
                written.append(job.key)
            self._records[job.uid] = record
            records[job.key] = record
            by_cause = counts(job, record.hangs, record.paired)
            t = job_time(
                record,
                now,
                created_at=job.created_at,
                nodes=job.nodes,
                interval_s=job.checkpoint_interval_s,
                write_s=(
                    job.checkpoint_write_s
                    if job.checkpoint_write_s is not None
                    else self.settings.checkpoint_write_seconds
                ),
                interruptions=sum(by_cause.values()),
            )
            times.append(t)
            last = record.items[-1] if record.items else None
            jobs.append(
                JobFigures(
                    job.namespace,
                    job.name,
                    job.team,
                    by_cause,
                    bound.decide([(i.at, i.cause) for i in record.items if i.restart], now, limit).restarts,
                    last.recovery_s if last is not None else None,
                    sum(i.work_lost_s for i in record.items),
                    t.ettr,
                    checkpoint_age(job, now),
                    job.checkpoint_interval_s,
                    limit,
                    record.stopped_at is not None,
                )
            )
        uids = {job.uid for job, _ in observed.jobs}
        self._records = {uid: r for uid, r in self._records.items() if uid in uids}
        cluster = cluster_time(times)
        figures = Figures(jobs, cluster.ettr, cluster.node_mtbi_s)
        self.metrics.figures.figures = figures
        if writing and self.is_leader() and self._write_reliability(cluster):
            written.append("reliability")
        self.metrics.cycle_seconds.observe(self.timer() - started)
        log.log(
            logging.INFO if stopped or written else logging.DEBUG,
            "cycle",
            extra={"leader": leader, "jobs": len(jobs), "stopped": stopped, "written": written, "problems": problems},
        )
        return CycleResult(leader, False, figures, records, tuple(stopped), tuple(written), problems)
