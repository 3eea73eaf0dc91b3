"""What the verifier reads, from the API's objects into the decision's values (pure).

:func:`claim_view` reads a ``checkpoints`` claim's reports, records and the jobs' own drill intervals;
:func:`checks` reads our check Jobs and :func:`drill_jobs` our restore drill Jobs, each with the termination messages
of their pods. Whatever does not read (a report's time, a record, a verdict, an interval) is named in ``problems``
and left alone, never taken for a pass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from contract.checkpoint_record import Record, read_drill_verdict, read_record, read_verdict
from contract.constants import CHECKPOINT_ANNOTATION_PREFIX, VERIFIED_ANNOTATION_PREFIX
from contract.controllers.checkpoint_verifier import (
    CHECK_CONTAINER,
    CHECK_OF_LABEL,
    CHECK_REPORT_ANNOTATION,
    DRILL_AFTER_ANNOTATION,
    DRILL_CONTAINER,
    DRILL_EVERY_ANNOTATION_PREFIX,
    DRILL_KIND,
    KIND_LABEL,
)
from contract.model import parse_duration
from contract.times import unix_seconds
from daemons.checkpoint_verifier.abandon import Waiting
from daemons.checkpoint_verifier.decide import Check, Report
from daemons.checkpoint_verifier.drills import DrillJob

#: The label the Job controller puts on a Job's pods: the Job's name.
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"


@dataclass
class ClaimView:
    namespace: str
    resource_version: str
    reports: list[Report] = field(default_factory=list)
    records: dict[tuple[str, str], Record] = field(default_factory=dict)
    #: The jobs' own drill intervals (seconds).
    every: dict[tuple[str, str], float] = field(default_factory=dict)
    #: The jobs whose record is there but does not read.
    unreadable: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _strings(value: Any) -> dict[str, str]:
    return {str(k): v for k, v in value.items() if isinstance(v, str)} if isinstance(value, Mapping) else {}


def _every(text: str, longest: float) -> float | None:
    """A job's own drill interval: a duration of at least a minute and at most ``longest`` (staleAfter)."""
    try:
        seconds = parse_duration(text)
    except ValueError:
        return None
    return seconds if 60 <= seconds <= longest else None


def claim_view(namespace: str, claim: Mapping[str, Any], longest_every: float = float("inf")) -> ClaimView:
    meta = _meta(claim)
    view = ClaimView(namespace, str(meta.get("resourceVersion", "")))
    for key, value in sorted(_strings(meta.get("annotations")).items()):
        if key.startswith(CHECKPOINT_ANNOTATION_PREFIX):
            job = key.removeprefix(CHECKPOINT_ANNOTATION_PREFIX)
            at = unix_seconds(value)
            if at is None:
                view.problems.append(f"{key}: {value[:64]!r} is no RFC 3339 time")
            view.reports.append(Report(namespace, job, value, at))
        elif key.startswith(VERIFIED_ANNOTATION_PREFIX):
            job = key.removeprefix(VERIFIED_ANNOTATION_PREFIX)
            record = read_record(value)
            if record is None:
                view.unreadable.add(job)
                view.problems.append(f"{key}: not a record the verifier writes")
            else:
                view.records[(namespace, job)] = record
        elif key.startswith(DRILL_EVERY_ANNOTATION_PREFIX):
            job = key.removeprefix(DRILL_EVERY_ANNOTATION_PREFIX)
            every = _every(value, longest_every)
            if every is None:
                view.problems.append(
                    f"{key}: {value[:64]!r} is no duration from 1m to staleAfter; the stack's interval holds"
                )
            else:
                view.every[(namespace, job)] = every
    return view


def _finished_at(job: Mapping[str, Any]) -> float | None:
    status = job.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    for c in conditions if isinstance(conditions, list) else []:
        if isinstance(c, Mapping) and c.get("type") in ("Complete", "Failed") and c.get("status") == "True":
            return unix_seconds(c.get("lastTransitionTime")) or 0.0
    return None


def _messages(pods: Iterable[Mapping[str, Any]], container: str) -> dict[str, str]:
    """Each Job's name -> its ``container``'s termination message (the last pod's that has one)."""
    out: dict[str, str] = {}
    for pod in pods:
        job = _strings(_meta(pod).get("labels")).get(JOB_NAME_LABEL)
        status = pod.get("status")
        statuses = status.get("containerStatuses") if isinstance(status, Mapping) else None
        for s in statuses if isinstance(statuses, list) else []:
            if not isinstance(s, Mapping) or s.get("name") != container:
                continue
            state = s.get("state")
            terminated = state.get("terminated") if isinstance(state, Mapping) else None
            message = terminated.get("message") if isinstance(terminated, Mapping) else None
            if job and isinstance(message, str) and message:
                out[job] = message
    return out


_V = TypeVar("_V")


@dataclass(frozen=True)
class _Ours:
    name: str
    job: str
    #: The Job's annotation that says which report or turn it is of.
    of: str
    attempt: int
    finished_at: float | None
    #: When it was created, while it is still suspended (Kueue has not admitted it); None once it is not.
    suspended_since: float | None


def _suspended_since(job: Mapping[str, Any]) -> float | None:
    spec = job.get("spec")
    if not isinstance(spec, Mapping) or spec.get("suspend") is not True:
        return None
    return unix_seconds(_meta(job).get("creationTimestamp"))


def _ours(namespace: str, job: Mapping[str, Any], annotation: str, what: str, problems: list[str]) -> _Ours | None:
    """A Job of the verifier's: its name, training job, annotation and try; None (named in ``problems``) when not."""
    meta = _meta(job)
    name = str(meta.get("name", ""))
    training_job = _strings(meta.get("labels")).get(CHECK_OF_LABEL)
    of = _strings(meta.get("annotations")).get(annotation)
    suffix = name.rsplit("-", 1)[-1]
    if not name or not training_job or of is None or not suffix.isdigit():
        problems.append(f"job {namespace}/{name}: not a {what} job of the verifier")
        return None
    finished = _finished_at(job)
    return _Ours(name, training_job, of, int(suffix), finished, _suspended_since(job) if finished is None else None)


def _verdict(
    namespace: str, ours: _Ours, messages: Mapping[str, str], read: Callable[[str], _V | None], problems: list[str]
) -> _V | None:
    """The verdict of a finished Job (its pod's termination message); None while it runs or when it left none."""
    if ours.finished_at is None or ours.name not in messages:
        return None
    verdict = read(messages[ours.name])
    if verdict is None:
        problems.append(f"job {namespace}/{ours.name}: its termination message is no verdict")
    return verdict


def checks(
    namespace: str,
    jobs: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    problems: list[str],
    waiting: list[Waiting] | None = None,
) -> list[Check]:
    """Our check Jobs with their verdicts; each one still suspended is also added to ``waiting``."""
    messages = _messages(pods, CHECK_CONTAINER)
    out: list[Check] = []
    for job in jobs:
        if _strings(_meta(job).get("labels")).get(KIND_LABEL) == DRILL_KIND:
            continue
        ours = _ours(namespace, job, CHECK_REPORT_ANNOTATION, "check", problems)
        if ours is None:
            continue
        verdict = _verdict(namespace, ours, messages, read_verdict, problems)
        if waiting is not None and ours.suspended_since is not None:
            waiting.append(Waiting(namespace, ours.name, ours.job, "check", ours.suspended_since))
        running = ours.finished_at is None
        out.append(Check(ours.name, namespace, ours.job, ours.of, ours.attempt, running, verdict, ours.finished_at))
    return out


def drill_jobs(
    namespace: str,
    jobs: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    problems: list[str],
    waiting: list[Waiting] | None = None,
) -> list[DrillJob]:
    """Our restore drill Jobs (``checkpoint.gpucluster.io/kind: restore-drill``) with their verdicts; each one still
    suspended is also added to ``waiting``."""
    messages = _messages(pods, DRILL_CONTAINER)
    out: list[DrillJob] = []
    for job in jobs:
        if _strings(_meta(job).get("labels")).get(KIND_LABEL) != DRILL_KIND:
            continue
        ours = _ours(namespace, job, DRILL_AFTER_ANNOTATION, "drill", problems)
        if ours is None:
            continue
        verdict = _verdict(namespace, ours, messages, read_drill_verdict, problems)
        if waiting is not None and ours.suspended_since is not None:
            waiting.append(Waiting(namespace, ours.name, ours.job, "drill", ours.suspended_since))
        running = ours.finished_at is None
        out.append(DrillJob(ours.name, namespace, ours.job, ours.of, ours.attempt, running, verdict, ours.finished_at))
    return out
