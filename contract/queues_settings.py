"""Settings of the queues room (``components/queues.py``): GPU flavors, ClusterQueues, teams, both priority tiers
and Kueue itself (``gpucluster:flavors``, ``queues``, ``teams``, ``priorities``, ``kueue``).

Rules between these sections and the rest of the stack (quotas within the flavors' capacity, training above
inference, ...) are in ``components/config/rules.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from contract.chart_settings import ChartController, ChartSource
from contract.constants import ACCEPTED_LABEL, ACCEPTED_VALUE, GPU_RESOURCE, HOSTNAME_LABEL
from contract.fabric_settings import Fabric
from contract.model import (
    ConfigModel,
    DnsLabel,
    LabelKey,
    PositiveDuration,
    SemVer,
    Toleration,
    check_labels,
    check_qualified_name,
)

KUEUE_CHART_VERSION = "0.19.2"
KUEUE_IMAGE_REPOSITORY = "registry.k8s.io/kueue/kueue"
#: Largest value a user-defined Kubernetes PriorityClass may take (bigger values are reserved for the system).
MAX_USER_PRIORITY = 1_000_000_000


#: Kueue's bound on a Topology's levels (``topology_types.go``: MaxItems=16).
MAX_TOPOLOGY_LEVELS = 16


class TopologyLevel(ConfigModel):
    """One level of a network topology: the name a job spec uses, and the node label whose value is the domain."""

    #: What a job spec's ``topology.required`` / ``preferred`` names: ``block``, ``leaf``, ``host``.
    name: DnsLabel
    node_label: LabelKey


class Topology(ConfigModel):
    """A network topology (``gpucluster:topologies[]``): becomes a Kueue ``Topology`` that flavors name.

    Levels go from the widest to the narrowest (spine block, leaf, host), the last one the host. Kueue places a
    gang inside one domain of the level its job asks for, and only among nodes that carry a label for every level:
    a node without them is no capacity of the flavor (the labels come from fabric discovery,
    ``ansible/roles/ib_topology``).
    """

    name: DnsLabel
    levels: Annotated[list[TopologyLevel], Field(min_length=1, max_length=MAX_TOPOLOGY_LEVELS)]
    #: The level a job that says nothing is placed by, as Kueue's *preferred* topology (as close as it can,
    #: wider when it must); default: the level just above the hosts (the leaf), or the only one.
    default_level: DnsLabel | None = None

    @field_validator("levels")
    @classmethod
    def _levels(cls, v: list[TopologyLevel]) -> list[TopologyLevel]:
        for attr, what in (("name", "level name"), ("node_label", "nodeLabel")):
            values = [getattr(level, attr) for level in v]
            twice = sorted({x for x in values if values.count(x) > 1})
            if twice:
                raise ValueError(f"each {what} once; listed twice: {', '.join(twice)}")
        if v[-1].node_label != HOSTNAME_LABEL:
            raise ValueError(
                f"the last level must be {HOSTNAME_LABEL}: only then does Kueue check each node's taints, selectors "
                "and room, and name the nodes it assigns (make-before-break reserves exactly those)"
            )
        return v

    @model_validator(mode="after")
    def _default(self) -> Topology:
        if self.default_level is not None and self.label_of(self.default_level) is None:
            names = ", ".join(level.name for level in self.levels)
            raise ValueError(f"defaultLevel {self.default_level!r} is not a level of the topology ({names})")
        return self

    @property
    def node_labels(self) -> list[str]:
        return [level.node_label for level in self.levels]

    def label_of(self, level: str) -> str | None:
        """The node label of the level named ``level``; None when the topology has no such level."""
        return next((lv.node_label for lv in self.levels if lv.name == level), None)

    @property
    def default(self) -> str:
        """The level a job that names none is placed by."""
        if self.default_level is not None:
            return self.default_level
        return self.levels[-2].name if len(self.levels) > 1 else self.levels[-1].name

    def to_k8s(self) -> dict[str, Any]:
        """The Kueue Topology's spec (kueue.x-k8s.io/v1beta2)."""
        return {"levels": [{"nodeLabel": level.node_label} for level in self.levels]}


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
    #: How the flavor's nodes reach each other (``contract/fabric_settings.py``); none: the pods get no RDMA
    #: devices and NCCL picks its transport alone.
    fabric: Fabric | None = None
    #: A topology of ``gpucluster:topologies``: Kueue then places this flavor's gangs by it (the ResourceFlavor's
    #: ``topologyName``). Adding it to a flavor is an update; once set, Kueue makes the flavor's nodeLabels,
    #: tolerations and topology immutable (the API server refuses a change: declare a new flavor instead).
    topology: DnsLabel | None = None

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
    #: The group (as the cluster's authenticator names it: an OIDC group claim, a certificate's O) whose members
    #: submit for the team; they get the team's Role in its namespace and nothing else. Default
    #: ``gpucluster-team-<name>``.
    group: Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[^\s]+$")] | None = None

    @property
    def subject_group(self) -> str:
        return self.group or f"gpucluster-team-{self.name}"


class WorkloadPriority(ConfigModel):
    name: DnsLabel
    value: Annotated[int, Field(ge=-MAX_USER_PRIORITY, le=MAX_USER_PRIORITY)]
    description: str = ""
    #: The teams (``teams[].name``) whose jobs may name it; none: every team. ``gpucluster submit`` and the API
    #: server (``guardrails_policies.workloads.research_priority_by_team``) both hold it.
    teams: list[DnsLabel] | None = None

    def allows(self, team: str) -> bool:
        return self.teams is None or team in self.teams


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

    def allowed_for(self, team: str) -> list[str]:
        """The workload priorities ``team``'s jobs may name, highest first."""
        return [p.name for p in self.workload if p.allows(team)]


#: Kueue's feature gate that switches waitForPodsReady off: from 0.19 the gate is on even where the Configuration
#: leaves it out.
DISABLE_WAIT_FOR_PODS_READY_GATE = "DisableWaitForPodsReady"


class WaitForPodsReady(ConfigModel):
    """Kueue's all-or-nothing gate: a gang that cannot get every pod ready in time is evicted and requeued.
    ``enable: false`` sets Kueue's ``DisableWaitForPodsReady`` feature gate (leaving the block out is not enough
    from Kueue 0.19 on)."""

    enable: bool = True
    timeout: PositiveDuration = "10m"
    recovery_timeout: PositiveDuration | None = "3m"
    block_admission: bool = True
    backoff_base_seconds: Annotated[int, Field(ge=1)] = 60
    backoff_max_seconds: Annotated[int, Field(ge=1)] = 3600


#: The one resource the queue for CPU-only work counts: Kueue adds a pod set's pod count to its requests wherever a
#: ClusterQueue covers ``pods`` (``flavorassigner.go``), whatever ``excludeResourcePrefixes`` says.
POD_COUNT_RESOURCE = "pods"


def covers_gpus(resource_groups: Any) -> bool:
    """Whether a ClusterQueue's ``spec.resourceGroups`` (as written to the API) cover anything but the pod count: a
    queue that covers only ``pods`` cannot admit a pod that asks for a GPU (Kueue leaves a workload whose resources
    its ClusterQueue does not cover pending), so it admits no training."""
    if not isinstance(resource_groups, Sequence) or isinstance(resource_groups, str):
        return True  # unknown shape: assume the worst, the policies hold it as a GPU queue
    covered = {str(r) for g in resource_groups if isinstance(g, Mapping) for r in g.get("coveredResources") or []}
    return covered != {POD_COUNT_RESOURCE}


class CpuQueue(ConfigModel):
    """The queue for work that asks for no GPU: checkpoint checks, restore drills, a team's data preparation.

    A ClusterQueue outside the cohort whose only quota is how many pods it runs at once, over one ResourceFlavor of
    the same name that selects no node (the pods run where their own nodeSelector says), and a LocalQueue of that
    name in every team namespace. Every Job in a team namespace is Kueue's (``manageJobsWithoutQueueName``) and
    Kueue leaves CPU and memory to the scheduler, so without it such a Job could only queue in a GPU ClusterQueue;
    where every flavor of that queue is topology-aware, Kueue from 0.17.5 refuses a pod set that asks for none of
    the queue's resources ("no TAS flavor assigned", kubernetes-sigs/kueue#12417).
    """

    name: DnsLabel = "cpu-only"
    #: At most this many pods of the queue's Jobs run at once, across every team.
    pods: Annotated[int, Field(ge=1, le=100_000)] = 16


class KueueSettings(ChartController):
    IMAGE_REPOSITORY: ClassVar[str] = KUEUE_IMAGE_REPOSITORY
    chart_version: SemVer = KUEUE_CHART_VERSION
    chart: ChartSource = ChartSource(oci="oci://registry.k8s.io/kueue/charts/kueue")
    namespace: DnsLabel = "kueue-system"
    wait_for_pods_ready: WaitForPodsReady = WaitForPodsReady()
    cpu_queue: CpuQueue = CpuQueue()
    extra_values: dict[str, Any] = {}
