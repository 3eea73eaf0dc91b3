"""Which of the verifier's Jobs Kueue never admitted in time: pure (the clock is passed in).

A check or drill Job is created suspended and waits in the team's queue until Kueue admits it; its
``activeDeadlineSeconds`` counts only from then. One that Kueue never admits (a queue stopped, no CPU quota left, a
flavor that no longer fits) would wait without bound and hold a place of ``maxRunning``. So a Job still suspended
longer than its deadline after it was created (``checkDeadline`` for a check, ``restoreDrill.deadline`` for a drill)
is given up: the controller deletes it (only its own Jobs, an admission rule holds it to that) and says so in a
Warning Event, and the next cycle decides afresh, as for a Job that ended with no verdict.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Waiting:
    """One of our Jobs as listed: its kind (``check`` or ``drill``), and when it was created while still suspended
    (None once admitted, or when it is not suspended)."""

    namespace: str
    name: str
    job: str
    kind: str
    suspended_since: float | None


def given_up(waiting: Iterable[Waiting], *, now: float, deadlines: dict[str, float]) -> list[Waiting]:
    """The Jobs still suspended longer than their kind's deadline after creation, oldest first."""
    late = [
        w
        for w in waiting
        if w.suspended_since is not None and now - w.suspended_since > deadlines.get(w.kind, float("inf"))
    ]
    return sorted(late, key=lambda w: (w.suspended_since or 0.0, w.namespace, w.name))
