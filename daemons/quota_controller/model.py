"""What the quota controller sees and decides, as plain values: no I/O, no Kubernetes client types.

``translate.py`` builds these from API objects; ``capacity.py``, ``apportion.py`` and ``decide.py`` work on them
only, so every rule is tested with values typed by hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


class Out(StrEnum):
    """Why a node of a flavor does not count, in the order they are checked (the first that holds is reported)."""

    QUARANTINED = "quarantined"
    NOT_ACCEPTED = "not-accepted"
    CORDONED = "cordoned"
    NOT_READY = "not-ready"
    #: Ready again, but not yet for ``returnAfter`` since it was last out for being NotReady.
    RETURNING = "returning"
    NO_GPUS = "no-gpus"


@dataclass(frozen=True)
class NodeView:
    name: str
    labels: Mapping[str, str]
    #: Allocatable extended resources, whole units (``nvidia.com/gpu`` -> 8).
    allocatable: Mapping[str, int]
    unschedulable: bool
    #: The Ready condition: True, False, or None (Unknown or missing).
    ready: bool | None
    #: When the Ready condition last changed (wall seconds; None when the node does not say).
    ready_since: float | None
    taint_keys: frozenset[str] = frozenset()


@dataclass(frozen=True)
class QueueView:
    """A ClusterQueue as it is: its ``spec.resourceGroups`` and what its admitted workloads use, per flavor."""

    name: str
    resource_groups: tuple[Mapping[str, object], ...]
    #: GPUs admitted workloads hold, per flavor (``status.flavorsUsage``; empty when Kueue has not reported).
    usage: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Observation:
    """One cycle's reads; None where a read failed (the controller then changes nothing that depends on it)."""

    nodes: tuple[NodeView, ...] | None
    queues: Mapping[str, QueueView] | None
    #: What could not be read: list or object -> reason.
    problems: Mapping[str, str] = field(default_factory=dict)
