"""What a decision asks for: desired state, each action with a reason for people.

Actions describe desired state ("node X reserved for uid U"), not steps: applying one that already holds changes
nothing. :func:`daemons.make_before_break.decide.decide` emits them in the order to apply them; the Kubernetes side
turns each into one request (:mod:`daemons.make_before_break.requests`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from contract.controllers.make_before_break import (
    EPOCH_ANNOTATION,
    FLIPS_ANNOTATION,
    NO_EVICTION_ANNOTATION,
    NOTE_ANNOTATION,
    PHASE_ANNOTATION,
)
from daemons.make_before_break.model import Phase


class Fallback(StrEnum):
    """Why a check went Ready before the room was made (a metric label)."""

    MAX_HOLD = "max-hold"
    NO_CAPACITY = "no-capacity"
    #: The controller is draining (``draining: true``): no new room is made.
    DRAINING = "draining"


@dataclass(frozen=True)
class Toleration:
    key: str
    value: str
    operator: str = "Equal"
    effect: str = "NoSchedule"


@dataclass(frozen=True)
class PodSetUpdate:
    """One entry of the check's podSetUpdates."""

    name: str
    node_selector: Mapping[str, str]
    tolerations: tuple[Toleration, ...]


@dataclass(frozen=True)
class ReserveNode:
    """Ensure the node carries the reservation label and NoSchedule taint with value ``uid``."""

    node: str
    uid: str
    reason: str


@dataclass(frozen=True)
class ReleaseNode:
    """Ensure the node carries neither the reservation label nor its taint (now holding ``uid``)."""

    node: str
    uid: str
    reason: str


@dataclass(frozen=True)
class SetDeletionCost:
    """Ensure the pod's deletion-cost annotation is ``cost`` (None: absent)."""

    namespace: str
    pod: str
    cost: int | None
    reason: str


@dataclass(frozen=True)
class SetPlacement:
    """Ensure the Deployment's placement annotations are these (server-side apply of our keys only)."""

    namespace: str
    deployment: str
    #: Workload uids it was moved for, sorted; empty: the annotation goes.
    flips: tuple[str, ...]
    #: The template's placement epoch; None: its own template (a change rolls the Deployment out).
    epoch: str | None
    phase: Phase | None
    note: str
    reason: str

    @property
    def annotations(self) -> dict[str, str]:
        """Our keys in metadata.annotations (keys not listed are removed)."""
        out: dict[str, str] = {}
        if self.flips:
            out[FLIPS_ANNOTATION] = ",".join(self.flips)
        if self.phase is not None:
            out[PHASE_ANNOTATION] = self.phase.value
        if self.note:
            out[NOTE_ANNOTATION] = self.note
        return out

    @property
    def template_annotations(self) -> dict[str, str]:
        """Our keys in spec.template.metadata.annotations (keys not listed are removed)."""
        if self.epoch is None:
            return {}
        return {EPOCH_ANNOTATION: self.epoch, NO_EVICTION_ANNOTATION: "true"}


@dataclass(frozen=True)
class SetCheckPending:
    """Keep the check Pending with this message (the progress people read on the workload)."""

    uid: str
    namespace: str
    workload: str
    message: str

    @property
    def reason(self) -> str:
        return self.message


@dataclass(frozen=True)
class SetCheckReady:
    """Set the check Ready. ``fallback`` set: before the room was made (an Event and a metric)."""

    uid: str
    namespace: str
    workload: str
    message: str
    pod_set_updates: tuple[PodSetUpdate, ...]
    fallback: Fallback | None = None

    @property
    def reason(self) -> str:
        return self.message


Action = ReserveNode | ReleaseNode | SetDeletionCost | SetPlacement | SetCheckPending | SetCheckReady


@dataclass(frozen=True)
class WorkloadReport:
    """Where one workload stands after this decision (for logs and metrics)."""

    uid: str
    ref: str
    #: reserving, making-room, waiting, admitting, fallback, admitted
    phase: str
    #: Seconds since QuotaReserved.
    held_s: float
    reserved_nodes: int
    detail: str
