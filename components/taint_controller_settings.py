"""Settings of the taint controller: one pydantic model for the stack config and the daemon's settings file.

The stack check (``components/config/``) validates the operator-facing fields; the component then fills the
runtime-only ones (``nodeName``, ``taintKey``) from the virtual node and the stack's burst taint key and renders
the whole model as JSON into the daemon's ConfigMap, which the daemon reads with :func:`load_settings`. Pure
pydantic (no Pulumi): the daemon imports it.

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

from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, ValidationError, ValidationInfo, field_validator

from components.constants import BURST_TAINT_EFFECT, BURST_TAINT_VALUE, DEFAULT_BURST_TAINT_KEY
from components.documents import read_settings_file
from components.issues import ConfigIssue, SettingsError, issues_from_validation_error, shown
from components.model import (
    DnsLabel,
    DnsSubdomain,
    HttpUrl,
    Image,
    LeaseTimings,
    PollInterval,
    PositiveDuration,
    Problem,
    TaintKey,
    parse_duration,
    shorter,
)

DEFAULT_TAINT_KEY = DEFAULT_BURST_TAINT_KEY
DEFAULT_NODE_NAME = "gpu-burst"
TAINT_EFFECT = BURST_TAINT_EFFECT
TAINT_VALUE = BURST_TAINT_VALUE
#: Most free GPUs a mark may name: no cluster we manage comes near it.
MAX_MARK = 100_000

#: Placeholders substituted into the queries at runtime.
NODE_PLACEHOLDER = "$NODE"
NAMESPACES_PLACEHOLDER = "$INFERENCE_NAMESPACES"

#: The NoSchedule taint (and label) of a node the make-before-break controller reserved for a waiting gang
#: (``components.make_before_break_settings.DEFAULT_RESERVATION_KEY``).
RESERVATION_TAINT_KEY = "gpucluster.io/reservation"

#: Free in-cluster GPUs: allocatable ``nvidia.com/gpu`` of schedulable real nodes minus the GPU requests of
#: Running or bound-Pending pods on those nodes. Nodes carrying the reservation taint are left out of both sides:
#: their GPUs are promised to a gang, not room for inference to come home to (every schedulable node reserved is
#: zero headroom). Only the requests side falls back to zero when empty (no GPU pod anywhere); with
#: kube-state-metrics down the allocatable side is empty and so is the whole result, which the controller treats
#: as "unknown" and changes nothing.
_SCHEDULABLE_GPUS = (
    '(kube_node_status_allocatable{resource="nvidia_com_gpu",node!="$NODE"}'
    ' and on(node) (kube_node_spec_unschedulable{node!="$NODE"} == 0))'
)
DEFAULT_HEADROOM_QUERY = (
    "(sum("
    f"{_SCHEDULABLE_GPUS}"
    f' unless on(node) kube_node_spec_taint{{key="{RESERVATION_TAINT_KEY}"}}'
    ")"
    # Every schedulable node reserved is no headroom (zero), not unknown.
    f" or (sum({_SCHEDULABLE_GPUS}) * 0))"
    " - ("
    "sum("
    '((kube_pod_container_resource_requests{resource="nvidia_com_gpu",node!="$NODE",node!=""}'
    " * on(namespace,pod) group_left()"
    ' (max by(namespace,pod) (kube_pod_status_phase{phase=~"Pending|Running"}) == 1))'
    " and on(node) (kube_node_spec_unschedulable == 0))"
    f' unless on(node) kube_node_spec_taint{{key="{RESERVATION_TAINT_KEY}"}}'
    ") or vector(0))"
)

#: Nodes reserved for a waiting gang (the make-before-break check's taint); zero while kube-state-metrics
#: answers and none is reserved, empty (unknown: the hold applies) while it does not.
DEFAULT_RESERVED_QUERY = f'count(kube_node_spec_taint{{key="{RESERVATION_TAINT_KEY}"}}) or (count(kube_node_info) * 0)'

#: Pending inference pods not yet bound to a node. An empty count means zero pods, but only while
#: kube-state-metrics answers at all (``count(kube_node_info) * 0``); with it down the result stays empty.
DEFAULT_PENDING_QUERY = (
    "count("
    '(max by(namespace,pod) (kube_pod_status_phase{phase="Pending",namespace=~"$INFERENCE_NAMESPACES"}) == 1)'
    ' unless on(namespace,pod) kube_pod_info{node!=""}'
    ") or (count(kube_node_info) * 0)"
)


#: What must be shorter than what, and why.
_SHORTER = {
    "queryTimeout": ("interval", "a cycle would outlast the next one"),
}


def _low_below_high(low: int, high: int | None) -> str | None:
    if high is not None and low >= high:
        return (
            f"lowMark ({low}) must be below highMark ({high}): the gap between them is the hysteresis that keeps the "
            "taint from flapping"
        )
    return None


def _shorter(name: str, value: str | None, limit: str | None) -> str | None:
    return shorter(_SHORTER, name, value, limit)


class TaintControllerSettings(LeaseTimings):
    """Everything the taint controller needs; see the module docstring for the meaning of the marks."""

    enabled: bool = True
    #: Where the Deployment and its Lease live.
    namespace: DnsLabel = "gpucluster-burst"
    image: Image = "ghcr.io/example/gpucluster-daemons:0.1.0"
    prometheus_url: HttpUrl = "http://prometheus-operated.monitoring.svc:9090"
    headroom_query: str = DEFAULT_HEADROOM_QUERY
    pending_query: str = DEFAULT_PENDING_QUERY
    #: Nodes reserved for a waiting gang: while any is, Pending inference removes the taint without holdRemove.
    reserved_query: str = DEFAULT_RESERVED_QUERY
    #: At or above this many free in-cluster GPUs (held for holdAdd) the burst taint goes on.
    high_mark: Annotated[int, Field(ge=0, le=MAX_MARK)] = 4
    #: Below this many free in-cluster GPUs, with inference Pending (held for holdRemove), it comes off.
    low_mark: Annotated[int, Field(ge=0, le=MAX_MARK)] = 1
    hold_add: PositiveDuration = "10m"
    hold_remove: PositiveDuration = "2m"
    #: How often Prometheus is asked (at least a second).
    interval: PollInterval = "30s"
    #: A transition that reverses the previous one within this window counts in flaps_total.
    flap_window: PositiveDuration = "30m"
    #: Warning Events about failed queries go out at most once per this interval.
    warning_event_interval: PositiveDuration = "5m"
    lease_name: DnsSubdomain = "gpucluster-taint-controller"
    lease_duration: PositiveDuration = "15s"
    renew_deadline: PositiveDuration = "10s"
    #: How often the leader renews and the others try to take the Lease (at least a second).
    retry_period: PollInterval = "2s"
    replicas: Annotated[int, Field(ge=1, le=3)] = 2
    inference_namespaces: list[DnsLabel] = Field(default_factory=lambda: ["inference"], min_length=1)

    # Runtime-only: the component fills these from the virtual node and the stack's burstTaintKey.
    node_name: DnsSubdomain = DEFAULT_NODE_NAME
    taint_key: TaintKey = DEFAULT_TAINT_KEY
    #: Fixed: any other effect is refused (see the module docstring).
    taint_effect: str = TAINT_EFFECT
    #: How long one PromQL query may take; unset: a third of the interval, at most 10 s.
    query_timeout: PositiveDuration | None = None

    @field_validator("taint_effect")
    @classmethod
    def _taint_effect(cls, v: str) -> str:
        if v != TAINT_EFFECT:
            raise ValueError(
                f"effect {shown(v)} is refused: the burst taint is always NoSchedule (NoExecute would evict every "
                "external inference replica at once; the descheduler moves them back a few at a time)"
            )
        return v

    @field_validator("headroom_query", "pending_query", "reserved_query")
    @classmethod
    def _query(cls, v: str) -> str:
        if not v:
            raise ValueError("the PromQL query is empty")
        return v

    @field_validator("inference_namespaces")
    @classmethod
    def _unique_namespaces(cls, v: list[str]) -> list[str]:
        dupes = sorted(n for n, count in Counter(v).items() if count > 1)
        if dupes:
            raise ValueError(f"namespaces listed twice: {', '.join(dupes[:10])}")
        return v

    # Rules between fields: checked as each field validates, so they report with every other problem, and again
    # on the whole model, for the fields left at their defaults (highMark: 1 with lowMark's default 1).
    @field_validator("low_mark")
    @classmethod
    def _low_below_high(cls, v: int, info: ValidationInfo) -> int:
        problem = _low_below_high(v, info.data.get("high_mark"))
        if problem:
            raise ValueError(problem)
        return v

    @field_validator("query_timeout")
    @classmethod
    def _query_within_interval(cls, v: str | None, info: ValidationInfo) -> str | None:
        problem = _shorter("queryTimeout", v, info.data.get("interval"))
        if problem:
            raise ValueError(problem)
        return v

    def rule_problems(self) -> Iterator[Problem]:
        low = _low_below_high(self.low_mark, self.high_mark)
        if low:
            yield Problem(("lowMark",), low, self.low_mark)
        yield from self.lease_problems()
        query = _shorter("queryTimeout", self.query_timeout, self.interval)
        if query:
            yield Problem(("queryTimeout",), query, self.query_timeout)

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


def parse_settings(data: Any, source: str = "settings") -> TaintControllerSettings:
    """Validate already-parsed settings; SettingsError lists every problem with its key path."""
    if not isinstance(data, Mapping):
        raise SettingsError(
            [ConfigIssue("(top level)", None, f"expected a JSON object of settings, got {type(data).__name__}")],
            source,
        )
    try:
        return TaintControllerSettings.model_validate(dict(data))
    except ValidationError as exc:
        raise SettingsError(issues_from_validation_error(exc), source) from None


def load_settings(path: str | Path) -> TaintControllerSettings:
    """Read the JSON settings file the component renders; SettingsError on any problem, hostile files included
    (components/documents.py)."""
    return parse_settings(read_settings_file(path, "json"), str(Path(path)))


__all__ = [
    "DEFAULT_HEADROOM_QUERY",
    "DEFAULT_PENDING_QUERY",
    "TAINT_EFFECT",
    "TAINT_VALUE",
    "SettingsError",
    "TaintControllerSettings",
    "load_settings",
    "parse_duration",
    "parse_settings",
]
