"""What the make-before-break controller observes, as plain frozen data.

Every field is something the Kubernetes side reads from an API object (a label, an annotation, a status field,
a condition's lastTransitionTime); nothing here is remembered by the controller. A controller that restarts and
lists again therefore rebuilds the same observation, and :func:`daemons.make_before_break.decide.decide` gives
the same decision.

Times are seconds on the Unix clock (the API's timestamps), the same scale as the ``now`` passed to ``decide``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

# Label and taint of a reserved node: its home is contract/constants.py; named here too, beside the other keys.
from contract.constants import RESERVATION_KEY  # noqa: F401


class CheckState(StrEnum):
    """Kueue's AdmissionCheck states (kueue.x-k8s.io/v1beta2)."""

    PENDING = "Pending"
    READY = "Ready"
    RETRY = "Retry"
    REJECTED = "Rejected"


class Phase(StrEnum):
    """Where a Deployment's placement stands (the :data:`PHASE_ANNOTATION`)."""

    #: Rolled off GPUs reserved for the workloads in its flips annotation.
    MOVED = "moved"
    #: Those workloads are gone; it waits for in-cluster room to come home.
    AWAITING_RETURN = "awaiting-return"
    #: Rolling back to its own template, make-before-break.
    RETURNING = "returning"


@dataclass(frozen=True)
class Node:
    """An in-cluster GPU node (the virtual node is :class:`VirtualNode`)."""

    name: str
    labels: Mapping[str, str]
    #: Allocatable GPUs.
    gpus: int
    #: When its Ready condition last turned other than True; None while it is Ready.
    not_ready_since: float | None = None
    #: False when cordoned (spec.unschedulable).
    schedulable: bool = True
    #: Carries the quarantine taint (a hot or erroring GPU).
    quarantined: bool = False
    #: The uid in its reservation taint; None when not reserved.
    reserved_for: str | None = None

    @property
    def ready(self) -> bool:
        return self.not_ready_since is None

    @property
    def healthy(self) -> bool:
        """Ready, schedulable and not quarantined: a node pods can land on."""
        return self.ready and self.schedulable and not self.quarantined


@dataclass(frozen=True)
class Pod:
    """A GPU pod bound to a node (in-cluster or the virtual node)."""

    namespace: str
    name: str
    node: str
    gpus: int
    #: The Deployment (same namespace) that owns it through a ReplicaSet, for inference pods only: those can be
    #: moved by rolling that Deployment. None for every other GPU pod (training, system, a bare pod): immovable.
    deployment: str | None = None
    #: The placement epoch in its annotations (the template it was created from); None: the Deployment's own.
    epoch: str | None = None
    #: Has a deletionTimestamp: still holds its GPUs, but is on its way out.
    terminating: bool = False
    #: Its pod-deletion-cost annotation; None when absent or not an integer.
    deletion_cost: int | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


@dataclass(frozen=True)
class Deployment:
    """An inference Deployment: its rollout status and our annotations on it."""

    namespace: str
    name: str
    #: spec.replicas (the HPA's to set, never ours).
    desired: int
    #: status.updatedReplicas, status.availableReplicas, status.replicas (pods of every ReplicaSet).
    updated: int
    available: int
    replicas: int
    #: GPUs each replica requests.
    gpus_per_pod: int
    #: status.observedGeneration has caught up with metadata.generation.
    current: bool = True
    #: maxSurge resolved to a number of pods (a rollout creates at most this many extra pods at once).
    surge: int = 1
    flips: frozenset[str] = frozenset()
    #: The template's placement epoch; None: its own template.
    epoch: str | None = None
    phase: Phase | None = None
    note: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    @property
    def rolled_out(self) -> bool:
        """The rollout is complete: every replica is of the current template, available, and no old one is left."""
        return (
            self.current
            and self.updated >= self.desired
            and self.replicas <= self.desired
            and self.available >= self.desired
        )


@dataclass(frozen=True)
class PodSet:
    """One pod set of a workload, as Kueue admitted it."""

    name: str
    #: Pods admitted (podSetAssignments[].count: below spec with partial admission).
    count: int
    gpus_per_pod: int
    #: The nodeLabels of the ResourceFlavor assigned to its GPUs.
    node_labels: Mapping[str, str] = field(default_factory=dict)
    #: Node -> pods where Kueue's topology-aware scheduling put them (the admission's topologyAssignment); empty
    #: for a flavor without a topology. The pods will run there and nowhere else: the room is exactly these nodes.
    assigned: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Workload:
    """A Kueue Workload on a ClusterQueue that lists the make-before-break check."""

    uid: str
    namespace: str
    name: str
    pod_sets: tuple[PodSet, ...]
    #: lastTransitionTime of QuotaReserved=True; None while no quota is reserved.
    quota_reserved_at: float | None
    #: The state of our check in status.admissionChecks; None when not listed there.
    check: CheckState | None = CheckState.PENDING
    check_message: str = ""
    finished: bool = False
    evicted: bool = False
    #: Has a deletionTimestamp.
    deleting: bool = False

    @property
    def holds_quota(self) -> bool:
        """Quota reserved and not finished, evicted or being deleted: its room must be kept."""
        return self.quota_reserved_at is not None and not (self.finished or self.evicted or self.deleting)

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class VirtualNode:
    """The virtual node that stands for rented GPUs."""

    name: str
    #: Allocatable GPUs the provider advertises; None: unknown. 0: it can supply nothing.
    gpus: int | None
    #: Carries the burst taint: new pods cannot land there.
    burst_taint: bool


@dataclass(frozen=True)
class Observation:
    """One consistent look at the cluster. A list that failed is None: the decision then changes nothing."""

    nodes: tuple[Node, ...] | None
    pods: tuple[Pod, ...] | None
    deployments: tuple[Deployment, ...] | None
    workloads: tuple[Workload, ...] | None
    #: None when the stack runs no virtual node (no burst): nothing can be rented.
    virtual_node: VirtualNode | None = None

    def unknown(self) -> list[str]:
        """The names of the lists that are not known."""
        lists = (("nodes", self.nodes), ("pods", self.pods), ("deployments", self.deployments))
        return [name for name, value in (*lists, ("workloads", self.workloads)) if value is None]


def epoch_for(flips: Iterable[str], previous: str | None) -> str:
    """The next placement epoch: a new value whenever the pods of a Deployment must be replaced again.

    It depends only on what the API holds (the flips and the epoch before), so a controller that restarts
    computes the same value and a rollout is never started twice for one reason.
    """
    text = ",".join(sorted(flips)) + "#" + (previous or "")
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def parse_flips(value: str | None) -> frozenset[str]:
    """The flips annotation's uids (empty entries ignored)."""
    if not value:
        return frozenset()
    return frozenset(part.strip() for part in value.split(",") if part.strip())
