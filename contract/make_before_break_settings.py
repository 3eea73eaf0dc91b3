"""Settings of the make-before-break controller: one pydantic model for the stack section
``gpucluster:makeBeforeBreak`` and the daemon's settings file.

The stack check (``components/config/``) validates the operator-facing fields; the stack then fills the ones that
say where the controller acts (:data:`FILLED`: the virtual node, the burst taint key, the GPU resource, the
quarantine taint keys, the AdmissionCheck's name, and the inference namespaces unless the section names fewer) and
the component renders the whole model as JSON into the daemon's ConfigMap (:meth:`MakeBeforeBreakSettings.to_json`),
which the daemon reads with :func:`load_settings`. The component-only fields (``image``, ``replicas``) travel in the
file too; the daemon ignores them. Pure pydantic (no Pulumi): the daemon imports it.

The controller is the Kueue AdmissionCheck ``make-before-break`` (``controllerName:
gpucluster.io/make-before-break``) on every ClusterQueue that admits training: before a gang is admitted, the
inference replicas on the GPUs it needs are replaced elsewhere first (daemons/make_before_break/README.md).

Example (camelCase, as in the stack YAML or the JSON file)::

    enabled: true
    image: ghcr.io/example/gpucluster-daemons:0.1.0  # unset: from gpucluster:images
    maxHold: 5m          # a gang waits at most this long for its room, then training wins by preemption
    nodeGrace: 60s       # a reserved node that is not Ready keeps counting this long
    returnBatch: 2       # Deployments coming home at the same time
    replicas: 2

Off by default: a ClusterQueue that lists the check admits nothing until the controller marks it Active.

Turning it off leaves nothing behind when done in two steps. First ``draining: true`` (with ``enabled: true``):
the ClusterQueues stop listing the check, so no gang waits for room, and the controller keeps running to undo
what it did: a check still pending goes Ready at once, each reservation is released when its training ends, and
every moved Deployment comes home at ``returnBatch``'s pace. When
``gpucluster_make_before_break_left_behind`` is 0 for nodes, Deployments and pods (the controller logs
"drained"), ``enabled: false`` removes the controller.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, ClassVar

from pydantic import Field, ValidationInfo, field_validator

from contract.constants import (
    DEFAULT_BURST_TAINT_KEY,
    GPU_RESOURCE,
    QUARANTINE_TAINT_KEY,
    RESERVATION_KEY,
    VIRTUAL_NODE_TAINT_KEY,
)
from contract.images_settings import DEFAULT_DAEMONS_IMAGE
from contract.issues import SettingsError, shown
from contract.model import (
    ControllerReplicas,
    ControllerSettings,
    DnsLabel,
    DnsSubdomain,
    Image,
    PollInterval,
    PositiveDuration,
    Problem,
    QualifiedName,
    Seconds,
    TaintKey,
    each_once,
    parse_duration,
    shorter_rule,
)

#: The AdmissionCheck's name, listed on the training ClusterQueues.
#: Its section of the stack (``gpucluster:makeBeforeBreak``), and its spec's ``stack_key``.
STACK_KEY = "makeBeforeBreak"
CHECK_NAME = "make-before-break"
#: The AdmissionCheck's ``spec.controllerName``: the controller acts only on checks naming it.
CONTROLLER_NAME = "gpucluster.io/make-before-break"
#: Field manager of every write the controller makes (server-side apply and patches alike).
FIELD_MANAGER = "gpucluster-make-before-break"
DEFAULT_NODE_NAME = "gpu-burst"
DEFAULT_QUARANTINE_TAINT_KEYS = (QUARANTINE_TAINT_KEY,)
#: Longest hold: beyond it every Kueue admission could stall for longer than an hour (blockAdmission).
MAX_HOLD_SECONDS = 3600.0
#: Most Deployments coming home at once.
MAX_RETURN_BATCH = 50
#: Lowest and highest pod-deletion-cost the controller may write (the annotation is an int32, and negative sorts
#: below every default pod).
MIN_DELETION_COST, MAX_DELETION_COST = -(2**31), -1

#: The fields the stack fills (camelCase key: where from); a stack section that sets one is refused.
FILLED = {
    "admissionCheckName": f"the AdmissionCheck this stack creates ({CHECK_NAME})",
    "virtualNodeName": "burst.virtualNode.nodeName (none without burst)",
    "burstTaintKey": "gpucluster:burstTaintKey",
    "gpuResource": f"the GPU resource every component requests ({GPU_RESOURCE})",
    "quarantineTaintKeys": f"the quarantine taint ({', '.join(DEFAULT_QUARANTINE_TAINT_KEYS)})",
}

#: What must be shorter than what, and why.
_SHORTER = {
    "nodeGrace": ("maxHold", "a node that is not Ready would keep its reservation past the whole hold"),
}


def _reservation_key_apart(key: str) -> str | None:
    if key == DEFAULT_BURST_TAINT_KEY:
        return f"{shown(key)} is the burst taint key: a reserved node and the virtual node's switch must differ"
    if key.startswith("virtual-kubelet.io/"):
        return f"{shown(key)} is in the virtual node's own taint namespace ({VIRTUAL_NODE_TAINT_KEY})"
    return None


class MakeBeforeBreakSettings(ControllerSettings):
    """Everything the make-before-break controller needs; see the module docstring."""

    #: Off until a stack sets it: the training ClusterQueues list the check only while it is on.
    enabled: bool = False
    #: On its way off: the queues stop listing the check; no new room is made; what was done is undone.
    draining: bool = False
    #: Where the Deployment and its Lease live.
    namespace: DnsLabel = "gpucluster-burst"
    #: Unset in a stack: filled from ``gpucluster:images`` (contract/images_settings.py).
    image: Image = DEFAULT_DAEMONS_IMAGE
    replicas: ControllerReplicas = 2
    #: How long a gang may wait for its room, from QuotaReserved; then the check goes Ready anyway. Below Kueue's
    #: pods-ready timeout (10m by default), which the stack check holds it to.
    max_hold: PositiveDuration = "5m"
    #: How long a reserved node that is not Ready keeps counting.
    node_grace: PositiveDuration = "60s"
    #: Deployments coming home at the same time.
    return_batch: Annotated[int, Field(ge=1, le=MAX_RETURN_BATCH)] = 2
    #: The pod-deletion-cost that marks a replica to be removed first (negative: below every default pod).
    deletion_cost: Annotated[int, Field(ge=MIN_DELETION_COST, le=MAX_DELETION_COST)] = -1000
    #: Label and NoSchedule taint on a reserved node.
    reservation_key: TaintKey = RESERVATION_KEY
    #: How often the controller lists and decides (at least a second).
    interval: PollInterval = "10s"
    #: How long one API call may take.
    request_timeout: PositiveDuration = "10s"
    lease_name: DnsSubdomain = "gpucluster-make-before-break"
    lease_duration: PositiveDuration = "15s"
    renew_deadline: PositiveDuration = "10s"
    #: How often the leader renews and the others try to take the Lease (at least a second).
    retry_period: PollInterval = "2s"
    #: The namespaces whose GPU Deployments it may move; filled from ``gpucluster:inferenceNamespaces`` unless the
    #: section names fewer.
    inference_namespaces: Annotated[list[DnsLabel], each_once("namespaces")] = Field(
        default_factory=lambda: ["inference"], min_length=1, max_length=64
    )

    # Filled by the stack (FILLED); the daemon reads them from the file.
    #: The AdmissionCheck object (cluster-scoped) whose Active condition the controller sets.
    admission_check_name: DnsSubdomain = CHECK_NAME
    #: The virtual node standing for rented GPUs; None: the stack runs no burst, nothing can be rented.
    virtual_node_name: DnsSubdomain | None = DEFAULT_NODE_NAME
    burst_taint_key: TaintKey = DEFAULT_BURST_TAINT_KEY
    gpu_resource: QualifiedName = GPU_RESOURCE
    #: Taint keys that mark a node quarantined (no room is planned on it).
    quarantine_taint_keys: Annotated[list[TaintKey], each_once("taint keys")] = Field(
        default_factory=lambda: list(DEFAULT_QUARANTINE_TAINT_KEYS), max_length=16
    )

    @field_validator("draining")
    @classmethod
    def _draining_needs_the_controller(cls, v: bool, info: ValidationInfo) -> bool:
        if v and not info.data.get("enabled", False):
            raise ValueError(
                "draining needs enabled: true (the controller undoes its reservations and moves while it drains; "
                "set enabled: false once gpucluster_make_before_break_left_behind is 0)"
            )
        return v

    @field_validator("max_hold")
    @classmethod
    def _hold_bounded(cls, v: str) -> str:
        if parse_duration(v) > MAX_HOLD_SECONDS:
            raise ValueError(
                f"{shown(v)} is longer than 1h: with blockAdmission a held gang stalls every Kueue admission"
            )
        return v

    @field_validator("reservation_key")
    @classmethod
    def _key_apart(cls, v: str) -> str:
        problem = _reservation_key_apart(v)
        if problem:
            raise ValueError(problem)
        return v

    # Rules between fields: checked as each field validates, so they report with every other problem, and again
    # on the whole model, for the fields left at their defaults.
    _grace_below_hold = shorter_rule(_SHORTER, "nodeGrace")

    def rule_problems(self) -> Iterator[Problem]:
        yield from self.shorter_problems(_SHORTER)
        yield from super().rule_problems()

    # Seconds, for the daemon.
    max_hold_seconds: ClassVar[Seconds] = Seconds("max_hold")
    node_grace_seconds: ClassVar[Seconds] = Seconds("node_grace")
    request_timeout_seconds: ClassVar[Seconds] = Seconds("request_timeout")


#: Validate already-parsed settings, or read a settings file: SettingsError lists every problem with its key path.
parse_settings = MakeBeforeBreakSettings.parse
load_settings = MakeBeforeBreakSettings.load


__all__ = [
    "CHECK_NAME",
    "CONTROLLER_NAME",
    "FIELD_MANAGER",
    "FILLED",
    "STACK_KEY",
    "MakeBeforeBreakSettings",
    "SettingsError",
    "load_settings",
    "parse_settings",
]
