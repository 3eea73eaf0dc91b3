"""The restart bound: more than ``gpucluster.io/max-restarts-per-hour`` in-place restarts within the last hour stop
the job (the controller deactivates its Kueue Workload). The decision only: no I/O, the clock passed in.

Restarts of every cause count (a gang that keeps losing nodes loops as surely as one that keeps crashing); Kueue
evictions do not (Kueue queues the gang again itself). After an operator resumes a stopped job, only restarts from
then on count (``since``), or the same hour would stop it again at once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from daemons.interruptions.classify import Cause

WINDOW_S = 3600.0


@dataclass(frozen=True)
class BoundDecision:
    stop: bool
    #: Restarts within the window, and the bound.
    restarts: int
    bound: int
    causes: Mapping[str, int]

    def causes_text(self) -> str:
        return ", ".join(f"{n} {c}" for c, n in sorted(self.causes.items(), key=lambda kv: (-kv[1], kv[0]))) or "none"


def decide(
    restarts: Iterable[tuple[float, Cause]], now: float, bound: int, *, since: float | None = None, active: bool = True
) -> BoundDecision:
    """Stop when more than ``bound`` restarts happened in ``(now - 1 h, now]`` (and after ``since``) and the
    Workload is still active (a stopped one is not stopped twice)."""
    start = now - WINDOW_S if since is None else max(now - WINDOW_S, since)
    recent = Counter(c.value for t, c in restarts if start < t <= now)
    count = sum(recent.values())
    return BoundDecision(active and count > bound, count, bound, dict(recent))
