"""Settings of the quarantine controller: one pydantic model for the stack section ``gpucluster:quarantine`` and the
daemon's settings file.

The stack check (``components/config/``) validates the operator-facing fields; the stack then fills the GPU flavors
(:data:`FILLED`) and the component renders the whole model as JSON into the daemon's ConfigMap
(:meth:`QuarantineSettings.to_json`), which the daemon reads with :func:`load_settings`. The component-only fields
(``image``, ``replicas``) travel in the file too; the daemon ignores them. Pure pydantic (no Pulumi): the daemon
imports it.

The controller (daemons/quarantine/) puts the NoExecute quarantine taint on a GPU node whose alerts fire (the
shipped rules that carry ``gpucluster_signal: gpu-quarantine``): training leaves it, inference tolerates it and keeps
serving there. A circuit breaker caps how many of a flavor's nodes it may quarantine within ``breakerWindow``.

Example (camelCase, as in the stack YAML or the JSON file)::

    enabled: true
    maxShare: 0.1        # at most a tenth of a flavor's nodes (at least one) ...
    breakerWindow: 1h    # ... quarantined within an hour; past it, alert and do nothing
    releaseGrace: 30m    # a node released (quarantine-released-at) is not quarantined again this soon
    ledgerRetention: 720h
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Annotated, ClassVar

from pydantic import AfterValidator, Field, field_validator

from contract.constants import PROMETHEUS_URL, QUARANTINE_TAINT_KEY, RELEASED_AT_ANNOTATION
from contract.images_settings import DEFAULT_DAEMONS_IMAGE
from contract.issues import SettingsError
from contract.model import (
    ConfigModel,
    ControllerReplicas,
    ControllerSettings,
    DnsLabel,
    DnsSubdomain,
    HttpUrl,
    Image,
    PollInterval,
    PositiveDuration,
    Problem,
    Seconds,
    check_duration_within,
    check_labels,
    each_once,
    shorter_rule,
)

#: Field manager of the ledger's server-side apply and of the node patches' Events.
#: Its section of the stack (``gpucluster:quarantine``), and its spec's ``stack_key``.
STACK_KEY = "quarantine"
FIELD_MANAGER = "gpucluster-quarantine"
#: The ledger ConfigMap in the controller's namespace: one entry per quarantined (or recently released or deleted)
#: node; what goes to the hardware provider.
LEDGER_NAME = "gpucluster-quarantine"
#: The label the alert rules that mean "quarantine this node" carry (``components.telemetry.alerts`` defines the same
#: pair; the daemon cannot import that package, which builds Pulumi resources).
SIGNAL_LABEL = "gpucluster_signal"
SIGNAL_VALUE = "gpu-quarantine"
_FIRING = f'ALERTS{{alertstate="firing",{SIGNAL_LABEL}="{SIGNAL_VALUE}"}}'
#: An ALERTS sample older than this is no signal. Prometheus stopped while an alert fired writes no stale marker, so
#: after a restart the last sample stays visible for the 5m lookback even once the alert has resolved; the rules are
#: evaluated every 1m at most (Prometheus' default; 30s with the operator), so a live alert is never this old.
SIGNAL_MAX_AGE_SECONDS = 150
DEFAULT_SIGNAL_QUERY = f"{_FIRING} and (time() - timestamp({_FIRING}) < {SIGNAL_MAX_AGE_SECONDS})"
#: The shipped alerts that quarantine, and the reason word each becomes (the taint's value, a label value). An alert
#: not listed here that carries the signal label becomes its name in kebab case.
REASONS: dict[str, str] = {
    "GpuTemperatureHigh": "gpu-temperature",
    "GpuXidError": "xid",
    "NvlinkErrorsIncreasing": "nvlink-errors",
    "InfinibandLinkErrorsIncreasing": "infiniband-errors",
    "TrainingNodeRepeatOffender": "stall-suspect",
}
#: Longest ledger retention: a year of entries is what a hardware replacement dispute may reach back to.
MAX_RETENTION_SECONDS = 366 * 24 * 3600.0

#: The fields the stack fills (camelCase key: where from); a stack section that sets one is refused.
FILLED = {
    "flavors": "gpucluster:flavors (each flavor's name and nodeLabels)",
}

#: What must be shorter than what, and why.
_SHORTER = {
    "requestTimeout": ("interval", "a cycle would outlast the next one"),
    "releaseGrace": ("ledgerRetention", "the ledger would forget a release the controller still honours"),
    "breakerWindow": ("ledgerRetention", "a deleted node would leave the ledger while it still counts for the breaker"),
}

_KEBAB = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def reason_of(alert: str) -> str:
    """The reason word of an alert: :data:`REASONS`, else the name in kebab case (a valid label value, at most 63)."""
    known = REASONS.get(alert)
    if known is not None:
        return known
    word = re.sub(r"[^a-z0-9-]+", "-", _KEBAB.sub("-", alert).lower()).strip("-")[:63].strip("-")
    return word or "alert"


RetentionDuration = Annotated[
    str, AfterValidator(lambda v: check_duration_within(v, MAX_RETENTION_SECONDS, "a year (8784h)"))
]


class QuarantineFlavor(ConfigModel):
    """A GPU flavor as the controller sees it: which nodes are its own (the breaker counts per flavor)."""

    name: DnsLabel
    node_labels: Annotated[dict[str, str], Field(min_length=1)]

    @field_validator("node_labels")
    @classmethod
    def _labels(cls, v: dict[str, str]) -> dict[str, str]:
        return check_labels(v)


class QuarantineSettings(ControllerSettings):
    """Everything the quarantine controller needs; see the module docstring."""

    enabled: bool = True
    #: Where the Deployment, its Lease and the ledger live.
    namespace: DnsLabel = "gpucluster-capacity"
    #: Unset in a stack: filled from ``gpucluster:images`` (contract/images_settings.py).
    image: Image = DEFAULT_DAEMONS_IMAGE
    replicas: ControllerReplicas = 2
    lease_name: DnsSubdomain = "gpucluster-quarantine"
    prometheus_url: HttpUrl = PROMETHEUS_URL
    #: The firing alerts that quarantine a node; every sample must carry ``node`` and ``alertname``.
    signal_query: str = DEFAULT_SIGNAL_QUERY
    #: How often Prometheus and the nodes are read (at least a second).
    interval: PollInterval = "15s"
    #: Most of a flavor's nodes (a share, at least one node) quarantined within breakerWindow.
    max_share: Annotated[float, Field(gt=0, le=1)] = 0.1
    breaker_window: PositiveDuration = "1h"
    #: Most of a flavor's nodes (a share, at least one node) quarantined at once, however long ago: the breaker
    #: caps the total as well as the rate.
    max_quarantined_share: Annotated[float, Field(gt=0, le=1)] = 0.25
    #: A node released less than this ago (its quarantine-released-at annotation) is not quarantined again.
    release_grace: PositiveDuration = "30m"
    #: How long the ledger keeps a released or deleted node's entry (and at least the breaker window).
    ledger_retention: RetentionDuration = "720h"
    #: Warning Events about the same problem go out at most once per this interval.
    warning_event_interval: PositiveDuration = "5m"
    #: How long one Prometheus query or API call may take.
    request_timeout: PositiveDuration = "5s"
    lease_duration: PositiveDuration = "15s"
    renew_deadline: PositiveDuration = "10s"
    #: How often the leader renews and the others try to take the Lease (at least a second).
    retry_period: PollInterval = "2s"
    #: Decide and log, write nothing (as ``--dry-run``).
    dry_run: bool = False

    # Filled by the stack (FILLED).
    #: The GPU flavors; a node of none of them is never quarantined.
    flavors: Annotated[list[QuarantineFlavor], each_once("flavors", key=lambda f: f.name)] = Field(
        default_factory=list, max_length=64
    )

    @field_validator("signal_query")
    @classmethod
    def _query(cls, v: str) -> str:
        if not v:
            raise ValueError("the PromQL query is empty")
        return v

    # Rules between fields: checked as each field validates, so they report with every other problem, and again
    # on the whole model, for the fields left at their defaults.
    _timeout_within_interval = shorter_rule(_SHORTER, "requestTimeout")

    def rule_problems(self) -> Iterator[Problem]:
        yield from self.shorter_problems(_SHORTER)
        yield from super().rule_problems()

    # Seconds, for the daemon.
    breaker_window_seconds: ClassVar[Seconds] = Seconds("breaker_window")
    release_grace_seconds: ClassVar[Seconds] = Seconds("release_grace")
    ledger_retention_seconds: ClassVar[Seconds] = Seconds("ledger_retention")
    warning_event_interval_seconds: ClassVar[Seconds] = Seconds("warning_event_interval")
    request_timeout_seconds: ClassVar[Seconds] = Seconds("request_timeout")


#: Validate already-parsed settings, or read a settings file: SettingsError lists every problem with its key path.
parse_settings = QuarantineSettings.parse
load_settings = QuarantineSettings.load


__all__ = [
    "DEFAULT_SIGNAL_QUERY",
    "FIELD_MANAGER",
    "FILLED",
    "LEDGER_NAME",
    "QUARANTINE_TAINT_KEY",
    "REASONS",
    "RELEASED_AT_ANNOTATION",
    "SIGNAL_MAX_AGE_SECONDS",
    "STACK_KEY",
    "QuarantineFlavor",
    "QuarantineSettings",
    "SettingsError",
    "load_settings",
    "parse_settings",
    "reason_of",
]
