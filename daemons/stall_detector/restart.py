"""What to do about one gang now: nothing, or the next step of a restart in place. Pure.

A restart is two writes, in this order: the record on the JobSet (``gpucluster.io/stall-restart``: the attempt it
ends, when, the evidence, the suspects), then the eviction of one pod of that attempt. The eviction marks the pod
``DisruptionTarget``; the Job's pod failure policy fails the Job, and JobSet's ``NodeFault`` rule recreates the
whole gang in place (``RestartJobSetAndIgnoreMaxRestarts``: a hang does not count towards ``maxRestarts``); Kueue
keeps the Workload admitted, so the gang keeps its quota. The interruption accounting reads the record and counts
the attempt's end as a ``hang``.

Either write may be the last one a replica makes (killed, or its Lease lost): the next leader reads the record and
finishes the eviction, and a record of an older attempt (the gang already restarted) asks for nothing, so no gang
is restarted twice for one stall and none is left half-restarted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from daemons.stall_detector.decide import Judgement, Verdict
from daemons.stall_detector.gangs import GangView, RestartRecord


@dataclass(frozen=True)
class Step:
    #: The record to write first; None: already written (a restart under way, resumed).
    record: RestartRecord | None
    #: The pod of the attempt to evict.
    evict: str


def under_way(view: GangView) -> bool:
    """A pod of the current attempt is being deleted or has failed: the gang is restarting already."""
    return any(p.attempt in (None, view.attempt) and (p.terminating or p.phase == "Failed") for p in view.all_pods)


def next_step(view: GangView, judgement: Judgement, suspects: Mapping[str, tuple[str, ...]], now: float) -> Step | None:
    pending = view.restart is not None and view.restart.attempt == view.attempt
    if not pending and judgement.verdict is not Verdict.STALLED:
        return None
    if under_way(view):
        return None
    running = sorted(p.name for p in view.pods if p.phase == "Running")
    if not running:
        return None
    if pending:
        return Step(None, running[0])
    return Step(RestartRecord(view.attempt, now, judgement.detail, dict(suspects)), running[0])
