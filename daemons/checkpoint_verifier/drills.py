"""When each job's verified checkpoint is drilled, decided from what the verifier read: pure (the clock is passed in).

A restore drill reads a job's latest verified checkpoint whole, as a restart would (``drill.py``). For each job
whose record names a verified checkpoint, in order:

1. the job has not reported a checkpoint for ``staleAfter`` (or its report is gone or does not read): it is done
   and not drilled (``done``);
2. a drill of it is running: wait (``drilling``);
3. a drill of this turn ended with a verdict: record it (``record``). A turn is the time since the last recorded
   drill (the record's ``drill.finished``, ``none`` before the first): each drill Job is annotated with the turn it
   belongs to, so one recorded starts the next turn and is never recorded twice;
4. the next drill is not due yet (``every`` after the last recorded, the job's own interval when it set one): wait
   (``scheduled``); the first is due as soon as the job has a verified checkpoint;
5. a drill of this turn ended with no verdict less than ``retryAfter`` ago: wait (``retry-later``);
6. otherwise start one (``start``), unless ``maxRunning`` drills already run (``queued``: the longest overdue
   first).

Fail-static: a namespace that could not be read is not passed in; a record that does not read names no verified
checkpoint, so nothing is drilled for it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from contract.checkpoint_record import DrillVerdict, Record
from contract.times import unix_seconds
from daemons.checkpoint_verifier.decide import Report

#: The turn before any drill was recorded.
FIRST_TURN = "none"


class DrillState(StrEnum):
    DONE = "done"
    DRILLING = "drilling"
    RECORD = "record"
    SCHEDULED = "scheduled"
    RETRY_LATER = "retry-later"
    START = "start"
    QUEUED = "queued"


@dataclass(frozen=True)
class DrillJob:
    """One drill Job of ours, as listed."""

    name: str
    namespace: str
    job: str
    #: The turn it belongs to (its ``drill-after`` annotation) and which try of it this is (its name's suffix).
    after: str
    attempt: int
    running: bool
    verdict: DrillVerdict | None
    finished_at: float | None


@dataclass(frozen=True)
class DrillDecision:
    namespace: str
    job: str
    state: DrillState
    #: ``start``: the Job's name, the checkpoint's directory and the turn; ``record``: the Job recorded.
    drill: str | None = None
    directory: str | None = None
    after: str | None = None
    verdict: DrillVerdict | None = None
    #: ``scheduled``, ``retry-later``: when.
    not_before: float | None = None


def drill_name(namespace: str, job: str, after: str, attempt: int) -> str:
    """A drill Job's name: the same for the same turn and attempt on every replica."""
    digest = hashlib.sha256(f"{namespace}/{job}/{after}".encode()).hexdigest()[:12]
    return f"restore-drill-{digest}-{attempt}"


def turn(record: Record) -> str:
    return record.drill.finished if record.drill is not None else FIRST_TURN


def decide_drills(
    reports: Iterable[Report],
    records: Mapping[tuple[str, str], Record],
    drills: Iterable[DrillJob],
    every: Mapping[tuple[str, str], float],
    *,
    now: float,
    default_every: float,
    stale_after: float,
    max_running: int,
    retry_after: float,
) -> list[DrillDecision]:
    """One decision per job with a verified checkpoint; ``every`` holds the jobs' own intervals."""
    reported = {(r.namespace, r.job): r.at for r in reports}
    by_job: dict[tuple[str, str], list[DrillJob]] = {}
    for d in drills:
        by_job.setdefault((d.namespace, d.job), []).append(d)
    running = sum(1 for ds in by_job.values() for d in ds if d.running)
    decisions: list[DrillDecision] = []
    wanting: list[tuple[float, tuple[str, str], str, int, str]] = []
    for key, record in sorted(records.items()):
        if record.verified is None:
            continue
        at = reported.get(key)
        if at is None or now - at > stale_after:
            decisions.append(DrillDecision(*key, DrillState.DONE))
            continue
        mine = by_job.get(key, [])
        if any(d.running for d in mine):
            decisions.append(DrillDecision(*key, DrillState.DRILLING))
            continue
        this_turn = turn(record)
        ours = [d for d in mine if d.after == this_turn]
        done = [d for d in ours if d.verdict is not None]
        if done:
            newest = max(done, key=lambda d: d.attempt)
            decisions.append(DrillDecision(*key, DrillState.RECORD, drill=newest.name, verdict=newest.verdict))
            continue
        last = unix_seconds(this_turn) if record.drill is not None else None
        due = now if last is None else last + every.get(key, default_every)
        if now < due:
            decisions.append(DrillDecision(*key, DrillState.SCHEDULED, not_before=due))
            continue
        ended = [d.finished_at for d in ours if d.finished_at is not None]
        if ended and max(ended) + retry_after > now:
            decisions.append(DrillDecision(*key, DrillState.RETRY_LATER, not_before=max(ended) + retry_after))
            continue
        attempt = max((d.attempt for d in ours), default=-1) + 1
        wanting.append((due, key, this_turn, attempt, record.verified.directory))
    wanting.sort()
    for _due, key, after, attempt, directory in wanting:
        if running >= max_running:
            decisions.append(DrillDecision(*key, DrillState.QUEUED))
            continue
        running += 1
        name = drill_name(*key, after, attempt)
        decisions.append(DrillDecision(*key, DrillState.START, drill=name, directory=directory, after=after))
    return decisions
