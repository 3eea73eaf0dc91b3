"""The API's lists -> the :class:`Observation` the decision takes, fail-static.

Reading is polling (one list per kind per cycle, no watches). A list that fails, or holds an object that cannot be
read, makes its part of the observation None, with the reason: the decision then changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from contract.make_before_break_settings import MakeBeforeBreakSettings
from daemons.make_before_break.fields import TranslationError, ref_of, value_at
from daemons.make_before_break.model import Node, Observation, Pod, VirtualNode
from daemons.make_before_break.translate import (
    deployment_from,
    flavor_labels,
    node_from,
    node_gpus,
    pod_from,
    virtual_node_from,
    workload_from,
)


@dataclass
class RawLists:
    """The API's lists as JSON items; None where the list call failed (``errors`` says why)."""

    nodes: list[Mapping[str, Any]] | None
    pods: list[Mapping[str, Any]] | None
    deployments: list[Mapping[str, Any]] | None
    workloads: list[Mapping[str, Any]] | None
    flavors: list[Mapping[str, Any]] | None
    errors: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Observed:
    observation: Observation
    #: list name -> why it is unknown (a failed call, or an object that cannot be read).
    problems: Mapping[str, str]


def _each(items: Sequence[Mapping[str, Any]] | None, what: str, problems: dict[str, str], parse: Any) -> Any:
    if items is None:
        return None
    out = []
    for obj in items:
        try:
            value = parse(obj)
        except TranslationError as exc:
            problems[what] = str(exc)
            return None
        if value is not None:
            out.append(value)
    return tuple(out)


def observe(raw: RawLists, settings: MakeBeforeBreakSettings) -> Observed:
    """The observation the decision takes; a failed or unreadable list makes its part None (fail-static)."""
    problems = dict(raw.errors)
    virtual: VirtualNode | None = None
    nodes: tuple[Node, ...] | None = None
    if raw.nodes is not None:
        real = []
        try:
            for obj in raw.nodes:
                name = obj.get("metadata", {}).get("name") if isinstance(obj.get("metadata"), Mapping) else None
                if settings.virtual_node_name is not None and name == settings.virtual_node_name:
                    virtual = virtual_node_from(obj, settings)
                elif node_gpus(obj, settings.gpu_resource) > 0:
                    real.append(node_from(obj, settings))
            nodes = tuple(real)
        except TranslationError as exc:
            problems["nodes"] = str(exc)
            virtual = None
    known = {n.name for n in nodes or ()} | ({virtual.name} if virtual else set())

    def pod(obj: Mapping[str, Any]) -> Pod | None:
        phase = value_at(obj, "status.phase", str, ref_of(obj, "Pod"), "")
        if phase in ("Succeeded", "Failed") or value_at(obj, "spec.nodeName", str, ref_of(obj, "Pod"), "") not in known:
            return None
        p = pod_from(obj, settings)
        return p if p.gpus > 0 else None

    pods = _each(raw.pods, "pods", problems, pod) if nodes is not None else None
    deployments = _each(raw.deployments, "deployments", problems, lambda o: deployment_from(o, settings))
    flavors: dict[str, dict[str, str]] | None = None
    if raw.flavors is not None:
        try:
            flavors = flavor_labels(raw.flavors)
        except TranslationError as exc:
            problems["resourceflavors"] = str(exc)
    workloads = None
    if flavors is not None:
        workloads = _each(raw.workloads, "workloads", problems, lambda o: workload_from(o, flavors, settings))
    elif "resourceflavors" not in problems:
        problems["resourceflavors"] = "the ResourceFlavor list failed"
    return Observed(Observation(nodes, pods, deployments, workloads, virtual), problems)
