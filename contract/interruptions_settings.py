"""Settings of the interruption accounting daemon: one pydantic model for the stack section
``gpucluster:interruptions`` and the daemon's settings file.

The daemon (``gpucluster-interruptions``, daemons/interruptions/) counts each training JobSet's interruptions by
cause, the time each took to run again and the work it lost since the last checkpoint, exports the effective
training time ratio per job and for the cluster, stops a gang that restarts more often than its bound, and writes
the measured reliability (training node-seconds per interruption) the next submission's checkpoint interval follows.
Pure pydantic (no Pulumi): the daemon imports it.

Example (camelCase, as in the stack YAML)::

    enabled: true
    image: ghcr.io/example/gpucluster-daemons:0.1.0  # unset: from gpucluster:images
    interval: 5s                  # read the JobSets, pods, nodes and Workloads this often
    defaultMaxRestartsPerHour: 6  # the bound of a JobSet without gpucluster.io/max-restarts-per-hour
    checkpointWriteSeconds: 30    # how long one checkpoint write stalls training (not training time)
    replicas: 2
"""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field

from contract.constants import QUARANTINE_TAINT_KEY, RELIABILITY_CONFIGMAP, TRAINING_NAMESPACE
from contract.images_settings import DEFAULT_DAEMONS_IMAGE
from contract.issues import SettingsError
from contract.model import (
    ControllerReplicas,
    ControllerSettings,
    DnsLabel,
    DnsSubdomain,
    Image,
    PollInterval,
    PositiveDuration,
    Seconds,
    TaintKey,
)

#: The daemon's Deployment, ServiceAccount and command; the reporting component of its Events.
#: Its section of the stack (``gpucluster:interruptions``), and its spec's ``stack_key``.
STACK_KEY = "interruptions"
APP = "gpucluster-interruptions"
FIELD_MANAGER = "gpucluster-interruptions"
#: The fields the stack fills (camelCase key: where from); a stack section that sets one is refused.
FILLED = {"verifiedCheckpointsOnly": "gpucluster:checkpointVerifier (enabled)"}


class InterruptionsSettings(ControllerSettings):
    """Everything the interruption accounting daemon needs; see the module docstring."""

    enabled: bool = True
    #: Where the Deployment, its Lease and the reliability ConfigMap live.
    namespace: DnsLabel = TRAINING_NAMESPACE
    #: Unset in a stack: filled from ``gpucluster:images`` (contract/images_settings.py).
    image: Image = DEFAULT_DAEMONS_IMAGE
    replicas: ControllerReplicas = 2
    #: How often the daemon reads the training JobSets and what belongs to them (at least a second).
    interval: PollInterval = "5s"
    #: The restart bound of a JobSet that does not carry ``gpucluster.io/max-restarts-per-hour``.
    default_max_restarts_per_hour: Annotated[int, Field(ge=0, le=1000)] = 6
    #: Seconds one checkpoint write takes (training stalls meanwhile): ETTR leaves it out of training time.
    checkpoint_write_seconds: Annotated[float, Field(ge=0, le=3600)] = 30.0
    #: Interruptions kept in each JobSet's ledger annotation (the oldest go first; the counts stay exact).
    ledger_entries: Annotated[int, Field(ge=4, le=200)] = 50
    #: A node carrying one of these taints when a pod on it failed is the node's fault.
    quarantine_taint_keys: list[TaintKey] = Field(default_factory=lambda: [QUARANTINE_TAINT_KEY], max_length=16)
    reliability_config_map: DnsSubdomain = RELIABILITY_CONFIGMAP
    #: How long one API call may take.
    request_timeout: PositiveDuration = "10s"
    lease_name: DnsSubdomain = "gpucluster-interruptions"
    lease_duration: PositiveDuration = "15s"
    renew_deadline: PositiveDuration = "10s"
    #: How often the leader renews and the others try to take the Lease (at least a second).
    retry_period: PollInterval = "2s"

    # Filled by the stack (FILLED).
    #: Count only verified checkpoints (``verified.checkpoint.gpucluster.io/<job>``, the checkpoint verifier's
    #: record) for the work lost and the checkpoint's age; false: the job's own report
    #: (``checkpoint.gpucluster.io/<job>``), in a stack that runs no verifier.
    verified_checkpoints_only: bool = False

    request_timeout_seconds: ClassVar[Seconds] = Seconds("request_timeout")


#: Validate already-parsed settings, or read a settings file: SettingsError lists every problem with its key path.
parse_settings = InterruptionsSettings.parse
load_settings = InterruptionsSettings.load


__all__ = [
    "APP",
    "FIELD_MANAGER",
    "FILLED",
    "STACK_KEY",
    "InterruptionsSettings",
    "SettingsError",
    "load_settings",
    "parse_settings",
]
