"""Short builders for observations: nodes of one flavor, inference pods and Deployments, gangs of whole-node pods."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from daemons.make_before_break.actions import (
    ReleaseNode,
    ReserveNode,
    SetCheckPending,
    SetCheckReady,
    SetDeletionCost,
    SetPlacement,
)
from daemons.make_before_break.model import (
    CheckState,
    Deployment,
    Node,
    Observation,
    Pod,
    PodSet,
    VirtualNode,
    Workload,
)

NS = "inference"
FLAVOR = {"gpu": "h100"}
VIRTUAL = "gpu-burst"
#: A virtual node with room, burst taint off.
RENTED = VirtualNode(VIRTUAL, 64, burst_taint=False)

T = TypeVar("T")


def node(name: str, gpus: int = 8, labels: dict[str, str] | None = None, **kw: Any) -> Node:
    return replace(Node(name, FLAVOR if labels is None else labels, gpus), **kw)


def pod(name: str, on: str, gpus: int = 1, deployment: str | None = None, **kw: Any) -> Pod:
    return replace(Pod(NS, name, on, gpus, deployment), **kw)


def dep(name: str, replicas: int, gpus: int = 1, **kw: Any) -> Deployment:
    return replace(Deployment(NS, name, replicas, replicas, replicas, replicas, gpus), **kw)


def gang(uid: str, pods: int = 2, gpus: int = 8, *, at: float = 0.0, **kw: Any) -> Workload:
    sets = (PodSet("workers", pods, gpus, FLAVOR),)
    return replace(Workload(uid, "team-a", f"job-{uid}", sets, at, CheckState.PENDING), **kw)


def observe(
    nodes: Sequence[Node] = (),
    pods: Sequence[Pod] = (),
    deployments: Sequence[Deployment] = (),
    workloads: Sequence[Workload] = (),
    virtual: VirtualNode | None = RENTED,
) -> Observation:
    return Observation(tuple(nodes), tuple(pods), tuple(deployments), tuple(workloads), virtual)


def of(actions: Sequence[object], kind: type[T]) -> list[T]:
    """The actions of one kind, in order."""
    return [a for a in actions if isinstance(a, kind)]


def apply(obs: Observation, actions: Iterable[object]) -> Observation:
    """The observation after the actions were written (no other controller moves in between)."""
    nodes = {n.name: n for n in obs.nodes or ()}
    pods = {p.key: p for p in obs.pods or ()}
    deps = {d.key: d for d in obs.deployments or ()}
    workloads = {w.uid: w for w in obs.workloads or ()}
    for a in actions:
        if isinstance(a, ReserveNode):
            nodes[a.node] = replace(nodes[a.node], reserved_for=a.uid)
        elif isinstance(a, ReleaseNode) and nodes[a.node].reserved_for == a.uid:
            nodes[a.node] = replace(nodes[a.node], reserved_for=None)
        elif isinstance(a, SetDeletionCost):
            pods[(a.namespace, a.pod)] = replace(pods[(a.namespace, a.pod)], deletion_cost=a.cost)
        elif isinstance(a, SetPlacement):
            key = (a.namespace, a.deployment)
            deps[key] = replace(deps[key], flips=frozenset(a.flips), epoch=a.epoch, phase=a.phase, note=a.note)
        elif isinstance(a, SetCheckPending):
            workloads[a.uid] = replace(workloads[a.uid], check_message=a.message)
        elif isinstance(a, SetCheckReady):
            workloads[a.uid] = replace(workloads[a.uid], check=CheckState.READY, check_message=a.message)
    return replace(
        obs,
        nodes=tuple(nodes.values()),
        pods=tuple(pods.values()),
        deployments=tuple(deps.values()),
        workloads=tuple(workloads.values()),
    )
