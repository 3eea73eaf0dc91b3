"""Settings of the training room (``gpucluster:training``): the restart bounds every training job gets unless its
spec says otherwise, and where the measured reliability the checkpoint interval follows is read from.

Pure pydantic (no Pulumi): ``gpucluster submit`` and the accounting daemon read the same model.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from contract.constants import TRAINING_NAMESPACE
from contract.model import ConfigModel, DnsLabel, PositiveDuration

#: A gang restarting more often than once a minute on average is crash-looping, not training.
MAX_RESTARTS_PER_HOUR_LIMIT = 60
#: JobSet's ``failurePolicy.maxRestarts`` is an int32; far beyond any sane bound anyway.
MAX_RESTARTS_LIMIT = 10_000


class TrainingSettings(ConfigModel):
    """Restart bounds of training jobs and the namespace of the measured reliability ConfigMap."""

    #: Restarts in place a job may take in any hour before it is stopped as crash-looping (the JobSet carries it
    #: as ``gpucluster.io/max-restarts-per-hour``).
    max_restarts_per_hour: Annotated[int, Field(ge=1, le=MAX_RESTARTS_PER_HOUR_LIMIT)] = 6
    #: Restarts for the program's faults over the job's life (JobSet ``failurePolicy.maxRestarts``); a node's
    #: fault does not count towards it.
    max_restarts: Annotated[int, Field(ge=0, le=MAX_RESTARTS_LIMIT)] = 100
    #: Where the interruption accounting writes ``gpucluster-training-reliability``.
    reliability_namespace: DnsLabel = TRAINING_NAMESPACE
    #: How long a training pod stays bound to a node that is not-ready or unreachable before the taint eviction
    #: takes it (a node fault: the gang restarts). Kubernetes' default is 300 s, five minutes of the whole gang idle.
    node_lost_toleration: PositiveDuration = "30s"
    #: PyTorch's NCCL watchdog: a watchdog without a heartbeat for this long aborts the process
    #: (``TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC``), so a rank stuck in a CUDA or NCCL call fails instead of hanging.
    nccl_heartbeat_timeout: PositiveDuration = "300s"
    #: Collectives PyTorch's flight recorder keeps per rank (``TORCH_NCCL_TRACE_BUFFER_SIZE``; 0: off). On a
    #: watchdog timeout each rank dumps them to the job's checkpoint volume, for the post-mortem.
    flight_recorder_entries: Annotated[int, Field(ge=0, le=100_000)] = 2000
