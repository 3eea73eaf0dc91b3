"""Settings of the storage room (``components/storage.py``): ``gpucluster:storage`` and the checkpoint cadence.

A parallel filesystem reached through its CSI driver; one RWX ``checkpoints`` and ``datasets`` claim per team
namespace; and the inputs of the Young/Daly checkpoint interval (:func:`checkpoint_interval_seconds`).
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import Field

from contract.model import ByteQuantity, ConfigModel, DnsLabel

StorageDriver = Literal["lustre", "weka", "vast", "gpfs", "nfs"]

#: Parameters each driver's StorageClass cannot work without (dynamic provisioning).
DRIVER_PARAMETERS: dict[str, tuple[str, ...]] = {"nfs": ("server", "share")}


class Claim(ConfigModel):
    #: A whole number of bytes, such as 50Ti.
    size: ByteQuantity
    read_only: bool = False


class Checkpointing(ConfigModel):
    """Inputs of the Young/Daly checkpoint cadence.

    ``mtbfHours`` is the prior: the mean time between interruptions of a job of ``mtbfJobNodes`` nodes (1: per
    node). Failures of independent nodes add up, so a job of N nodes is interrupted N / ``mtbfJobNodes`` times as
    often; the measured reliability (node-seconds per interruption) is scaled to the job the same way.
    """

    size_tb: Annotated[float, Field(gt=0, le=1e6)] = 1.0
    write_seconds: Annotated[float, Field(gt=0, le=86400)] = 30.0
    mtbf_hours: Annotated[float, Field(gt=0, le=1e6)] = 8.0
    mtbf_job_nodes: Annotated[int, Field(ge=1, le=100_000)] = 1

    def node_mtbf_seconds(self) -> float:
        """The prior per node: node-seconds per interruption."""
        return self.mtbf_hours * 3600.0 * self.mtbf_job_nodes

    def job_mtbf_seconds(self, nodes: int) -> float:
        """The prior for a job of ``nodes`` nodes."""
        return self.node_mtbf_seconds() / nodes


class StorageSettings(ConfigModel):
    """A parallel filesystem reached through its CSI driver; one RWX checkpoint and dataset claim per team."""

    driver: StorageDriver
    provisioner: Annotated[str, Field(min_length=3)]
    mode: Literal["dynamic", "static"] = "dynamic"
    storage_class_name: DnsLabel = "parallel-fs"
    parameters: dict[str, str] = {}
    mount_options: list[str] = []
    #: static mode: the CSI volumeHandle of each PV is ``<volumeHandlePrefix>/<namespace>/<claim>``.
    volume_handle_prefix: str | None = None
    volume_attributes: dict[str, str] = {}
    checkpoints: Claim = Claim(size="50Ti")
    datasets: Claim = Claim(size="200Ti", read_only=True)
    checkpointing: Checkpointing = Checkpointing()


def checkpoint_interval_seconds(write_seconds: float, mtbf_seconds: float) -> float:
    """Young/Daly first-order optimum: sqrt(2 x checkpoint write time x mean time between failures)."""
    if write_seconds <= 0 or mtbf_seconds <= 0:
        raise ValueError("write time and MTBF must both be positive")
    return math.sqrt(2.0 * write_seconds * mtbf_seconds)


def predicted_ettr(interval_seconds: float, write_seconds: float, mtbf_seconds: float, restart_seconds: float) -> float:
    """Effective training time ratio the first-order model predicts (the share of wall time that is kept work).

    Checkpointing every ``interval_seconds`` of work costs ``write_seconds`` each time, so at most
    ``interval / (interval + write)`` of the time runs training. Each interruption (one per ``mtbf_seconds`` on
    average) costs the time to run again (``restart_seconds``) plus the work since the last checkpoint, half a
    cycle on average. Clamped to [0, 1].
    """
    if interval_seconds <= 0 or write_seconds < 0 or mtbf_seconds <= 0 or restart_seconds < 0:
        raise ValueError("interval and MTBF must be positive, write and restart times not negative")
    cycle = interval_seconds + write_seconds
    kept = interval_seconds / cycle * (1.0 - (restart_seconds + cycle / 2.0) / mtbf_seconds)
    return min(1.0, max(0.0, kept))
