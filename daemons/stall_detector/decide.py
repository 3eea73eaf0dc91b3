"""Whether a running training gang is stalled: the pure verdict of the stall detector.

Pure: no I/O and no clock of its own; the caller passes what it read (the gang as listed, the per-GPU tensor
activity and per-node fabric traffic over the last ``stallAfter``, the job's progress report) and ``now`` (Unix
seconds), so tests drive time by hand. :func:`judge` is the only way in.

A gang is *stalled* when, for ``stallAfter``, all of these hold at once:

1. every GPU of every pod shows tensor activity (DCGM's ``DCGM_FI_PROF_PIPE_TENSOR_ACTIVE``, the highest sample of
   the window) below ``tensorFloor``;
2. every one of its nodes moved less than ``fabricFloor`` bytes per second over the fabric (InfiniBand transmit and
   receive, the window's average);
3. every one of its nodes wrote less than ``storageFloor`` bytes per second to its filesystems (the NFS and Lustre
   clients' write bytes, the window's average): a checkpoint being written is work, reported or not;
4. the job reported no progress: its step did not advance within the window (a job that never reports is judged
   on 1 and 2 alone: progress is an optional contract).

It is never stalled (verdicts in this order):

* ``unknown``: an input is missing: the query failed, or fewer GPU series than the gang holds GPUs, or no fabric
  reading for one of its nodes. Fail-static: a detector that cannot see does nothing.
* ``not-running``: not every pod of the gang runs (a restart is under way, or the gang is queued).
* ``starting``: the pods have run for less than ``startupGrace`` (images, data loading, the first compile).
* ``quiet``: the job declared a quiet phase (``checkpoint``, ``eval``, ``data``) that began less than
  ``quietMax`` ago: a checkpoint write or an evaluation keeps the tensor cores idle on purpose.
* ``progressing``: the step advanced within ``stallAfter``.
* ``busy``: a GPU above the tensor floor, a node above the fabric floor or one writing above the storage floor (a
  job that does not report progress but computes, communicates or checkpoints).

Otherwise ``stalled``, with the evidence as a sentence for the Event.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

#: The phases a job may declare in its progress report during which idle GPUs are expected.
QUIET_PHASES = frozenset({"checkpoint", "eval", "data"})
#: The phase of ordinary training steps.
TRAIN_PHASE = "train"


class Verdict(StrEnum):
    UNKNOWN = "unknown"
    NOT_RUNNING = "not-running"
    STARTING = "starting"
    QUIET = "quiet"
    PROGRESSING = "progressing"
    BUSY = "busy"
    STALLED = "stalled"


@dataclass(frozen=True)
class Policy:
    """The thresholds, from the stack's settings (a job may set its own ``stall_after_s``)."""

    stall_after_s: float
    startup_grace_s: float
    quiet_max_s: float
    #: Tensor pipe activity (0-1) below which a GPU is idle.
    tensor_floor: float
    #: Bytes per second a node moves over the fabric below which it is silent.
    fabric_floor: float
    #: Bytes per second a node writes to its filesystems below which it is not checkpointing.
    storage_floor: float = 1024.0 * 1024.0

    def __post_init__(self) -> None:
        if min(self.stall_after_s, self.startup_grace_s, self.quiet_max_s) <= 0:
            raise ValueError("stall_after_s, startup_grace_s and quiet_max_s must be longer than zero")
        if not 0 < self.tensor_floor < 1:
            raise ValueError(f"tensor_floor {self.tensor_floor} must be in (0, 1)")
        if self.fabric_floor < 0 or self.storage_floor < 0:
            raise ValueError(
                f"fabric_floor {self.fabric_floor} and storage_floor {self.storage_floor} must not be negative"
            )


@dataclass(frozen=True)
class Gang:
    """A running training job as listed."""

    namespace: str
    name: str
    #: The nodes its pods run on.
    nodes: tuple[str, ...]
    #: GPUs the gang holds (pods x GPUs per pod).
    gpus: int
    #: Since when every pod runs (Unix seconds); None while not all of them do.
    running_since: float | None
    #: The job's own stallAfter, if its spec set one.
    stall_after_s: float | None = None


@dataclass(frozen=True)
class Progress:
    """The job's last progress report."""

    step: int
    #: When the step last advanced (Unix seconds).
    advanced_at: float
    phase: str = TRAIN_PHASE
    #: When the current phase began (Unix seconds).
    phase_since: float = 0.0


@dataclass(frozen=True)
class Readings:
    """What Prometheus said about the gang over the window; None where a query failed."""

    #: (pod, gpu) -> the window's highest tensor activity.
    tensor_active: Mapping[tuple[str, str], float] | None
    #: node -> the window's average fabric bytes per second (transmit + receive).
    fabric_bytes_per_s: Mapping[str, float] | None
    progress: Progress | None = None
    #: node -> the window's average bytes per second written to its filesystems; a node absent wrote nothing there
    #: (no network filesystem mounted, or no collector); None: the query failed.
    storage_write_bytes_per_s: Mapping[str, float] | None = field(default_factory=dict)


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    #: A sentence for people: why this verdict (the Event's message when stalled).
    detail: str


def rate(bytes_per_s: float) -> str:
    """A traffic rate for people: ``16.0 KiB/s``, ``1.0 MiB/s``."""
    for unit, size in (("GiB/s", 1 << 30), ("MiB/s", 1 << 20), ("KiB/s", 1 << 10)):
        if bytes_per_s >= size:
            return f"{bytes_per_s / size:.1f} {unit}"
    return f"{bytes_per_s:.0f} B/s"


def judge(gang: Gang, readings: Readings, now: float, policy: Policy) -> Judgement:
    """The verdict on one gang now."""
    window = gang.stall_after_s if gang.stall_after_s is not None else policy.stall_after_s
    tensor, fabric = readings.tensor_active, readings.fabric_bytes_per_s
    if gang.running_since is None:
        return Judgement(Verdict.NOT_RUNNING, "not every pod of the gang runs")
    storage = readings.storage_write_bytes_per_s
    if tensor is None or fabric is None or storage is None:
        return Judgement(Verdict.UNKNOWN, "a Prometheus query failed: nothing is judged")
    if len(tensor) < gang.gpus:
        return Judgement(
            Verdict.UNKNOWN, f"tensor activity for {len(tensor)} of the gang's {gang.gpus} GPUs: nothing is judged"
        )
    silent_nodes = [n for n in gang.nodes if n not in fabric]
    if silent_nodes:
        return Judgement(Verdict.UNKNOWN, f"no fabric reading for {', '.join(sorted(silent_nodes))}: nothing is judged")
    running = now - gang.running_since
    if running < policy.startup_grace_s:
        return Judgement(Verdict.STARTING, f"running for {running:.0f}s, within the startup grace")
    progress = readings.progress
    if progress is not None and progress.phase in QUIET_PHASES:
        quiet = now - progress.phase_since
        if quiet < policy.quiet_max_s:
            return Judgement(Verdict.QUIET, f"in its {progress.phase} phase for {quiet:.0f}s")
    if progress is not None and now - progress.advanced_at < window:
        return Judgement(Verdict.PROGRESSING, f"step {progress.step} {now - progress.advanced_at:.0f}s ago")
    if running < window:
        return Judgement(Verdict.STARTING, f"running for {running:.0f}s, less than stallAfter ({window:.0f}s)")
    top_gpu, top_tensor = max(tensor.items(), key=lambda kv: (kv[1], kv[0]))
    if top_tensor >= policy.tensor_floor:
        return Judgement(Verdict.BUSY, f"GPU {top_gpu[1]} of {top_gpu[0]} at tensor activity {top_tensor:.2f}")
    top_node, top_bytes = max(fabric.items(), key=lambda kv: (kv[1], kv[0]))
    if top_bytes >= policy.fabric_floor:
        return Judgement(Verdict.BUSY, f"{top_node} moves {rate(top_bytes)} over the fabric")
    writes = [(storage.get(n, 0.0), n) for n in gang.nodes]
    top_written, top_writer = max(writes) if writes else (0.0, "")
    if top_written >= policy.storage_floor:
        return Judgement(Verdict.BUSY, f"{top_writer} writes {rate(top_written)} to its filesystems (a checkpoint)")
    last = (
        f"its last step ({progress.step}) {now - progress.advanced_at:.0f}s ago"
        if progress is not None
        else "no progress report"
    )
    return Judgement(
        Verdict.STALLED,
        f"stalled for {window:.0f}s: all {gang.gpus} GPUs below tensor activity {policy.tensor_floor:g} (highest "
        f"{top_tensor:.3f}), every node below {rate(policy.fabric_floor)} over the fabric (highest {rate(top_bytes)} "
        f"on {top_node}) and below {rate(policy.storage_floor)} written to its filesystems, {last}",
    )
