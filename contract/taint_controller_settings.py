"""Settings of the taint controller: one pydantic model for the stack config and the daemon's settings file.

The stack check (``components/config/``) validates the operator-facing fields; the component then fills the
runtime-only ones (``nodeName``, ``taintKey``) from the virtual node and the stack's burst taint key and renders
the whole model as JSON into the daemon's ConfigMap, which the daemon reads with :func:`load_settings`. Pure
pydantic (no Pulumi): the daemon imports it.

Example (camelCase, as in the stack YAML or the JSON file)::

    enabled: true
    namespace: gpucluster-burst
    image: ghcr.io/example/gpucluster-daemons:0.1.0  # unset: from gpucluster:images
    prometheusUrl: http://prometheus-operated.monitoring.svc:9090
    highMark: 4          # add the burst taint at or above this many free in-cluster GPUs ...
    holdAdd: 10m         # ... held this long
    lowMark: 1           # remove it below this many free GPUs with inference Pending ...
    holdRemove: 2m       # ... held this long
    interval: 30s
    leaseName: gpucluster-taint-controller
    replicas: 2
    inferenceNamespaces: [inference]
    gpuTypes: [H100, L40S]   # decide per GPU type (a node's from nvidia.com/gpu.product); empty: one pool

The taint's effect is fixed to ``NoSchedule``: a NoExecute burst taint would evict every external inference
replica at once, so the model refuses any other value.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, ClassVar, Literal

from pydantic import Field, ValidationInfo, field_validator

from contract.burst_settings import GpuTypeName
from contract.constants import (
    BURST_TAINT_EFFECT,
    BURST_TAINT_VALUE,
    DEFAULT_BURST_TAINT_KEY,
    PROMETHEUS_URL,
)
from contract.images_settings import DEFAULT_DAEMONS_IMAGE
from contract.issues import SettingsError, shown
from contract.model import (
    ControllerReplicas,
    ControllerSettings,
    DnsLabel,
    DnsSubdomain,
    HttpUrl,
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
from contract.taint_controller_queries import (
    DEFAULT_BURST_QUERY,
    DEFAULT_GPU_TYPE_NODE_LABEL,
    DEFAULT_HEADROOM_BY_TYPE_QUERY,
    DEFAULT_HEADROOM_QUERY,
    DEFAULT_PENDING_BY_TYPE_QUERY,
    DEFAULT_PENDING_QUERY,
    DEFAULT_RESERVED_QUERY,
    FRESH_PLACEHOLDER,
    KSM_ANNOTATIONS_ALLOWLIST,
    KSM_OPT_IN_METRICS,
    MAX_GPU_TYPES,
    NAMESPACES_PLACEHOLDER,
    NODE_GPU_TYPES_PLACEHOLDER,
    NODE_PLACEHOLDER,
    POD_GPU_TYPES_PLACEHOLDER,
    gpu_type_of,
    gpu_types_in_cluster,
    node_gpu_types_expr,
    pod_gpu_types_expr,
)

#: Its key within the stack's ``gpucluster:burst`` section, and its spec's ``stack_key``.
SECTION_KEY = "taintController"
STACK_KEY = f"burst.{SECTION_KEY}"
DEFAULT_TAINT_KEY = DEFAULT_BURST_TAINT_KEY
DEFAULT_NODE_NAME = "gpu-burst"
TAINT_EFFECT = BURST_TAINT_EFFECT
TAINT_VALUE = BURST_TAINT_VALUE
#: Most free GPUs a mark may name: no cluster we manage comes near it.
MAX_MARK = 100_000

#: The shortest freshWithin: below it, one late scrape would make the whole cluster unknown (nothing ever changes).
MIN_FRESH_SECONDS = 10.0

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


class TaintControllerSettings(ControllerSettings):
    """Everything the taint controller needs; see the module docstring for the meaning of the marks."""

    #: The component renders JSON; the daemon reads nothing else.
    settings_format: ClassVar[Literal["json", "yaml"] | None] = "json"

    enabled: bool = True
    #: Where the Deployment and its Lease live.
    namespace: DnsLabel = "gpucluster-burst"
    #: Unset in a stack: filled from ``gpucluster:images`` (contract/images_settings.py).
    image: Image = DEFAULT_DAEMONS_IMAGE
    prometheus_url: HttpUrl = PROMETHEUS_URL
    headroom_query: str = DEFAULT_HEADROOM_QUERY
    pending_query: str = DEFAULT_PENDING_QUERY
    #: Nodes reserved for a waiting gang: while any is, Pending inference removes the taint without holdRemove.
    reserved_query: str = DEFAULT_RESERVED_QUERY
    #: Headroom and pending inference by GPU type (label ``gpu_type``): asked only when ``gpuTypes`` is set.
    headroom_by_type_query: str = DEFAULT_HEADROOM_BY_TYPE_QUERY
    pending_by_type_query: str = DEFAULT_PENDING_BY_TYPE_QUERY
    #: Inference pods on the virtual node, in all and by GPU type: where burst replicas would come home to.
    burst_query: str = DEFAULT_BURST_QUERY
    #: The GPU types decided apart (the names inference services and burst providers use, such as H100, L40S).
    #: Empty: the whole cluster is one pool, as with one GPU type. Each listed once in any case: the queries match
    #: node label values in any case, so H100 and h100 would be one type.
    gpu_types: Annotated[list[GpuTypeName], each_once("GPU types", key=str.lower, how=" (in any case)")] = Field(
        default_factory=list, max_length=MAX_GPU_TYPES
    )
    #: The node label whose value names a node's GPU type (``NVIDIA-L40S`` is L40S; see ``gpu_type_of``).
    gpu_type_node_label: QualifiedName = DEFAULT_GPU_TYPE_NODE_LABEL
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
    replicas: ControllerReplicas = 2
    inference_namespaces: Annotated[list[DnsLabel], each_once("namespaces")] = Field(
        default_factory=lambda: ["inference"], min_length=1
    )

    # Runtime-only: the component fills these from the virtual node and the stack's burstTaintKey.
    node_name: DnsSubdomain = DEFAULT_NODE_NAME
    taint_key: TaintKey = DEFAULT_TAINT_KEY
    #: Fixed: any other effect is refused (see the module docstring).
    taint_effect: str = TAINT_EFFECT
    #: How long one PromQL query may take; unset: a third of the interval, at most 10 s.
    query_timeout: PositiveDuration | None = None
    #: A kube-state-metrics series whose newest sample is older than this reads as gone (``$FRESH_SECONDS`` in the
    #: default queries): after a Prometheus restart, series that vanished while it was down would otherwise answer
    #: their last value for its whole lookback window (5m). At least three of its scrape intervals; at least 10s.
    fresh_within: PositiveDuration = "2m"

    @field_validator("taint_effect")
    @classmethod
    def _taint_effect(cls, v: str) -> str:
        if v != TAINT_EFFECT:
            raise ValueError(
                f"effect {shown(v)} is refused: the burst taint is always NoSchedule (NoExecute would evict every "
                "external inference replica at once; the descheduler moves them back a few at a time)"
            )
        return v

    @field_validator(
        "headroom_query",
        "pending_query",
        "reserved_query",
        "headroom_by_type_query",
        "pending_by_type_query",
        "burst_query",
    )
    @classmethod
    def _query(cls, v: str) -> str:
        if not v:
            raise ValueError("the PromQL query is empty")
        return v

    @field_validator("fresh_within")
    @classmethod
    def _fresh_within(cls, v: str) -> str:
        if parse_duration(v) < MIN_FRESH_SECONDS:
            raise ValueError(
                f"{shown(v)} is shorter than {MIN_FRESH_SECONDS:g}s: one late kube-state-metrics scrape would make "
                "every query unknown, and the controller would never change the taint"
            )
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

    _query_within_interval = shorter_rule(_SHORTER, "queryTimeout")

    def rule_problems(self) -> Iterator[Problem]:
        low = _low_below_high(self.low_mark, self.high_mark)
        if low:
            yield Problem(("lowMark",), low, self.low_mark)
        yield from super().rule_problems()
        yield from self.shorter_problems(_SHORTER)

    # Seconds, for the daemon.
    hold_add_seconds: ClassVar[Seconds] = Seconds("hold_add")
    hold_remove_seconds: ClassVar[Seconds] = Seconds("hold_remove")
    flap_window_seconds: ClassVar[Seconds] = Seconds("flap_window")
    warning_event_interval_seconds: ClassVar[Seconds] = Seconds("warning_event_interval")
    fresh_within_seconds: ClassVar[Seconds] = Seconds("fresh_within")

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
        """``query`` with its placeholders substituted, the ones starting like ``$NODE`` before it."""
        return (
            query.replace(NAMESPACES_PLACEHOLDER, self.namespaces_regex())
            .replace(NODE_GPU_TYPES_PLACEHOLDER, node_gpu_types_expr(self.gpu_types, self.gpu_type_node_label))
            .replace(POD_GPU_TYPES_PLACEHOLDER, pod_gpu_types_expr(self.gpu_types, self.gpu_type_node_label))
            .replace(NODE_PLACEHOLDER, self.node_name)
            .replace(FRESH_PLACEHOLDER, f"{self.fresh_within_seconds:g}")
        )

    def ksm_flags(self) -> list[str]:
        """The kube-state-metrics flags the queries by GPU type need (none without ``gpuTypes``): the node label
        as ``kube_node_labels``, the GPU type annotation as ``kube_pod_annotations``, and the pods' nodeSelectors
        (``kube_pod_nodeselectors``, which ksm exports only when asked)."""
        if not self.gpu_types:
            return []
        return [
            f"--metric-labels-allowlist=nodes=[{self.gpu_type_node_label}]",
            f"--metric-annotations-allowlist={KSM_ANNOTATIONS_ALLOWLIST}",
            f"--metric-opt-in-list={KSM_OPT_IN_METRICS}",
        ]


#: Validate already-parsed settings, or read a settings file: SettingsError lists every problem with its key path.
parse_settings = TaintControllerSettings.parse
load_settings = TaintControllerSettings.load


__all__ = [
    "DEFAULT_BURST_QUERY",
    "DEFAULT_HEADROOM_BY_TYPE_QUERY",
    "DEFAULT_HEADROOM_QUERY",
    "DEFAULT_PENDING_BY_TYPE_QUERY",
    "DEFAULT_PENDING_QUERY",
    "TAINT_EFFECT",
    "TAINT_VALUE",
    "SettingsError",
    "TaintControllerSettings",
    "gpu_type_of",
    "gpu_types_in_cluster",
    "load_settings",
    "parse_duration",
    "parse_settings",
]
