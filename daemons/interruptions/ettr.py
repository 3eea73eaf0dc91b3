"""Effective training time ratio (ETTR) per job and for the cluster, and the cluster's training node-seconds per
interruption. Pure: no I/O, the clock passed in.

Per job, over the wall time since it was first admitted (``first_admitted``; the JobSet's creation when Kueue never
said): training time is the time every pod of the gang was Running, i.e. the wall time less the time before it first
ran and less each interruption's downtime (failure -> all pods Running again; still open: until now), overlaps
counted once. From it go the checkpoint writes (training time / interval checkpoints of ``write_s`` each; none
without an interval) and the work each interruption lost. ETTR = what is left / wall time.

The cluster's ETTR weighs each job by its nodes (node-seconds). Its MTBI is training node-seconds (nodes x training
time, summed over the jobs still there) per interruption of any cause: that is the ``nodeMtbiSeconds`` of the
reliability ConfigMap, and a job of N nodes has an MTBI of that / N.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from daemons.interruptions.ledger import Record


@dataclass(frozen=True)
class JobTime:
    wall_s: float
    training_s: float
    checkpoint_write_s: float
    work_lost_s: float
    nodes: int
    interruptions: int

    @property
    def productive_s(self) -> float:
        return max(0.0, self.training_s - self.checkpoint_write_s - self.work_lost_s)

    @property
    def ettr(self) -> float | None:
        return None if self.wall_s <= 0 else min(1.0, self.productive_s / self.wall_s)


def _merged_length(spans: Iterable[tuple[float, float]], lo: float, hi: float) -> float:
    total, end = 0.0, lo
    for a, b in sorted((max(lo, a), min(hi, b)) for a, b in spans):
        begin = max(a, end)
        if b > begin:
            total += b - begin
            end = b
    return total


def job_time(
    record: Record,
    now: float,
    *,
    created_at: float,
    nodes: int,
    interval_s: float | None,
    write_s: float,
    interruptions: int,
) -> JobTime:
    start = record.first_admitted if record.first_admitted is not None else created_at
    wall = max(0.0, now - start)
    down = [(start, record.first_running if record.first_running is not None else now)]
    down += [(i.at, i.recovered_at if i.recovered_at is not None else now) for i in record.items]
    training = max(0.0, wall - _merged_length(down, start, now))
    writes = min(training, training / interval_s * write_s) if interval_s else 0.0
    lost = sum(i.work_lost_s for i in record.items if i.at >= start)
    return JobTime(wall, training, writes, lost, nodes, interruptions)


@dataclass(frozen=True)
class ClusterTime:
    ettr: float | None
    node_seconds: float
    interruptions: int

    @property
    def node_mtbi_s(self) -> float | None:
        return None if self.interruptions <= 0 else self.node_seconds / self.interruptions


def cluster_time(jobs: Sequence[JobTime]) -> ClusterTime:
    wall = sum(j.wall_s * j.nodes for j in jobs)
    productive = sum(j.productive_s * j.nodes for j in jobs)
    return ClusterTime(
        None if wall <= 0 else min(1.0, productive / wall),
        sum(j.training_s * j.nodes for j in jobs),
        sum(j.interruptions for j in jobs),
    )
