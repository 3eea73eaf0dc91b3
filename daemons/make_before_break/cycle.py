"""One decision's working state: the observation indexed, and the desired state as it is worked out.

``decide`` builds a :class:`Cycle` from one observation; the phases (``flip_back``, ``flip_out``, ``fallback``)
read it and add to the desired state; ``assemble`` turns what differs from the observation into actions.
Nothing outlives the call.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace

from daemons.make_before_break.actions import (
    Fallback,
    PodSetUpdate,
    ReleaseNode,
    ReserveNode,
    SetCheckPending,
    SetCheckReady,
    Toleration,
    WorkloadReport,
)
from daemons.make_before_break.model import Deployment, Node, Pod, PodSet, VirtualNode, Workload
from daemons.make_before_break.plan import PodKey
from daemons.make_before_break.policy import Policy

DeploymentKey = tuple[str, str]

#: Longest check message written (Kueue allows far more; people read the start).
MESSAGE_LIMIT = 1024


def cut(text: str) -> str:
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 1] + "…"


def gpu_pod_sets(workload: Workload) -> tuple[PodSet, ...]:
    return tuple(ps for ps in workload.pod_sets if ps.count > 0 and ps.gpus_per_pod > 0)


class Cycle:
    """The observation indexed, and the desired state (reservations, flips, epochs, checks) as it is worked out."""

    def __init__(
        self,
        *,
        nodes: Sequence[Node],
        pods: Sequence[Pod],
        deployments: Sequence[Deployment],
        workloads: Sequence[Workload],
        virtual_node: VirtualNode | None,
        policy: Policy,
        now: float,
    ) -> None:
        self.policy = policy
        self.now = now
        self.virtual_node = virtual_node
        self.reserves: list[ReserveNode] = []
        self.releases: list[ReleaseNode] = []
        self.checks: list[SetCheckPending | SetCheckReady] = []
        self.reports: list[WorkloadReport] = []
        self.notes: list[str] = []
        self.nodes: dict[str, Node] = {n.name: n for n in nodes}
        self.workloads: dict[str, Workload] = {w.uid: w for w in workloads}
        self.active: dict[str, Workload] = {uid: w for uid, w in self.workloads.items() if w.holds_quota}
        self.deps: dict[DeploymentKey, Deployment] = {d.key: d for d in deployments}
        # A pod whose Deployment is not known cannot be moved: treat it as immovable.
        self.pods: tuple[Pod, ...] = tuple(
            p if p.deployment is None or (p.namespace, p.deployment) in self.deps else replace(p, deployment=None)
            for p in pods
        )
        self.pods_on: dict[str, list[Pod]] = defaultdict(list)
        self.pods_of: dict[DeploymentKey, list[Pod]] = defaultdict(list)
        for pod in self.pods:
            self.pods_on[pod.node].append(pod)
            if pod.deployment is not None:
                self.pods_of[(pod.namespace, pod.deployment)].append(pod)
        self.flips: dict[DeploymentKey, set[str]] = {k: set(d.flips) for k, d in self.deps.items()}
        self.epoch: dict[DeploymentKey, str | None] = {k: d.epoch for k, d in self.deps.items()}
        self.returning: set[DeploymentKey] = set()
        self.why: dict[DeploymentKey, list[str]] = defaultdict(list)
        #: uid -> nodes observed reserved for it.
        self.mine: dict[str, set[str]] = defaultdict(set)
        for node in nodes:
            if node.reserved_for is not None:
                self.mine[node.reserved_for].add(node.name)
        self.released: set[str] = set()
        self.taken: set[str] = set()
        self.making_room: list[Workload] = []

    # ---------------------------------------------------------------- reading

    def held(self, w: Workload) -> float:
        """Seconds since the workload's quota was reserved (0 for a workload without quota)."""
        return 0.0 if w.quota_reserved_at is None else self.now - w.quota_reserved_at

    def gone(self, uid: str) -> str:
        w = self.workloads.get(uid)
        if w is None:
            return f"workload {uid}, which no longer exists"
        if w.deleting:
            return f"{w.ref}, which is being deleted"
        if w.finished:
            return f"{w.ref}, which has finished"
        if w.evicted:
            return f"{w.ref}, which was evicted"
        return f"{w.ref}, which no longer holds quota"

    def leaving(self) -> frozenset[PodKey]:
        """Pods whose Deployment's template (as decided so far) is no longer theirs: the rollout replaces them."""
        return frozenset(
            p.key
            for p in self.pods
            if p.deployment is not None and not p.terminating and p.epoch != self.epoch[(p.namespace, p.deployment)]
        )

    def free_room(self) -> dict[str, int]:
        """Free GPUs on healthy in-cluster nodes that nobody has reserved or is about to."""
        room: dict[str, int] = {}
        for name, node in self.nodes.items():
            if not node.healthy or node.reserved_for is not None or name in self.taken:
                continue
            free = node.gpus - sum(p.gpus for p in self.pods_on[name])
            if free > 0:
                room[name] = free
        return room

    # ---------------------------------------------------------------- desired state

    def release(self, name: str, uid: str, reason: str) -> None:
        if name not in self.released:
            self.released.add(name)
            self.releases.append(ReleaseNode(name, uid, reason))

    def updates(self, w: Workload) -> tuple[PodSetUpdate, ...]:
        key = self.policy.reservation_key
        toleration = Toleration(key, w.uid)
        return tuple(PodSetUpdate(ps.name, {key: w.uid}, (toleration,)) for ps in gpu_pod_sets(w))

    def ready(
        self,
        w: Workload,
        updates: tuple[PodSetUpdate, ...],
        fallback: Fallback | None,
        message: str,
        phase: str,
    ) -> None:
        message = cut(message)
        self.checks.append(SetCheckReady(w.uid, w.namespace, w.name, message, updates, fallback))
        held = self.held(w)
        reserved = len(self.mine[w.uid]) if updates else 0
        self.reports.append(WorkloadReport(w.uid, w.ref, phase, held, reserved, message))

    def pending(self, w: Workload, message: str, phase: str, held: float) -> None:
        message = cut(message)
        self.making_room.append(w)
        if w.check_message != message:
            self.checks.append(SetCheckPending(w.uid, w.namespace, w.name, message))
        self.reports.append(WorkloadReport(w.uid, w.ref, phase, held, len(self.mine[w.uid]), message))


def take(room: dict[str, int], gpus: int, count: int) -> bool:
    """Take ``count`` slots of ``gpus`` GPUs from ``room`` (fullest nodes first); False, taking nothing, if short."""
    if count <= 0 or gpus <= 0:
        return True
    if sum(free // gpus for free in room.values()) < count:
        return False
    left = count
    for name, free in sorted(room.items(), key=lambda kv: (kv[1], kv[0])):
        slots = min(free // gpus, left)
        if slots:
            room[name] = free - slots * gpus
            left -= slots
        if not left:
            break
    return True
