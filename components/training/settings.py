"""Settings of the training room (``gpucluster:training``): the restart bounds every training job gets unless its
spec says otherwise, and where the measured reliability the checkpoint interval follows is read from.

Pure pydantic (no Pulumi): ``gpucluster submit`` and the accounting daemon read the same model.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from components.constants import TRAINING_NAMESPACE
from components.model import ConfigModel, DnsLabel

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
