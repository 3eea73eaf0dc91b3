"""What the verifier does about each job, decided from what it read: pure (the clock is passed in), one call per
cycle over every team namespace it could read.

For each job with a checkpoint report (``checkpoint.gpucluster.io/<job>``), in order:

1. a check of it is running: wait (``checking``);
2. a check finished with a verdict on a report newer than the last the record holds: record it (``record``);
3. the report is newer than the last the record holds: start a check (``start``), unless the last check of that
   report ended with no verdict less than ``retryAfter`` ago (``retry-later``), or ``maxRunning`` checks already
   run (``queued``: the oldest reports start first);
4. otherwise the record holds the report: nothing to do (``verified`` or ``rejected``).

Fail-static: a namespace whose claim or Jobs could not be read is not passed in (nothing is decided there); a report
whose time does not read is left alone (``unreadable-report``); a record that does not read is written anew by the
next verdict (it is never taken as a pass).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from contract.checkpoint_record import CheckVerdict, Record
from contract.times import unix_seconds


class State(StrEnum):
    CHECKING = "checking"
    RECORD = "record"
    START = "start"
    RETRY_LATER = "retry-later"
    QUEUED = "queued"
    VERIFIED = "verified"
    REJECTED = "rejected"
    UNREADABLE_REPORT = "unreadable-report"


@dataclass(frozen=True)
class Report:
    namespace: str
    job: str
    #: The report as written (RFC 3339), and the time it says; None when it does not read.
    text: str
    at: float | None


@dataclass(frozen=True)
class Check:
    """One check Job of ours, as listed."""

    name: str
    namespace: str
    job: str
    #: The report it checks (its annotation), as written, and which try of it this is (its name's suffix).
    report: str
    attempt: int
    #: True while it runs (not Complete, not Failed).
    running: bool
    #: Its verdict (the pod's termination message); None while running or when it ended with none.
    verdict: CheckVerdict | None
    #: When it ended (its Complete or Failed condition); None while running.
    finished_at: float | None


@dataclass(frozen=True)
class Decision:
    namespace: str
    job: str
    state: State
    #: ``start``: the check Job's name and the last verified step it must beat; ``record``: the check recorded.
    check: str | None = None
    last_verified_step: int | None = None
    #: ``record``: the verdict and the report it is about.
    verdict: CheckVerdict | None = None
    report: str | None = None
    #: ``retry-later``: when.
    not_before: float | None = None


def check_name(namespace: str, job: str, report: str, attempt: int) -> str:
    """A check Job's name: the same for the same report and attempt on every replica (a second create is refused
    as already there, never a second check), short enough for a Job (its pods' labels take the name)."""
    digest = hashlib.sha256(f"{namespace}/{job}/{report}".encode()).hexdigest()[:12]
    return f"checkpoint-check-{digest}-{attempt}"


def _newer(at: float | None, than: float | None) -> bool:
    return at is not None and (than is None or at > than)


def decide(
    reports: Sequence[Report],
    records: Mapping[tuple[str, str], Record],
    checks: Iterable[Check],
    *,
    now: float,
    max_running: int,
    retry_after: float,
) -> list[Decision]:
    """One decision per reported job; the starts are those ``maxRunning`` allows, oldest report first."""
    by_job: dict[tuple[str, str], list[Check]] = {}
    for c in checks:
        by_job.setdefault((c.namespace, c.job), []).append(c)
    running = sum(1 for cs in by_job.values() for c in cs if c.running)
    decisions: list[Decision] = []
    wanting: list[tuple[Report, int, int | None]] = []
    for report in reports:
        key = (report.namespace, report.job)
        if report.at is None:
            decisions.append(Decision(*key, State.UNREADABLE_REPORT))
            continue
        record = records.get(key)
        held = record.last_reported if record is not None else None
        mine = by_job.get(key, [])
        if any(c.running for c in mine):
            decisions.append(Decision(*key, State.CHECKING))
            continue
        done = [c for c in mine if c.verdict is not None and _newer(unix_seconds(c.report), held)]
        if done:
            newest = max(done, key=lambda c: (unix_seconds(c.report) or 0.0, c.name))
            decisions.append(
                Decision(*key, State.RECORD, check=newest.name, verdict=newest.verdict, report=newest.report)
            )
            continue
        if not _newer(report.at, held):
            assert record is not None
            decisions.append(Decision(*key, State.VERIFIED if record.last.ok else State.REJECTED))
            continue
        tried = [c for c in mine if c.report == report.text]
        ended = [c.finished_at for c in tried if c.finished_at is not None]
        if tried and ended and max(ended) + retry_after > now:
            decisions.append(Decision(*key, State.RETRY_LATER, not_before=max(ended) + retry_after))
            continue
        last = record.verified.step if record is not None and record.verified is not None else None
        wanting.append((report, max((c.attempt for c in tried), default=-1) + 1, last))
    wanting.sort(key=lambda w: (w[0].at or 0.0, w[0].namespace, w[0].job))
    for report, attempt, last in wanting:
        key = (report.namespace, report.job)
        if running >= max_running:
            decisions.append(Decision(*key, State.QUEUED))
            continue
        running += 1
        name = check_name(report.namespace, report.job, report.text, attempt)
        decisions.append(Decision(*key, State.START, check=name, last_verified_step=last, report=report.text))
    return decisions
