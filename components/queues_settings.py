"""Settings of the queues room (``components/queues.py``): GPU flavors, ClusterQueues, teams, both priority tiers
and Kueue itself (``gpucluster:flavors``, ``queues``, ``teams``, ``priorities``, ``kueue``).

Rules between these sections and the rest of the stack (quotas within the flavors' capacity, training above
inference, ...) are in ``components/config/rules.py``.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, field_validator

from components.chart_settings import ChartSource
from components.constants import ACCEPTED_LABEL, ACCEPTED_VALUE, GPU_RESOURCE
from components.fabric_settings import Fabric
from components.issues import shown
from components.model import (
    ConfigModel,
    DnsLabel,
    PositiveDuration,
    SemVer,
    Toleration,
    check_labels,
    check_qualified_name,
)

KUEUE_CHART_VERSION = "0.17.0"
#: Largest value a user-defined Kubernetes PriorityClass may take (bigger values are reserved for the system).
MAX_USER_PRIORITY = 1_000_000_000


class GpuFlavor(ConfigModel):
    """One kind of GPU node: becomes a Kueue ResourceFlavor and a quota column in every ClusterQueue."""

    name: DnsLabel
    node_labels: Annotated[dict[str, str], Field(min_length=1)]
    gpus_per_node: Annotated[int, Field(ge=1, le=16)]
    node_count: Annotated[int, Field(ge=1, le=10_000)]
    gpu_resource: Annotated[str, AfterValidator(lambda v: check_qualified_name(v, "resource name"))] = GPU_RESOURCE
    tolerations: list[Toleration] = []
    #: Select only nodes that passed the Ansible acceptance roles (``gpucluster.io/accepted=true``), so a node that
    #: never passed gets no training and counts as no capacity. A stack that turns it off is reported by the
    #: policy pack (``flavors-select-accepted-nodes``).
    require_acceptance: bool = True
    #: How the flavor's nodes reach each other (``components/fabric_settings.py``); none: the pods get no RDMA
    #: devices and NCCL picks its transport alone.
    fabric: Fabric | None = None

    @field_validator("node_labels")
    @classmethod
    def _labels(cls, v: dict[str, str]) -> dict[str, str]:
        return check_labels(v)

    @property
    def capacity(self) -> int:
        """GPUs the flavor declares: nodes x GPUs per node."""
        return self.gpus_per_node * self.node_count

    @property
    def selector_labels(self) -> dict[str, str]:
        """The ResourceFlavor's ``nodeLabels``: the flavor's own, and the acceptance label unless turned off."""
        if not self.require_acceptance:
            return dict(self.node_labels)
        return {**self.node_labels, ACCEPTED_LABEL: ACCEPTED_VALUE}


class ClusterQueueSpec(ConfigModel):
    """A Kueue ClusterQueue in the cohort: GPU quota per flavor, optional borrowing limits."""

    quota: Annotated[dict[str, Annotated[int, Field(ge=0)]], Field(min_length=1)]
    borrowing_limit: dict[str, Annotated[int, Field(ge=0)]] = {}
    queueing_strategy: Literal["BestEffortFIFO", "StrictFIFO"] = "BestEffortFIFO"


class Team(ConfigModel):
    """A research team: a namespace that only submits, through a LocalQueue onto a ClusterQueue."""

    name: DnsLabel
    namespace: DnsLabel
    cluster_queue: DnsLabel
    local_queue: DnsLabel = "training"


class WorkloadPriority(ConfigModel):
    name: DnsLabel
    value: Annotated[int, Field(ge=-MAX_USER_PRIORITY, le=MAX_USER_PRIORITY)]
    description: str = ""


class PodPriority(ConfigModel):
    name: DnsLabel
    value: Annotated[int, Field(ge=-MAX_USER_PRIORITY, le=MAX_USER_PRIORITY)]
    preemption_policy: Literal["PreemptLowerPriority", "Never"] = "PreemptLowerPriority"
    description: str = ""


class PodPriorities(ConfigModel):
    training: PodPriority
    inference: PodPriority


class Priorities(ConfigModel):
    """Two tiers: Kueue WorkloadPriorityClasses order research workloads (listed highest first); Kubernetes
    PriorityClasses make the scheduler put training above inference."""

    workload: Annotated[list[WorkloadPriority], Field(min_length=1)]
    pod: PodPriorities


class WaitForPodsReady(ConfigModel):
    """Kueue's all-or-nothing gate: a gang that cannot get every pod ready in time is evicted and requeued."""

    enable: bool = True
    timeout: PositiveDuration = "10m"
    recovery_timeout: PositiveDuration | None = "3m"
    block_admission: bool = True
    backoff_base_seconds: Annotated[int, Field(ge=1)] = 60
    backoff_max_seconds: Annotated[int, Field(ge=1)] = 3600


_LOOPBACK_URL = re.compile(r"^https://(127\.0\.0\.1|localhost|\[::1\]):(?P<port>\d{1,5})$")


def _check_loopback_url(value: str) -> str:
    m = _LOOPBACK_URL.match(value)
    if not m or not 1 <= int(m.group("port")) <= 65535:
        raise ValueError(f"{shown(value)} is not an https URL on loopback such as https://127.0.0.1:19443")
    return value


class LocalWebhooks(ConfigModel):
    """Local-stack only: serve Kueue's admission webhooks from a controller running outside the cluster (the
    simulated cluster's ``sim/local_webhooks.py`` points the chart's webhook objects there)."""

    url: Annotated[str, AfterValidator(_check_loopback_url)]
    ca_bundle_file: str


class KueueSettings(ConfigModel):
    chart_version: SemVer = KUEUE_CHART_VERSION
    chart: ChartSource = ChartSource(oci="oci://registry.k8s.io/kueue/charts/kueue")
    namespace: DnsLabel = "kueue-system"
    wait_for_pods_ready: WaitForPodsReady = WaitForPodsReady()
    local_webhooks: LocalWebhooks | None = None
    extra_values: dict[str, Any] = {}
