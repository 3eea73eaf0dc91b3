"""Settings of the make-before-break controller: ``gpucluster:makeBeforeBreak`` in the stack. Pure pydantic (no
Pulumi). The component renders the daemon's settings file from it (:func:`controller_document`, the keys of
``daemons/make_before_break/settings.py``), with the namespaces, virtual node and burst taint the stack fills.

The controller is the Kueue AdmissionCheck ``make-before-break`` (``controllerName:
gpucluster.io/make-before-break``) on every ClusterQueue that admits training: before a gang is admitted, the
inference replicas on the GPUs it needs are replaced elsewhere first (daemons/make_before_break/README.md).

Example (camelCase, as in the stack YAML or the JSON file)::

    enabled: true
    image: ghcr.io/example/gpucluster-daemons:0.1.0
    maxHold: 5m          # a gang waits at most this long for its room, then training wins by preemption
    nodeGrace: 60s       # a reserved node that is not Ready keeps counting this long
    returnBatch: 2       # Deployments coming home at the same time
    replicas: 2

Off by default: a ClusterQueue that lists the check admits nothing until the controller marks it Active.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Annotated, Any

from pydantic import Field, ValidationError, ValidationInfo, field_validator

from components.constants import DEFAULT_BURST_TAINT_KEY, VIRTUAL_NODE_TAINT_KEY
from components.issues import ConfigIssue, SettingsError, issues_from_validation_error, shown
from components.model import (
    ConfigModel,
    DnsLabel,
    DnsSubdomain,
    Image,
    PollInterval,
    PositiveDuration,
    Problem,
    TaintKey,
    parse_duration,
)

#: The AdmissionCheck's name, listed on the training ClusterQueues.
CHECK_NAME = "make-before-break"
#: The AdmissionCheck's ``spec.controllerName``: the controller acts only on checks naming it.
CONTROLLER_NAME = "gpucluster.io/make-before-break"
#: Label and NoSchedule taint on a reserved node (the same key as ``daemons.make_before_break.model``).
DEFAULT_RESERVATION_KEY = "gpucluster.io/reservation"
#: Longest hold: beyond it every Kueue admission could stall for longer than an hour (blockAdmission).
MAX_HOLD_SECONDS = 3600.0
#: Most Deployments coming home at once.
MAX_RETURN_BATCH = 50
#: The pod-deletion-cost range the API server accepts (an int32).
_INT32 = 2**31

#: What must be shorter than what, and why.
_SHORTER = {
    "nodeGrace": ("maxHold", "a node that is not Ready would keep its reservation past the whole hold"),
    "renewDeadline": ("leaseDuration", "the leader must give up the lease before another replica may take it"),
    "retryPeriod": ("renewDeadline", "the leader must get a retry in before its deadline"),
}


def _shorter(name: str, value: str | None, limit: str | None) -> str | None:
    """Why ``name`` must be shorter than the duration it is bounded by, when it is not (None: nothing to check)."""
    if value is None or limit is None or parse_duration(value) < parse_duration(limit):
        return None
    other, why = _SHORTER[name]
    return f"{name} ({value}) must be shorter than {other} ({limit}): {why}"


def _reservation_key_apart(key: str) -> str | None:
    if key == DEFAULT_BURST_TAINT_KEY:
        return f"{shown(key)} is the burst taint key: a reserved node and the virtual node's switch must differ"
    if key.startswith("virtual-kubelet.io/"):
        return f"{shown(key)} is in the virtual node's own taint namespace ({VIRTUAL_NODE_TAINT_KEY})"
    return None


class MakeBeforeBreakSettings(ConfigModel):
    """Everything the make-before-break controller needs; see the module docstring."""

    #: Off until a stack sets it: the training ClusterQueues list the check only while it is on.
    enabled: bool = False
    #: Where the Deployment and its Lease live.
    namespace: DnsLabel = "gpucluster-burst"
    image: Image = "ghcr.io/example/gpucluster-daemons:0.1.0"
    replicas: Annotated[int, Field(ge=1, le=3)] = 2
    #: How long a gang may wait for its room, from QuotaReserved; then the check goes Ready anyway.
    max_hold: PositiveDuration = "10m"
    #: How long a reserved node that is not Ready keeps counting.
    node_grace: PositiveDuration = "60s"
    #: Deployments coming home at the same time.
    return_batch: Annotated[int, Field(ge=1, le=MAX_RETURN_BATCH)] = 2
    #: The pod-deletion-cost that marks a replica to be removed first (negative: below every default pod).
    deletion_cost: Annotated[int, Field(ge=-_INT32, le=-1)] = -1000
    #: Label and NoSchedule taint on a reserved node.
    reservation_key: TaintKey = DEFAULT_RESERVATION_KEY
    #: How often the controller lists and decides (at least a second).
    interval: PollInterval = "10s"
    lease_name: DnsSubdomain = "gpucluster-make-before-break"
    lease_duration: PositiveDuration = "15s"
    renew_deadline: PositiveDuration = "10s"
    #: How often the leader renews and the others try to take the Lease (at least a second).
    retry_period: PollInterval = "2s"
    #: The namespaces whose GPU Deployments it may move; filled from ``gpucluster:inferenceNamespaces``.
    inference_namespaces: list[DnsLabel] = Field(default_factory=lambda: ["inference"], min_length=1)

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

    @field_validator("inference_namespaces")
    @classmethod
    def _unique_namespaces(cls, v: list[str]) -> list[str]:
        dupes = sorted({n for n in v if v.count(n) > 1})
        if dupes:
            raise ValueError(f"namespaces listed twice: {', '.join(dupes[:10])}")
        return v

    # Rules between fields: checked as each field validates, so they report with every other problem, and again
    # on the whole model, for the fields left at their defaults.
    @field_validator("node_grace")
    @classmethod
    def _grace_below_hold(cls, v: str, info: ValidationInfo) -> str:
        problem = _shorter("nodeGrace", v, info.data.get("max_hold"))
        if problem:
            raise ValueError(problem)
        return v

    @field_validator("renew_deadline")
    @classmethod
    def _renew_below_lease(cls, v: str, info: ValidationInfo) -> str:
        problem = _shorter("renewDeadline", v, info.data.get("lease_duration"))
        if problem:
            raise ValueError(problem)
        return v

    @field_validator("retry_period")
    @classmethod
    def _retry_below_renew(cls, v: str, info: ValidationInfo) -> str:
        problem = _shorter("retryPeriod", v, info.data.get("renew_deadline"))
        if problem:
            raise ValueError(problem)
        return v

    def rule_problems(self) -> Iterator[Problem]:
        checks: list[tuple[str, object, str | None]] = [
            ("nodeGrace", self.node_grace, _shorter("nodeGrace", self.node_grace, self.max_hold)),
            ("renewDeadline", self.renew_deadline, _shorter("renewDeadline", self.renew_deadline, self.lease_duration)),
            ("retryPeriod", self.retry_period, _shorter("retryPeriod", self.retry_period, self.renew_deadline)),
        ]
        for loc, value, problem in checks:
            if problem:
                yield Problem((loc,), problem, value)

    # Seconds, for the daemon.
    @property
    def max_hold_seconds(self) -> float:
        return parse_duration(self.max_hold)

    @property
    def node_grace_seconds(self) -> float:
        return parse_duration(self.node_grace)

    @property
    def interval_seconds(self) -> float:
        return parse_duration(self.interval)

    @property
    def lease_duration_seconds(self) -> float:
        return parse_duration(self.lease_duration)

    @property
    def renew_deadline_seconds(self) -> float:
        return parse_duration(self.renew_deadline)

    @property
    def retry_period_seconds(self) -> float:
        return parse_duration(self.retry_period)


def controller_document(settings: MakeBeforeBreakSettings, virtual_node_name: str | None, burst_taint_key: str) -> str:
    """The daemon's settings file (JSON, the daemon's own keys), as the component renders it into the ConfigMap.

    The stack section says how the controller behaves; the stack fills where it acts: the inference namespaces,
    the virtual node (None: no burst, nothing can be rented) and the burst taint.
    """
    document = {
        "enabled": True,
        "namespace": settings.namespace,
        "admissionCheckName": CHECK_NAME,
        "inferenceNamespaces": list(settings.inference_namespaces),
        "virtualNodeName": virtual_node_name,
        "burstTaintKey": burst_taint_key,
        "reservationKey": settings.reservation_key,
        "maxHold": settings.max_hold,
        "nodeGrace": settings.node_grace,
        "maxReturning": settings.return_batch,
        "deletionCost": settings.deletion_cost,
        "interval": settings.interval,
        "leaseName": settings.lease_name,
        "leaseDuration": settings.lease_duration,
        "renewDeadline": settings.renew_deadline,
        "retryPeriod": settings.retry_period,
    }
    return json.dumps(document, indent=2)


def parse_settings(data: Any, source: str = "settings") -> MakeBeforeBreakSettings:
    """Validate an already-parsed section; SettingsError lists every problem with its key path."""
    if not isinstance(data, Mapping):
        raise SettingsError(
            [ConfigIssue("(top level)", None, f"expected a JSON object of settings, got {type(data).__name__}")],
            source,
        )
    try:
        return MakeBeforeBreakSettings.model_validate(dict(data))
    except ValidationError as exc:
        raise SettingsError(issues_from_validation_error(exc), source) from None


__all__ = [
    "CHECK_NAME",
    "CONTROLLER_NAME",
    "DEFAULT_RESERVATION_KEY",
    "MakeBeforeBreakSettings",
    "controller_document",
    "parse_settings",
]
