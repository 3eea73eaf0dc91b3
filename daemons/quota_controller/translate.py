"""API objects (JSON as the API server returns it) to the controller's plain values (``model.py``).

A malformed object is never a crash: a node that cannot be read is left out with its reason (so it counts as no
capacity, and says so), a ClusterQueue without a readable spec is reported as unreadable (and left alone).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contract.times import unix_seconds
from daemons.quota_controller.decide import quantity
from daemons.quota_controller.model import NodeView, QueueView
from daemons.toolkit.kube_api import shown


def _ready(status: Mapping[str, Any]) -> tuple[bool | None, float | None]:
    for condition in status.get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            state = {"True": True, "False": False}.get(str(condition.get("status")))
            return state, unix_seconds(condition.get("lastTransitionTime"))
    return None, None


def node_view(obj: Mapping[str, Any]) -> NodeView:
    """One Node; ValueError names what is wrong with it."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str):
        raise ValueError("a node without metadata.name")
    name = meta["name"]
    labels = meta.get("labels") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    if not isinstance(labels, Mapping) or not isinstance(spec, Mapping) or not isinstance(status, Mapping):
        raise ValueError(f"node {shown(name)}: metadata.labels, spec or status is not an object")
    allocatable: dict[str, int] = {}
    for resource, value in (status.get("allocatable") or {}).items():
        units = quantity(value)
        if units is not None:
            allocatable[str(resource)] = units
    taints = spec.get("taints") or []
    if not isinstance(taints, list):
        raise ValueError(f"node {shown(name)}: spec.taints is not a list")
    keys = frozenset(str(t.get("key")) for t in taints if isinstance(t, Mapping) and t.get("key"))
    ready, since = _ready(status)
    return NodeView(
        name=name,
        labels={str(k): str(v) for k, v in labels.items()},
        allocatable=allocatable,
        unschedulable=bool(spec.get("unschedulable")),
        ready=ready,
        ready_since=since,
        taint_keys=keys,
    )


def queue_view(obj: Mapping[str, Any]) -> QueueView:
    """One ClusterQueue; ValueError names what is wrong with it."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str):
        raise ValueError("a ClusterQueue without metadata.name")
    name = meta["name"]
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        raise ValueError(f"ClusterQueue {shown(name)}: no spec")
    groups = spec.get("resourceGroups") or []
    if not isinstance(groups, list) or not all(isinstance(g, Mapping) for g in groups):
        raise ValueError(f"ClusterQueue {shown(name)}: spec.resourceGroups is not a list of objects")
    usage: dict[str, int] = {}
    status = obj.get("status") or {}
    for flavor in (status.get("flavorsUsage") or []) if isinstance(status, Mapping) else []:
        if not isinstance(flavor, Mapping):
            continue
        total = 0
        for res in flavor.get("resources") or []:
            if isinstance(res, Mapping):
                total += quantity(res.get("total", 0)) or 0
        usage[str(flavor.get("name"))] = total
    return QueueView(name=name, resource_groups=tuple(groups), usage=usage)
