"""Settings of the taint controller: one pydantic model for the stack config and the daemon's settings file.

The stack config (``components/config.py``) validates the operator-facing fields; the component then fills the
runtime-only ones (``nodeName``, ``taintKey``) from the virtual node and the stack's burst taint key and renders
the whole model as JSON into the daemon's ConfigMap. The daemon image ships only ``daemons/``, so this module
defines its own small base instead of importing ``components.model``.

Example (camelCase, as in the stack YAML or the JSON file)::

    enabled: true
    namespace: gpucluster-burst
    image: ghcr.io/example/gpucluster-daemons:0.1.0
    prometheusUrl: http://prometheus-operated.monitoring.svc:9090
    highMark: 4          # add the burst taint at or above this many free in-cluster GPUs ...
    holdAdd: 10m         # ... held this long
    lowMark: 1           # remove it below this many free GPUs with inference Pending ...
    holdRemove: 2m       # ... held this long
    interval: 30s
    leaseName: gpucluster-taint-controller
    replicas: 2
    inferenceNamespaces: [inference]

The taint's effect is fixed to ``NoSchedule``: a NoExecute burst taint would evict every external inference
replica at once, so the model refuses any other value.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from daemons.settings_rules import (
    SettingsModel,
    check_dns_label,
    check_duration,
    check_http_url,
    check_image,
    check_positive_duration,
    parse_duration,
)

DEFAULT_TAINT_KEY = "gpucluster.io/in-cluster-capacity"
DEFAULT_NODE_NAME = "gpu-burst"
TAINT_EFFECT = "NoSchedule"
TAINT_VALUE = "true"

#: Placeholders substituted into the queries at runtime.
NODE_PLACEHOLDER = "$NODE"
NAMESPACES_PLACEHOLDER = "$INFERENCE_NAMESPACES"

#: Free in-cluster GPUs: allocatable ``nvidia.com/gpu`` of schedulable real nodes minus the GPU requests of
#: Running or bound-Pending pods on those nodes. Only the requests side falls back to zero when empty (no GPU
#: pod anywhere); with kube-state-metrics down the allocatable side is empty and so is the whole result, which
#: the controller treats as "unknown" and changes nothing.
DEFAULT_HEADROOM_QUERY = (
    'sum(kube_node_status_allocatable{resource="nvidia_com_gpu",node!="$NODE"}'
    ' and on(node) (kube_node_spec_unschedulable{node!="$NODE"} == 0))'
    " - ("
    "sum("
    '(kube_pod_container_resource_requests{resource="nvidia_com_gpu",node!="$NODE",node!=""}'
    " * on(namespace,pod) group_left()"
    ' (max by(namespace,pod) (kube_pod_status_phase{phase=~"Pending|Running"}) == 1))'
    " and on(node) (kube_node_spec_unschedulable == 0)"
    ") or vector(0))"
)

#: Pending inference pods not yet bound to a node. An empty count means zero pods, but only while
#: kube-state-metrics answers at all (``count(kube_node_info) * 0``); with it down the result stays empty.
DEFAULT_PENDING_QUERY = (
    "count("
    '(max by(namespace,pod) (kube_pod_status_phase{phase="Pending",namespace=~"$INFERENCE_NAMESPACES"}) == 1)'
    ' unless on(namespace,pod) kube_pod_info{node!=""}'
    ") or (count(kube_node_info) * 0)"
)

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def _check_dns_subdomain(value: str) -> str:
    if len(value) > 253 or not _DNS_SUBDOMAIN.match(value):
        raise ValueError(f"{value!r} is not a DNS subdomain name (lower-case letters, digits, '-' and '.')")
    return value


Duration = Annotated[str, AfterValidator(check_duration)]
PositiveDuration = Annotated[str, AfterValidator(check_positive_duration)]
DnsLabel = Annotated[str, AfterValidator(check_dns_label)]


class TaintControllerSettings(SettingsModel):
    """Everything the taint controller needs; see the module docstring for the meaning of the marks."""

    enabled: bool = True
    #: Where the Deployment and its Lease live.
    namespace: DnsLabel = "gpucluster-burst"
    image: Annotated[str, AfterValidator(check_image)] = "ghcr.io/example/gpucluster-daemons:0.1.0"
    prometheus_url: Annotated[str, AfterValidator(check_http_url)] = "http://prometheus-operated.monitoring.svc:9090"
    headroom_query: str = DEFAULT_HEADROOM_QUERY
    pending_query: str = DEFAULT_PENDING_QUERY
    #: At or above this many free in-cluster GPUs (held for holdAdd) the burst taint goes on.
    high_mark: Annotated[int, Field(ge=0)] = 4
    #: Below this many free in-cluster GPUs, with inference Pending (held for holdRemove), it comes off.
    low_mark: Annotated[int, Field(ge=0)] = 1
    hold_add: PositiveDuration = "10m"
    hold_remove: PositiveDuration = "2m"
    interval: PositiveDuration = "30s"
    #: A transition that reverses the previous one within this window counts in flaps_total.
    flap_window: PositiveDuration = "30m"
    #: Warning Events about failed queries go out at most once per this interval.
    warning_event_interval: PositiveDuration = "5m"
    lease_name: Annotated[str, AfterValidator(_check_dns_subdomain)] = "gpucluster-taint-controller"
    lease_duration: PositiveDuration = "15s"
    renew_deadline: PositiveDuration = "10s"
    retry_period: PositiveDuration = "2s"
    replicas: Annotated[int, Field(ge=1, le=3)] = 2
    inference_namespaces: list[DnsLabel] = Field(default_factory=lambda: ["inference"], min_length=1)

    # Runtime-only: the component fills these from the virtual node and the stack's burstTaintKey.
    node_name: Annotated[str, AfterValidator(_check_dns_subdomain)] = DEFAULT_NODE_NAME
    taint_key: str = DEFAULT_TAINT_KEY
    #: Fixed: any other effect is refused (see the module docstring).
    taint_effect: str = TAINT_EFFECT
    query_timeout: PositiveDuration | None = None

    @field_validator("taint_key")
    @classmethod
    def _taint_key(cls, v: str) -> str:
        if len(v) > 316 or not _QUALIFIED_NAME.match(v):
            raise ValueError(f"taint key {v!r} is not a valid Kubernetes qualified name (prefix/name)")
        return v

    @field_validator("taint_effect")
    @classmethod
    def _taint_effect(cls, v: str) -> str:
        if v != TAINT_EFFECT:
            raise ValueError(
                f"effect {v!r} is refused: the burst taint is always NoSchedule (NoExecute would evict every "
                "external inference replica at once; the descheduler moves them back a few at a time)"
            )
        return v

    @field_validator("headroom_query", "pending_query")
    @classmethod
    def _query(cls, v: str) -> str:
        if not v:
            raise ValueError("the PromQL query is empty")
        return v

    @field_validator("inference_namespaces")
    @classmethod
    def _unique_namespaces(cls, v: list[str]) -> list[str]:
        dupes = sorted({n for n in v if v.count(n) > 1})
        if dupes:
            raise ValueError(f"namespaces listed twice: {', '.join(dupes)}")
        return v

    @field_validator("low_mark")
    @classmethod
    def _low_below_high(cls, v: int, info: ValidationInfo) -> int:
        high = info.data.get("high_mark")
        if high is not None and v >= high:
            raise ValueError(
                f"lowMark ({v}) must be below highMark ({high}): the gap between them is the hysteresis that "
                "keeps the taint from flapping"
            )
        return v

    @field_validator("renew_deadline")
    @classmethod
    def _renew_below_lease(cls, v: str, info: ValidationInfo) -> str:
        lease = info.data.get("lease_duration")
        if lease is not None and not parse_duration(v) < parse_duration(lease):
            raise ValueError(f"renewDeadline ({v}) must be shorter than leaseDuration ({lease})")
        return v

    @field_validator("retry_period")
    @classmethod
    def _retry_below_renew(cls, v: str, info: ValidationInfo) -> str:
        renew = info.data.get("renew_deadline")
        if renew is not None and not parse_duration(v) < parse_duration(renew):
            raise ValueError(f"retryPeriod ({v}) must be shorter than renewDeadline ({renew})")
        return v

    # Seconds, for the daemon.
    @property
    def hold_add_seconds(self) -> float:
        return parse_duration(self.hold_add)

    @property
    def hold_remove_seconds(self) -> float:
        return parse_duration(self.hold_remove)

    @property
    def interval_seconds(self) -> float:
        return parse_duration(self.interval)

    @property
    def flap_window_seconds(self) -> float:
        return parse_duration(self.flap_window)

    @property
    def warning_event_interval_seconds(self) -> float:
        return parse_duration(self.warning_event_interval)

    @property
    def lease_duration_seconds(self) -> float:
        return parse_duration(self.lease_duration)

    @property
    def renew_deadline_seconds(self) -> float:
        return parse_duration(self.renew_deadline)

    @property
    def retry_period_seconds(self) -> float:
        return parse_duration(self.retry_period)

    @property
    def query_timeout_seconds(self) -> float:
        """The query timeout: as set, else a third of the interval capped at 10 s."""
        if self.query_timeout is not None:
            return parse_duration(self.query_timeout)
        return min(10.0, self.interval_seconds / 3)

    def namespaces_regex(self) -> str:
        """The inference namespaces as a PromQL regex alternation (names are DNS labels: nothing to escape)."""
        return "|".join(self.inference_namespaces)

    def render_query(self, query: str) -> str:
        """``query`` with ``$INFERENCE_NAMESPACES`` and ``$NODE`` substituted (longer placeholder first)."""
        return query.replace(NAMESPACES_PLACEHOLDER, self.namespaces_regex()).replace(NODE_PLACEHOLDER, self.node_name)

    def to_json(self) -> str:
        """The daemon's settings file, as the component renders it into the ConfigMap."""
        return self.model_dump_json(by_alias=True, indent=2)


class SettingsError(ValueError):
    """Bad settings: one message naming every problem by key path."""


def format_validation_error(exc: ValidationError, prefix: str = "") -> str:
    """``key.path: message`` per problem, camelCase paths as the user wrote them."""
    lines = []
    for err in exc.errors():
        path = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = err["msg"].removeprefix("Value error, ")
        lines.append(f"{prefix}{path}: {msg}")
    return "\n".join(lines)


def parse_settings(data: Any, source: str = "settings") -> TaintControllerSettings:
    """Validate already-parsed settings; SettingsError lists every problem with its key path."""
    if not isinstance(data, dict):
        raise SettingsError(f"{source}: expected a JSON object of settings, got {type(data).__name__}")
    try:
        return TaintControllerSettings.model_validate(data)
    except ValidationError as exc:
        raise SettingsError(f"{source}: invalid settings\n{format_validation_error(exc, '  ')}") from None


def load_settings(path: str | Path) -> TaintControllerSettings:
    """Read the JSON settings file the component renders; SettingsError on any problem."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise SettingsError(f"{p}: cannot read the settings file ({exc.strerror or exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SettingsError(f"{p}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    return parse_settings(data, str(p))
