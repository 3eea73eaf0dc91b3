"""Settings of the make-before-break controller: the daemon's settings file (JSON or YAML, camelCase keys).

Example::

    namespace: gpucluster-system        # where its Lease lives
    admissionCheckName: make-before-break
    inferenceNamespaces: [inference]
    virtualNodeName: gpu-burst          # null: no burst, nothing can be rented
    maxHold: 10m                        # then the check goes Ready anyway (fallback to preemption)
    nodeGrace: 60s
    maxReturning: 2
    interval: 10s

Pure pydantic on :mod:`components.model` (no Pulumi, no Kubernetes client): the daemon image loads it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, ValidationError, ValidationInfo, field_validator
from pydantic.alias_generators import to_camel

from components.constants import DEFAULT_BURST_TAINT_KEY, GPU_RESOURCE
from components.documents import DocumentError, read_document
from components.issues import ConfigIssue, SettingsError, issues_from_validation_error
from components.model import (
    ConfigModel,
    DnsLabel,
    DnsSubdomain,
    PollInterval,
    PositiveDuration,
    Problem,
    QualifiedName,
    TaintKey,
    parse_duration,
)
from daemons.make_before_break.decide import Policy
from daemons.make_before_break.model import RESERVATION_KEY

#: The AdmissionCheck's spec.controllerName this controller answers for.
CONTROLLER_NAME = "gpucluster.io/make-before-break"
#: Field manager of every write (server-side apply and patches alike).
FIELD_MANAGER = "gpucluster-make-before-break"
#: Lowest and highest pod-deletion-cost the controller may write (the annotation is an int32).
MIN_DELETION_COST, MAX_DELETION_COST = -(2**31), -1

_SHORTER = {
    "renewDeadline": ("leaseDuration", "the leader must give up the lease before another replica may take it"),
    "retryPeriod": ("renewDeadline", "the leader must get a retry in before its deadline"),
    "nodeGrace": ("maxHold", "a node that blinks must not outlast the hold itself"),
}


_LIMIT_FIELD = {"renewDeadline": "lease_duration", "retryPeriod": "renew_deadline", "nodeGrace": "max_hold"}


class MakeBeforeBreakSettings(ConfigModel):
    """Everything the controller needs; durations are Go-style strings (``10m``, ``60s``)."""

    enabled: bool = True
    #: Where the controller and its Lease live.
    namespace: DnsLabel = "gpucluster-system"
    #: The AdmissionCheck object (cluster-scoped) whose Active condition this controller sets.
    admission_check_name: DnsSubdomain = "make-before-break"
    #: Namespaces of the inference Deployments that may be moved.
    inference_namespaces: list[DnsLabel] = Field(default_factory=lambda: ["inference"], min_length=1, max_length=64)
    #: The virtual node standing for rented GPUs; None: the stack runs no burst.
    virtual_node_name: DnsSubdomain | None = "gpu-burst"
    burst_taint_key: TaintKey = DEFAULT_BURST_TAINT_KEY
    #: Taint keys that mark a node quarantined (no room is planned on it).
    quarantine_taint_keys: list[TaintKey] = Field(default_factory=lambda: ["gpucluster.io/quarantine"], max_length=16)
    gpu_resource: QualifiedName = GPU_RESOURCE
    reservation_key: TaintKey = RESERVATION_KEY
    max_hold: PositiveDuration = "10m"
    node_grace: PositiveDuration = "60s"
    max_returning: Annotated[int, Field(ge=1, le=100)] = 2
    deletion_cost: Annotated[int, Field(ge=MIN_DELETION_COST, le=MAX_DELETION_COST)] = -1000
    #: Time between two cycles (at least a second).
    interval: PollInterval = "10s"
    #: How long one API call may take.
    request_timeout: PositiveDuration = "10s"
    lease_name: DnsSubdomain = "gpucluster-make-before-break"
    lease_duration: PositiveDuration = "15s"
    renew_deadline: PositiveDuration = "10s"
    retry_period: PollInterval = "2s"

    @field_validator("inference_namespaces", "quarantine_taint_keys")
    @classmethod
    def _unique(cls, v: list[str]) -> list[str]:
        dupes = sorted(n for n, count in Counter(v).items() if count > 1)
        if dupes:
            raise ValueError(f"listed twice: {', '.join(dupes[:10])}")
        return v

    # The same rules as each field validates, so they report with every other problem (rule_problems runs only
    # once every field is valid, and again covers the fields left at their defaults).
    @field_validator("renew_deadline", "retry_period", "node_grace")
    @classmethod
    def _shorter_than(cls, v: str, info: ValidationInfo) -> str:
        name = to_camel(str(info.field_name))
        limit = info.data.get(_LIMIT_FIELD[name])
        if isinstance(limit, str) and parse_duration(v) >= parse_duration(limit):
            other, why = _SHORTER[name]
            raise ValueError(f"{name} ({v}) must be shorter than {other} ({limit}): {why}")
        return v

    def rule_problems(self) -> Iterator[Problem]:
        pairs = (
            ("renewDeadline", self.renew_deadline, self.lease_duration),
            ("retryPeriod", self.retry_period, self.renew_deadline),
            ("nodeGrace", self.node_grace, self.max_hold),
        )
        for name, value, limit in pairs:
            if parse_duration(value) >= parse_duration(limit):
                other, why = _SHORTER[name]
                yield Problem((name,), f"{name} ({value}) must be shorter than {other} ({limit}): {why}", value)

    def policy(self) -> Policy:
        return Policy(
            max_hold_s=parse_duration(self.max_hold),
            node_grace_s=parse_duration(self.node_grace),
            max_returning=self.max_returning,
            deletion_cost=self.deletion_cost,
            reservation_key=self.reservation_key,
        )

    @property
    def interval_seconds(self) -> float:
        return parse_duration(self.interval)

    @property
    def request_timeout_seconds(self) -> float:
        return parse_duration(self.request_timeout)

    @property
    def lease_duration_seconds(self) -> float:
        return parse_duration(self.lease_duration)

    @property
    def renew_deadline_seconds(self) -> float:
        return parse_duration(self.renew_deadline)

    @property
    def retry_period_seconds(self) -> float:
        return parse_duration(self.retry_period)


def parse_settings(data: Any, source: str = "settings") -> MakeBeforeBreakSettings:
    """Validate already-parsed settings; SettingsError lists every problem with its key path."""
    if not isinstance(data, Mapping):
        raise SettingsError(
            [ConfigIssue("(top level)", None, f"expected an object of settings, got {type(data).__name__}")], source
        )
    try:
        return MakeBeforeBreakSettings.model_validate(dict(data))
    except ValidationError as exc:
        raise SettingsError(issues_from_validation_error(exc), source) from None


def load_settings(path: str | Path) -> MakeBeforeBreakSettings:
    """Read a JSON (``.json``) or YAML (anything else) settings file; SettingsError on any problem."""
    p = Path(path)
    try:
        data = read_document(p, "json" if p.suffix == ".json" else "yaml")
    except DocumentError as exc:
        raise SettingsError([ConfigIssue(str(p), None, exc.reason)], str(p)) from None
    return parse_settings(data, str(p))
