"""One cycle of the checkpoint verifier, and the loop that runs a cycle every ``interval``.

A cycle: read each team namespace's ``checkpoints`` claim, its check Jobs and their pods (``translate.py``); decide
for every reported job (``decide.decide``); then, on the leader only, not in a dry run, checking leadership again
before each write: record each verdict on the claim (``record.next_record``) with a ``CheckpointVerified`` or
``CheckpointRejected`` Event, and create the check Jobs the decision starts (``job.check_job``). Then the same for
restore drills (``drills.decide_drills``): record each drill's verdict (``record.after_drill``) with a
``CheckpointRestoreDrilled`` or ``CheckpointRestoreFailed`` Event, and create the drill Jobs due
(``job.drill_job``). Last, bring each team's ``checkpoint-resume`` ConfigMap to the records (``resume.resume_changes``):
what a restart of each job resumes from.

Fail-static: a namespace whose claim or Jobs cannot be read is skipped whole (its checks do not count toward
``maxRunning`` that cycle, so a start elsewhere may exceed it by that namespace's running checks); a record that
cannot be written (a conflict: the claim changed) is written next cycle from what is read then. Every replica reads,
decides and exports the records; only the leader writes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Protocol

from contract.checkpoint_record import Record, after_drill, next_record, render_record
from contract.checkpoint_verifier_settings import CheckpointVerifierSettings, TeamQueue
from contract.constants import CHECKPOINT_CLAIM, VERIFIED_ANNOTATION_PREFIX
from contract.times import unix_seconds
from daemons.checkpoint_verifier.abandon import Waiting, given_up
from daemons.checkpoint_verifier.decide import Check, Decision, Report, State, decide
from daemons.checkpoint_verifier.drills import DrillDecision, DrillJob, DrillState, decide_drills
from daemons.checkpoint_verifier.job import check_job, drill_job
from daemons.checkpoint_verifier.metrics import Metrics
from daemons.checkpoint_verifier.resume import resume_changes
from daemons.checkpoint_verifier.translate import ClaimView, checks, claim_view, drill_jobs
from daemons.toolkit.controller import OnTheApi
from daemons.toolkit.kube import ConflictError, KubeError

log = logging.getLogger("checkpoint_verifier")

COMPONENT = "gpucluster-checkpoint-verifier"
# Event reasons (``kubectl describe pvc checkpoints``).
REASON_VERIFIED = "CheckpointVerified"
REASON_REJECTED = "CheckpointRejected"
REASON_CHECK_FAILED = "CheckpointCheckFailed"
REASON_NOT_ADMITTED = "CheckpointJobNotAdmitted"
REASON_DRILLED = "CheckpointRestoreDrilled"
REASON_DRILL_FAILED = "CheckpointRestoreFailed"


class Api(Protocol):
    def claim(self, namespace: str) -> Mapping[str, Any] | None: ...
    def list_checks(self, namespace: str) -> list[Mapping[str, Any]]: ...
    def list_check_pods(self, namespace: str) -> list[Mapping[str, Any]]: ...
    def create_check(self, body: dict[str, Any]) -> None: ...
    def delete_job(self, namespace: str, name: str) -> None: ...
    def write_record(self, namespace: str, annotation: str, value: str, resource_version: str) -> None: ...
    def resume_configmap(self, namespace: str) -> Mapping[str, Any] | None: ...
    def write_resume(self, namespace: str, data: Mapping[str, str | None]) -> None: ...
    def create_event(self, body: dict[str, Any]) -> None: ...


@dataclass(frozen=True)
class JobResult:
    namespace: str
    job: str
    state: State | DrillState
    #: ``started``, ``recorded``, ``would-start``, ``would-record``, ``failed``, or empty.
    action: str = ""
    check: str | None = None


@dataclass
class CycleResult:
    leader: bool
    #: The namespaces that could not be read, and why.
    unknown: dict[str, str] = field(default_factory=dict)
    jobs: list[JobResult] = field(default_factory=list)
    drills: list[JobResult] = field(default_factory=list)
    #: Our Jobs deleted (or, standing by or in a dry run, that would be) for Kueue never admitting them.
    given_up: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class _Read:
    claims: dict[str, ClaimView] = field(default_factory=dict)
    claim_objects: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    drills: list[DrillJob] = field(default_factory=list)
    #: Our Jobs still suspended (Kueue has not admitted them), with when they were created.
    waiting: list[Waiting] = field(default_factory=list)
    #: Each namespace's checkpoint-resume entries, as read; absent where there is no such ConfigMap or it failed.
    resume: dict[str, dict[str, str]] = field(default_factory=dict)


@dataclass(eq=False, repr=False)
class Controller(OnTheApi[CheckpointVerifierSettings, Api, Metrics]):
    logger = log
    _: KW_ONLY
    #: Measures a cycle's duration.
    monotonic: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        self.teams: dict[str, TeamQueue] = {t.namespace: t for t in self.settings.teams}
        self.events = self.recorder(self.api.create_event, COMPONENT, clock=self.clock)
        #: The check Jobs already counted as ended with no verdict (those still listed).
        self.incomplete: set[str] = set()

    # --- reads ------------------------------------------------------------------------------------------------

    def _read(self, result: CycleResult) -> _Read:
        read = _Read()
        for ns in self.teams:
            op = "read-claim"
            try:
                claim = self.api.claim(ns)
                if claim is None:
                    continue
                op = "list-checks"
                jobs = self.api.list_checks(ns)
                op = "list-pods"
                pods = self.api.list_check_pods(ns) if jobs else []
            except KubeError as exc:
                self.metrics.kube_errors.labels(op).inc()
                result.unknown[ns] = str(exc)
                continue
            try:
                configmap = self.api.resume_configmap(ns)
            except KubeError as exc:
                self.metrics.kube_errors.labels("read-resume").inc()
                result.problems.append(f"{ns}: cannot read its checkpoint-resume ConfigMap ({exc})")
            else:
                if configmap is None:
                    result.problems.append(
                        f"{ns}: no checkpoint-resume ConfigMap: a restart is not told where to resume"
                    )
                else:
                    data = configmap.get("data")
                    read.resume[ns] = {str(k): v for k, v in (data or {}).items() if isinstance(v, str)}
            view = claim_view(ns, claim, self.settings.restore_drill.stale_after_seconds)
            read.claims[ns] = view
            read.claim_objects[ns] = claim
            read.checks += checks(ns, jobs, pods, result.problems, read.waiting)
            read.drills += drill_jobs(ns, jobs, pods, result.problems, read.waiting)
            result.problems += view.problems
        for problem in result.problems:
            self.metrics.record_problems.inc()
            log.info("left alone", extra={"problem": problem})
        return read

    # --- the cycle --------------------------------------------------------------------------------------------

    def cycle(self) -> CycleResult:
        started = self.monotonic()
        leader = self.is_leader()
        self.metrics.is_leader.set(1 if leader else 0)
        self.metrics.cycles.inc()
        result = CycleResult(leader)
        read = self._read(result)
        reports: list[Report] = [r for view in read.claims.values() for r in view.reports]
        records = {key: record for view in read.claims.values() for key, record in view.records.items()}
        now = self.clock()
        self._give_up(read, now, result)
        decisions = decide(
            reports,
            records,
            read.checks,
            now=now,
            max_running=self.settings.max_running,
            retry_after=self.settings.retry_after_seconds,
        )
        self._count_incomplete(read.checks)
        self.metrics.state.clear()
        for d in decisions:
            self.metrics.state.labels(d.namespace, d.job, d.state.value).set(1)
            action = ""
            if d.state is State.RECORD:
                action = self._record(d, read, records, now) if self._writes() else "would-record"
            elif d.state is State.START:
                action = self._start(d) if self._writes() else "would-start"
            if action:
                log.info(action, extra={"job": f"{d.namespace}/{d.job}", "check": d.check, "state": d.state.value})
            result.jobs.append(JobResult(d.namespace, d.job, d.state, action, d.check))
        if self.settings.restore_drill.enabled:
            self._drills(read, reports, records, now, result)
        if self._writes():
            self._resume(read, records)
        self._export(records, reports, now)
        result.seconds = self.monotonic() - started
        self.metrics.cycle_seconds.observe(result.seconds)
        return result

    def _give_up(self, read: _Read, now: float, result: CycleResult) -> None:
        """Delete our Jobs Kueue never admitted within their deadline; the decisions then go on without them."""
        deadlines = {
            "check": self.settings.check_deadline_seconds,
            "drill": self.settings.restore_drill.deadline_seconds,
        }
        gone: set[tuple[str, str]] = set()
        for w in given_up(read.waiting, now=now, deadlines=deadlines):
            if not self._writes():
                result.given_up.append(f"would delete {w.namespace}/{w.name}")
                continue
            try:
                self.api.delete_job(w.namespace, w.name)
            except KubeError as exc:
                self.metrics.kube_errors.labels("delete-job").inc()
                log.warning(
                    "cannot delete a job never admitted", extra={"job": f"{w.namespace}/{w.name}", "error": str(exc)}
                )
                continue
            gone.add((w.namespace, w.name))
            result.given_up.append(f"{w.namespace}/{w.name}")
            self.metrics.given_up.labels(w.kind).inc()
            waited = now - (w.suspended_since or now)
            message = (
                f"{w.job}: {w.kind} job {w.name} was not admitted by Kueue in {waited:.0f}s (its queue stopped, or no "
                "CPU quota left for it?); deleted, it is run again"
            )
            self.events.record(self._involved(w.namespace, read), w.namespace, "Warning", REASON_NOT_ADMITTED, message)
        if gone:
            read.checks = [c for c in read.checks if (c.namespace, c.name) not in gone]
            read.drills = [d for d in read.drills if (d.namespace, d.name) not in gone]

    def _writes(self) -> bool:
        return not self.dry_run and self.is_leader()

    def _count_incomplete(self, listed: list[Check]) -> None:
        ended = {f"{c.namespace}/{c.name}" for c in listed if not c.running and c.verdict is None}
        for name in sorted(ended - self.incomplete):
            self.metrics.incomplete.inc()
            log.warning("check ended with no verdict", extra={"check": name})
        self.incomplete = ended

    def _drills(
        self,
        read: _Read,
        reports: list[Report],
        records: dict[tuple[str, str], Record],
        now: float,
        result: CycleResult,
    ) -> None:
        drill = self.settings.restore_drill
        decisions = decide_drills(
            reports,
            records,
            read.drills,
            {key: every for view in read.claims.values() for key, every in view.every.items()},
            now=now,
            default_every=drill.every_seconds,
            stale_after=drill.stale_after_seconds,
            max_running=drill.max_running,
            retry_after=self.settings.retry_after_seconds,
        )
        self.metrics.drill_state.clear()
        for d in decisions:
            self.metrics.drill_state.labels(d.namespace, d.job, d.state.value).set(1)
            action = ""
            if d.state is DrillState.RECORD:
                action = self._record_drill(d, read, records, now) if self._writes() else "would-record"
            elif d.state is DrillState.START:
                action = self._start_drill(d) if self._writes() else "would-start"
            if action:
                log.info(action, extra={"job": f"{d.namespace}/{d.job}", "drill": d.drill, "state": d.state.value})
            result.drills.append(JobResult(d.namespace, d.job, d.state, action, d.drill))

    # --- writes -----------------------------------------------------------------------------------------------

    def _write(self, namespace: str, job: str, record: Record, read: _Read) -> str:
        """Write ``record`` as ``job``'s: empty when written, ``conflict`` or ``failed`` when not."""
        try:
            self.api.write_record(
                namespace,
                f"{VERIFIED_ANNOTATION_PREFIX}{job}",
                render_record(record),
                read.claims[namespace].resource_version,
            )
        except ConflictError:
            return "conflict"  # the claim changed since it was read (a new report): recorded next cycle
        except KubeError as exc:
            self.metrics.kube_errors.labels("write-record").inc()
            log.warning("cannot write a record", extra={"job": f"{namespace}/{job}", "error": str(exc)})
            return "failed"
        return ""

    def _involved(self, namespace: str, read: _Read) -> dict[str, str]:
        claim = read.claim_objects[namespace]
        return {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "name": CHECKPOINT_CLAIM,
            "namespace": namespace,
            "uid": str((claim.get("metadata") or {}).get("uid", "")),
        }

    def _record(self, d: Decision, read: _Read, records: dict[tuple[str, str], Record], now: float) -> str:
        assert d.verdict is not None
        assert d.report is not None
        key = (d.namespace, d.job)
        record = next_record(records.get(key), d.verdict, d.report, now)
        failed = self._write(d.namespace, d.job, record, read)
        if failed:
            return "" if failed == "conflict" else failed
        records[key] = record
        outcome = "verified" if d.verdict.ok else "rejected"
        self.metrics.recorded.labels(outcome).inc()
        involved = self._involved(d.namespace, read)
        if d.verdict.ok:
            self.events.record(involved, d.namespace, "Normal", REASON_VERIFIED, f"{d.job}: {d.verdict.summary}")
        else:
            message = f"{d.job}: {d.verdict.summary}; a restart resumes from " + (
                f"step {record.verified.step}" if record.verified is not None else "no verified checkpoint"
            )
            self.events.record(involved, d.namespace, "Warning", REASON_REJECTED, message)
        return "recorded"

    def _start(self, d: Decision) -> str:
        assert d.check is not None
        assert d.report is not None
        body = check_job(
            self.settings,
            self.teams[d.namespace],
            name=d.check,
            job=d.job,
            report=d.report,
            last_verified_step=d.last_verified_step,
        )
        return self._create(body, "check", self.metrics.started)

    def _create(self, body: dict[str, Any], kind: str, started: Any) -> str:
        """Create the ``kind`` Job ``body``: ``started``, ``failed``, or empty when it is already there."""
        try:
            self.api.create_check(body)
        except ConflictError:
            return ""  # already there: another replica, or this one before a restart, created it
        except KubeError as exc:
            self.metrics.kube_errors.labels(f"create-{kind}").inc()
            name = f"{body['metadata']['namespace']}/{body['metadata']['name']}"
            log.warning(f"cannot create a {kind} job", extra={"job": name, "error": str(exc)})
            return "failed"
        started.inc()
        return "started"

    def _resume(self, read: _Read, records: Mapping[tuple[str, str], Record]) -> None:
        for ns, data in read.resume.items():
            mine = {job: r for (n, job), r in records.items() if n == ns}
            changes = resume_changes(mine, read.claims[ns].unreadable, data)
            if not changes:
                continue
            try:
                self.api.write_resume(ns, changes)
            except KubeError as exc:
                self.metrics.kube_errors.labels("write-resume").inc()
                log.warning("cannot write where to resume", extra={"namespace": ns, "error": str(exc)})
                continue
            self.metrics.resume_writes.inc()
            log.info("resume entries written", extra={"namespace": ns, "keys": sorted(changes)})

    def _record_drill(self, d: DrillDecision, read: _Read, records: dict[tuple[str, str], Record], now: float) -> str:
        assert d.verdict is not None
        assert d.drill is not None
        key = (d.namespace, d.job)
        previous = records[key]
        record = after_drill(previous, d.verdict, d.drill, now)
        failed = self._write(d.namespace, d.job, record, read)
        if failed:
            return "" if failed == "conflict" else failed
        records[key] = record
        self.metrics.drills_recorded.labels("restored" if d.verdict.ok else "failed").inc()
        involved = self._involved(d.namespace, read)
        v = d.verdict
        if v.ok:
            message = f"{d.job}: {v.directory} restored whole: {v.bytes_read} bytes in {v.seconds:.1f}s"
            self.events.record(involved, d.namespace, "Normal", REASON_DRILLED, message)
        else:
            message = f"{d.job}: {v.directory} does not restore: {v.summary}"
            self.events.record(involved, d.namespace, "Warning", REASON_DRILL_FAILED, message)
        return "recorded"

    def _start_drill(self, d: DrillDecision) -> str:
        assert d.drill is not None
        assert d.directory is not None
        assert d.after is not None
        body = drill_job(
            self.settings, self.teams[d.namespace], name=d.drill, job=d.job, directory=d.directory, after=d.after
        )
        return self._create(body, "drill", self.metrics.drills_started)

    # --- metrics ----------------------------------------------------------------------------------------------

    def _export(self, records: Mapping[tuple[str, str], Record], reports: list[Report], now: float) -> None:
        for family in (self.metrics.verified_step, self.metrics.verified_report, self.metrics.last_ok):
            family.clear()
        self.metrics.last_step.clear()
        self._export_drills(records, reports, now)
        for (ns, job), record in records.items():
            if record.verified is not None:
                self.metrics.verified_step.labels(ns, job).set(record.verified.step)
                self.metrics.verified_report.labels(ns, job).set(unix_seconds(record.verified.reported) or 0.0)
            self.metrics.last_ok.labels(ns, job).set(1 if record.last.ok else 0)
            self.metrics.last_step.labels(ns, job).set(-1 if record.last.step is None else record.last.step)

    def _export_drills(self, records: Mapping[tuple[str, str], Record], reports: list[Report], now: float) -> None:
        """The drills of the jobs still checkpointing (a report within staleAfter) that have a verified checkpoint:
        the last good drill's time, or, until one has passed, when the verified checkpoint was checked."""
        m = self.metrics
        for family in (m.drill_last_ok, m.drill_last_good, m.drill_seconds, m.drill_bytes, m.drill_step):
            family.clear()
        if not self.settings.restore_drill.enabled:
            return
        stale = self.settings.restore_drill.stale_after_seconds
        active = {(r.namespace, r.job) for r in reports if r.at is not None and now - r.at <= stale}
        for (ns, job), record in records.items():
            if (ns, job) not in active or record.verified is None:
                continue
            drill = record.drill
            good = drill.last_good if drill is not None and drill.last_good is not None else record.verified.checked
            m.drill_last_good.labels(ns, job).set(unix_seconds(good) or 0.0)
            if drill is None:
                continue
            m.drill_last_ok.labels(ns, job).set(1 if drill.ok else 0)
            m.drill_seconds.labels(ns, job).set(drill.seconds)
            m.drill_bytes.labels(ns, job).set(drill.bytes_read)
            m.drill_step.labels(ns, job).set(-1 if drill.step is None else drill.step)


def summary(result: CycleResult) -> dict[str, object]:
    """What ``--once`` prints after ``leader``."""
    return {
        "unknown": result.unknown,
        "jobs": [
            {"namespace": j.namespace, "job": j.job, "state": j.state.value, "action": j.action, "check": j.check}
            for j in result.jobs
        ],
        "drills": [
            {"namespace": j.namespace, "job": j.job, "state": j.state.value, "action": j.action, "drill": j.check}
            for j in result.drills
        ],
        "givenUp": result.given_up,
        "problems": result.problems,
        "seconds": round(result.seconds, 3),
    }
