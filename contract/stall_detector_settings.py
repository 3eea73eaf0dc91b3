"""Settings of the stall detector: one pydantic model for the stack section ``gpucluster:stallDetector`` and the
daemon's settings file.

The detector (``gpucluster-stall-detector``, daemons/stall_detector/) restarts a running training gang in place
when, for ``stallAfter``, every GPU of it shows tensor activity below ``tensorFloor``, its nodes move less than
``fabricFloor`` over InfiniBand, they write less than ``storageFloor`` to their filesystems (a checkpoint being
written is work) and the job reports no progress; it names the node to blame when one stands out,
and exports the nodes named ``repeatCount`` times within ``repeatWindow`` for quarantine. Pure pydantic (no
Pulumi): the daemon imports it.

Example (camelCase, as in the stack YAML)::

    enabled: true
    interval: 15s
    stallAfter: 5m       # a job's spec may set its own (stallAfter)
    startupGrace: 10m    # a gang that runs for less than this is never stalled
    quietMax: 30m        # the longest a declared quiet phase (checkpoint, eval, data) excuses idle GPUs
    tensorFloor: 0.05    # tensor pipe activity below which a GPU is idle
    fabricFloor: 1Mi     # bytes per second a node moves over the fabric below which it is silent
    storageFloor: 1Mi    # bytes per second a node writes to its filesystems at which it is checkpointing
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, ClassVar

from pydantic import Field

from contract.constants import PROMETHEUS_URL, TRAINING_NAMESPACE
from contract.images_settings import DEFAULT_DAEMONS_IMAGE
from contract.issues import SettingsError
from contract.model import (
    ByteQuantity,
    ControllerReplicas,
    ControllerSettings,
    DnsLabel,
    DnsSubdomain,
    HttpUrl,
    Image,
    PollInterval,
    PositiveDuration,
    Problem,
    Seconds,
    parse_quantity,
)

#: Its section of the stack (``gpucluster:stallDetector``), and its spec's ``stack_key``.
STACK_KEY = "stallDetector"
FIELD_MANAGER = "gpucluster-stall-detector"
#: The ConfigMap in its namespace that remembers when each node was named (the repeat rule outlives a restart).
SUSPECTS_CONFIGMAP = "gpucluster-stall-suspects"

#: The fields the stack fills (camelCase key: where from); a stack section that sets one is refused.
FILLED = {
    "dcgmScrapeJob": "gpucluster:telemetry (dcgmExporter.scrapeJob, or the chart's job)",
    "fabricScrapeJob": "gpucluster:telemetry (fabricExporter.scrapeJob)",
    "workloadNamespaces": "gpucluster:teams (each team's namespace)",
}

_SHORTER = {
    "requestTimeout": ("interval", "a cycle would outlast the next one"),
    "interval": ("stallAfter", "a stall would be seen only after more than stallAfter"),
    "stallAfter": ("repeatWindow", "the repeat rule could never count two stalls"),
}


class StallDetectorSettings(ControllerSettings):
    """Everything the stall detector needs; see the module docstring."""

    enabled: bool = True
    #: Where the Deployment, its Lease and the suspects ConfigMap live.
    namespace: DnsLabel = TRAINING_NAMESPACE
    #: Unset in a stack: filled from ``gpucluster:images`` (contract/images_settings.py).
    image: Image = DEFAULT_DAEMONS_IMAGE
    replicas: ControllerReplicas = 2
    lease_name: DnsSubdomain = "gpucluster-stall-detector"
    prometheus_url: HttpUrl = PROMETHEUS_URL
    #: How often the gangs and Prometheus are read (at least a second).
    interval: PollInterval = "15s"
    #: How long a gang must show no tensor activity, no fabric traffic and no progress to be stalled.
    stall_after: PositiveDuration = "5m"
    #: A gang whose pods have run for less than this is never stalled (images, data, the first compile).
    startup_grace: PositiveDuration = "10m"
    #: The longest a declared quiet phase (checkpoint, eval, data) excuses idle GPUs.
    quiet_max: PositiveDuration = "30m"
    #: Tensor pipe activity (0-1, DCGM_FI_PROF_PIPE_TENSOR_ACTIVE) below which a GPU is idle.
    tensor_floor: Annotated[float, Field(gt=0, lt=1)] = 0.05
    #: Bytes per second (a quantity: 1Mi) a node moves over InfiniBand, both ways, below which it is silent.
    fabric_floor: ByteQuantity = "1Mi"
    #: Bytes per second a node of the gang writes to its filesystems (the fabric exporter's filesystem collector:
    #: NFS and Lustre clients) at or above which the gang is busy, not stalled: a checkpoint being written.
    storage_floor: ByteQuantity = "1Mi"
    #: A node of a stalled gang below this share of its peers' median tensor activity is a straggler.
    straggler_ratio: Annotated[float, Field(gt=0, lt=1)] = 0.8
    #: InfiniBand transport errors (hw_counters: local ACK timeouts, retries) within stallAfter that make a node
    #: suspect.
    transport_errors: Annotated[float, Field(gt=0, le=1e9)] = 10.0
    #: NVLink or InfiniBand link errors within stallAfter that make a node suspect.
    link_errors: Annotated[float, Field(gt=0, le=1e9)] = 1.0
    #: A node named this many times within repeatWindow is handed to quarantine.
    repeat_count: Annotated[int, Field(ge=1, le=100)] = 3
    repeat_window: PositiveDuration = "24h"
    #: Most gangs restarted in one cycle: a cluster-wide outage (the fabric down) is not a hang of each job.
    max_restarts_per_cycle: Annotated[int, Field(ge=1, le=1000)] = 4
    #: How long one Prometheus query or API call may take.
    request_timeout: PositiveDuration = "5s"
    lease_duration: PositiveDuration = "15s"
    renew_deadline: PositiveDuration = "10s"
    #: How often the leader renews and the others try to take the Lease (at least a second).
    retry_period: PollInterval = "2s"
    #: Decide and log, write nothing (as ``--dry-run``).
    dry_run: bool = False

    # Filled by the stack (FILLED).
    #: The scrape jobs of dcgm-exporter and of the fabric exporter: only their series are read.
    dcgm_scrape_job: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.:/-]{1,128}$")] | None = None
    fabric_scrape_job: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.:/-]{1,128}$")] | None = None
    #: The team namespaces training runs in: the only ones it reads and restarts in.
    workload_namespaces: list[DnsLabel] = Field(default_factory=list, max_length=256)

    def rule_problems(self) -> Iterator[Problem]:
        yield from self.shorter_problems(_SHORTER)
        yield from super().rule_problems()

    # Seconds and bytes, for the daemon.

    stall_after_seconds: ClassVar[Seconds] = Seconds("stall_after")
    startup_grace_seconds: ClassVar[Seconds] = Seconds("startup_grace")
    quiet_max_seconds: ClassVar[Seconds] = Seconds("quiet_max")
    repeat_window_seconds: ClassVar[Seconds] = Seconds("repeat_window")
    request_timeout_seconds: ClassVar[Seconds] = Seconds("request_timeout")

    @property
    def fabric_floor_bytes(self) -> float:
        return float(parse_quantity(self.fabric_floor))

    @property
    def storage_floor_bytes(self) -> float:
        return float(parse_quantity(self.storage_floor))


#: Validate already-parsed settings, or read a settings file: SettingsError lists every problem with its key path.
parse_settings = StallDetectorSettings.parse
load_settings = StallDetectorSettings.load


__all__ = [
    "FIELD_MANAGER",
    "FILLED",
    "STACK_KEY",
    "SUSPECTS_CONFIGMAP",
    "SettingsError",
    "StallDetectorSettings",
    "load_settings",
    "parse_settings",
]
