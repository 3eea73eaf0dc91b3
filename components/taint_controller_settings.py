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

import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, ValidationError, ValidationInfo, field_validator

from components.burst_settings import GpuTypeName
from components.constants import (
    BURST_TAINT_EFFECT,
    BURST_TAINT_VALUE,
    DEFAULT_BURST_TAINT_KEY,
    GPU_TYPE_ANNOTATION,
    QUARANTINE_TAINT_KEY,
)
from components.documents import read_settings_file
from components.images_settings import DEFAULT_DAEMONS_IMAGE
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
    QualifiedName,
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

#: Placeholders substituted into the queries at runtime (:meth:`TaintControllerSettings.render_query`).
NODE_PLACEHOLDER = "$NODE"
NAMESPACES_PLACEHOLDER = "$INFERENCE_NAMESPACES"
#: One series ``{node, gpu_type} 1`` per node whose GPU type label names one of ``gpuTypes`` (see
#: :func:`node_gpu_types_expr`).
NODE_GPU_TYPES_PLACEHOLDER = "$NODE_GPU_TYPES"
#: One series ``{namespace, pod, gpu_type} 1`` per pod asking for one of ``gpuTypes`` (see
#: :func:`pod_gpu_types_expr`).
POD_GPU_TYPES_PLACEHOLDER = "$POD_GPU_TYPES"
#: What both expand to with no ``gpuTypes``: an empty instant vector, so the rows by type are empty.
NO_GPU_TYPES = "(vector(0) == 1)"

#: The label of the series by type; the whole cluster's row has none (the empty string in the daemon).
GPU_TYPE_LABEL = "gpu_type"
#: The node label that names a node's GPU (set by NVIDIA's GPU feature discovery, and what the flavors select
#: on); a pod's nodeSelector on the same label pins it to that GPU (the burst provider reads it too).
DEFAULT_GPU_TYPE_NODE_LABEL = "nvidia.com/gpu.product"
#: Most GPU types the queries tell apart (each type adds a term per other type to the expansions).
MAX_GPU_TYPES = 16

#: What kube-state-metrics must export for the queries by GPU type (its ``--metric-labels-allowlist``,
#: ``--metric-annotations-allowlist`` and ``--metric-opt-in-list``), with the default node label; see
#: :meth:`TaintControllerSettings.ksm_flags` for the configured one.
KSM_LABELS_ALLOWLIST = f"nodes=[{DEFAULT_GPU_TYPE_NODE_LABEL}]"
KSM_ANNOTATIONS_ALLOWLIST = f"pods=[{GPU_TYPE_ANNOTATION}]"
KSM_OPT_IN_METRICS = "kube_pod_nodeselectors"

#: The NoSchedule taint (and label) of a node the make-before-break controller reserved for a waiting gang
#: (``components.make_before_break_settings.DEFAULT_RESERVATION_KEY``).
RESERVATION_TAINT_KEY = "gpucluster.io/reservation"

_SCHEDULABLE_GPUS = (
    '(kube_node_status_allocatable{resource="nvidia_com_gpu",node!="$NODE"}'
    ' and on(node) (kube_node_spec_unschedulable{node!="$NODE"} == 0))'
)
#: Nodes whose GPUs are no headroom, on both sides: reserved for a waiting gang (promised, not room for inference
#: to come home to) and quarantined (a hot or erroring GPU waiting for its replacement: inference may still run
#: there, but the controller does not bring burst replicas home to it).
_LEAVE_OUT_RESERVED = f' unless on(node) kube_node_spec_taint{{key="{RESERVATION_TAINT_KEY}"}}'
_LEAVE_OUT_QUARANTINED = f' unless on(node) kube_node_spec_taint{{key="{QUARANTINE_TAINT_KEY}"}}'
_LEAVE_OUT = _LEAVE_OUT_RESERVED + _LEAVE_OUT_QUARANTINED
_LIVE_GPU_REQUESTS = (
    '((kube_pod_container_resource_requests{resource="nvidia_com_gpu",node!="$NODE",node!=""}'
    " * on(namespace,pod) group_left()"
    ' (max by(namespace,pod) (kube_pod_status_phase{phase=~"Pending|Running"}) == 1))'
    " and on(node) (kube_node_spec_unschedulable == 0))"
)

#: Free in-cluster GPUs of the whole cluster: allocatable ``nvidia.com/gpu`` of schedulable real nodes minus the
#: GPU requests of Running or bound-Pending pods on those nodes. Nodes carrying the reservation or the quarantine
#: taint are left out of both sides (every schedulable node left out is zero headroom). Only the requests side
#: falls back to zero when empty (no GPU pod anywhere); with kube-state-metrics down the allocatable side is empty
#: and so is the whole result, which the controller treats as "unknown" and changes nothing.
DEFAULT_HEADROOM_QUERY = (
    "(sum("
    f"{_SCHEDULABLE_GPUS}"
    f"{_LEAVE_OUT}"
    ")"
    # Every schedulable node left out is no headroom (zero), not unknown.
    f" or (sum({_SCHEDULABLE_GPUS}) * 0))"
    " - ("
    "sum("
    f"{_LIVE_GPU_REQUESTS}"
    f"{_LEAVE_OUT}"
    ") or vector(0))"
)


def _typed(expr: str) -> str:
    """``expr`` (series with a ``node`` label) given the ``gpu_type`` of its node; nodes of no type drop out."""
    return f"({expr} * on(node) group_left(gpu_type) {NODE_GPU_TYPES_PLACEHOLDER})"


#: The same, one series per GPU type (label ``gpu_type``), nodes of no configured type left out. A type whose
#: nodes are all left out is zero; a type with no node at all has no series (the daemon reads it as zero). Asked
#: only with ``gpuTypes`` set, beside the whole cluster's query, which keeps telling "unknown" apart.
DEFAULT_HEADROOM_BY_TYPE_QUERY = (
    f"(sum by(gpu_type) ({_typed(f'({_SCHEDULABLE_GPUS}{_LEAVE_OUT})')})"
    f" or (sum by(gpu_type) ({_typed(_SCHEDULABLE_GPUS)}) * 0))"
    " - on(gpu_type) ("
    f"sum by(gpu_type) ({_typed(f'({_LIVE_GPU_REQUESTS}{_LEAVE_OUT})')})"
    f" or (sum by(gpu_type) ({_typed(_SCHEDULABLE_GPUS)}) * 0))"
)

#: Nodes reserved for a waiting gang (the make-before-break check's taint); zero while kube-state-metrics
#: answers and none is reserved, empty (unknown: the hold applies) while it does not.
DEFAULT_RESERVED_QUERY = f'count(kube_node_spec_taint{{key="{RESERVATION_TAINT_KEY}"}}) or (count(kube_node_info) * 0)'

_PENDING_PODS = (
    '(max by(namespace,pod) (kube_pod_status_phase{phase="Pending",namespace=~"$INFERENCE_NAMESPACES"}) == 1)'
    ' unless on(namespace,pod) kube_pod_info{node!=""}'
)
#: Pending inference pods not yet bound to a node. An empty count means zero pods, but only while
#: kube-state-metrics answers at all (``count(kube_node_info) * 0``); with it down the result stays empty.
DEFAULT_PENDING_QUERY = f"count({_PENDING_PODS}) or (count(kube_node_info) * 0)"
#: The same, one series per GPU type the pods ask for; pods asking for no configured type are only in the total.
#: A type with nothing pending has no series (zero). Asked only with ``gpuTypes`` set.
DEFAULT_PENDING_BY_TYPE_QUERY = (
    f"count by(gpu_type) (({_PENDING_PODS}) * on(namespace,pod) group_left(gpu_type) {POD_GPU_TYPES_PLACEHOLDER})"
)

_BURST_PODS = (
    '(max by(namespace,pod) (kube_pod_info{node="$NODE",namespace=~"$INFERENCE_NAMESPACES"})'
    ' and on(namespace,pod) (max by(namespace,pod) (kube_pod_status_phase{phase=~"Pending|Running"}) == 1))'
)
#: Inference pods on the virtual node (Pending at a provider or Running there): the replicas that would come home
#: once the taint is on. One series per GPU type they ask for, and one without ``gpu_type``: all of them (zero
#: while kube-state-metrics answers and none is out). Only the add side reads it.
DEFAULT_BURST_QUERY = (
    f"count by(gpu_type) ({_BURST_PODS} * on(namespace,pod) group_left(gpu_type) {POD_GPU_TYPES_PLACEHOLDER})"
    f" or count({_BURST_PODS}) or (count(kube_node_info) * 0)"
)


_INVALID_LABEL_CHARS = re.compile(r"[^a-zA-Z0-9_]")
_LOWER_THEN_UPPER = re.compile(r"([a-z0-9])([A-Z])")


def ksm_label_name(prefix: str, key: str) -> str:
    """The Prometheus label kube-state-metrics gives a Kubernetes label, annotation or nodeSelector key in its
    ``*_labels``/``*_annotations``/``kube_pod_nodeselectors`` series: characters outside ``[a-zA-Z0-9_]`` become
    ``_``, then snake case (``nvidia.com/gpu.product`` -> ``label_nvidia_com_gpu_product``)."""
    snake = _LOWER_THEN_UPPER.sub(r"\1_\2", _INVALID_LABEL_CHARS.sub("_", key)).lower()
    return f"{prefix}_{snake}"


def _contains_regex(types: Sequence[str]) -> str:
    """A PromQL regex (fully anchored by Prometheus) matching a value that contains any of ``types``, any case."""
    alternatives = "|".join(t.replace(".", "[.]") for t in types)
    return f"(?i).*({alternatives}).*"


def _typed_by_value(metric: str, label: str, types: Sequence[str], join: str) -> list[str]:
    """For each type, the series of ``metric`` whose ``label`` names it, given ``gpu_type``: the value is the type
    itself, or else contains exactly one of the types (any case). The same rule as the burst provider's mapping of a
    ``nvidia.com/gpu.product`` nodeSelector (``NVIDIA-L40S`` is L40S); a value containing two types is neither."""
    out = []
    for t in types:
        exact = f'{metric}{{{label}="{t}"}}'
        contains = f'{metric}{{{label}=~"{_contains_regex([t])}"}}'
        others = [o for o in types if o != t]
        if others:
            contains = f'({contains} unless on({join}) {metric}{{{label}=~"{_contains_regex(others)}"}})'
        out.append(f'label_replace({exact} or on({join}) {contains}, "gpu_type", "{t}", "", "")')
    return out


def node_gpu_types_expr(types: Sequence[str], node_label: str = DEFAULT_GPU_TYPE_NODE_LABEL) -> str:
    """What ``$NODE_GPU_TYPES`` expands to: ``{node, gpu_type} 1`` for each node whose ``node_label`` (through
    kube-state-metrics' ``kube_node_labels``) names one of ``types``; nodes of no type have no series."""
    if not types:
        return NO_GPU_TYPES
    parts = _typed_by_value("kube_node_labels", ksm_label_name("label", node_label), types, "node")
    return f"max by(node, gpu_type) ({' or '.join(parts)})"


def pod_gpu_types_expr(types: Sequence[str], node_label: str = DEFAULT_GPU_TYPE_NODE_LABEL) -> str:
    """What ``$POD_GPU_TYPES`` expands to: ``{namespace, pod, gpu_type} 1`` for each pod asking for one of
    ``types``: by its ``burst.gpucluster.io/gpu-type`` annotation (``kube_pod_annotations``), else by a nodeSelector
    on ``node_label`` (``kube_pod_nodeselectors``), in the order the burst provider reads them. A pod asking for
    no configured type has no series."""
    if not types:
        return NO_GPU_TYPES
    annotation = ksm_label_name("annotation", GPU_TYPE_ANNOTATION)
    by_annotation = " or ".join(
        f'label_replace(kube_pod_annotations{{{annotation}="{t}"}}, "gpu_type", "{t}", "", "")' for t in types
    )
    by_selector = " or ".join(
        _typed_by_value("kube_pod_nodeselectors", ksm_label_name("nodeselector", node_label), types, "namespace,pod")
    )
    return (
        f"max by(namespace, pod, gpu_type) (({by_annotation}) or on(namespace,pod) "
        f'(({by_selector}) unless on(namespace,pod) kube_pod_annotations{{{annotation}!=""}}))'
    )


def gpu_type_of(value: str, types: Sequence[str]) -> str | None:
    """The type a node label value (or a nodeSelector on it) names, by the rule of the queries: the value itself,
    else the one type it contains (any case); None when it names none or two."""
    if value in types:
        return value
    contained = [t for t in types if t.lower() in value.lower()]
    return contained[0] if len(contained) == 1 else None


def gpu_types_in_cluster(node_label_values: Iterable[str], offered: Iterable[str]) -> list[str]:
    """The ``gpuTypes`` a stack gets when it does not set them: the offered burst types its flavors' node label
    values name (sorted), when they name two or more; otherwise none, and the one pool decides as it always did."""
    known = sorted(set(offered))
    found = {t for v in node_label_values if (t := gpu_type_of(v, known)) is not None}
    return sorted(found) if len(found) > 1 else []


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
    #: Unset in a stack: filled from ``gpucluster:images`` (components/images_settings.py).
    image: Image = DEFAULT_DAEMONS_IMAGE
    prometheus_url: HttpUrl = "http://prometheus-operated.monitoring.svc:9090"
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
    #: Empty: the whole cluster is one pool, as with one GPU type.
    gpu_types: list[GpuTypeName] = Field(default_factory=list, max_length=MAX_GPU_TYPES)
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

    @field_validator("inference_namespaces")
    @classmethod
    def _unique_namespaces(cls, v: list[str]) -> list[str]:
        dupes = sorted(n for n, count in Counter(v).items() if count > 1)
        if dupes:
            raise ValueError(f"namespaces listed twice: {', '.join(dupes[:10])}")
        return v

    @field_validator("gpu_types")
    @classmethod
    def _unique_gpu_types(cls, v: list[str]) -> list[str]:
        # Case-insensitive: the queries match node label values in any case, so H100 and h100 would be one type.
        dupes = sorted(n for n, count in Counter(t.lower() for t in v).items() if count > 1)
        if dupes:
            raise ValueError(f"GPU types listed twice (in any case): {', '.join(dupes[:10])}")
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
        """``query`` with its placeholders substituted, the ones starting like ``$NODE`` before it."""
        return (
            query.replace(NAMESPACES_PLACEHOLDER, self.namespaces_regex())
            .replace(NODE_GPU_TYPES_PLACEHOLDER, node_gpu_types_expr(self.gpu_types, self.gpu_type_node_label))
            .replace(POD_GPU_TYPES_PLACEHOLDER, pod_gpu_types_expr(self.gpu_types, self.gpu_type_node_label))
            .replace(NODE_PLACEHOLDER, self.node_name)
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
