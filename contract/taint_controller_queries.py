"""The taint controller's default PromQL: headroom, pending and burst inference, reserved nodes, by GPU type.

Strings and the expansions of their placeholders, nothing else: the settings model (``taint_controller_settings``)
takes its defaults from here, the daemon renders them (``TaintControllerSettings.render_query``), and
``tests/daemons/taint_controller/test_queries_e2e.py`` runs them in a real Prometheus over real kube-state-metrics.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from contract.constants import GPU_TYPE_ANNOTATION, QUARANTINE_TAINT_KEY, RESERVATION_KEY

#: Placeholders substituted into the queries at runtime (:meth:`TaintControllerSettings.render_query`).
NODE_PLACEHOLDER = "$NODE"
#: ``freshWithin`` in seconds: a series whose newest sample is older reads as gone (see :func:`fresh`).
FRESH_PLACEHOLDER = "$FRESH_SECONDS"
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


def fresh(selector: str) -> str:
    """``selector``'s series whose newest sample is at most ``freshWithin`` old.

    A series that vanishes while Prometheus is down gets no staleness marker when it comes back (the marker comes
    from the scrape cache, which a restart empties): Prometheus keeps answering its last value for the whole
    lookback window (5 minutes by default). Without this, a reservation released or a pod scheduled during an
    outage would still count for five minutes after it, and the flip would act on it.
    """
    return f"({selector} and (time() - timestamp({selector}) <= {FRESH_PLACEHOLDER}))"


_ALLOCATABLE = fresh('kube_node_status_allocatable{resource="nvidia_com_gpu",node!="$NODE"}')
_UNSCHEDULABLE_REAL = fresh('kube_node_spec_unschedulable{node!="$NODE"}')
_UNSCHEDULABLE = fresh("kube_node_spec_unschedulable")
_RESERVED_TAINT = fresh(f'kube_node_spec_taint{{key="{RESERVATION_KEY}"}}')
_QUARANTINE_TAINT = fresh(f'kube_node_spec_taint{{key="{QUARANTINE_TAINT_KEY}"}}')
_GPU_REQUESTS = fresh('kube_pod_container_resource_requests{resource="nvidia_com_gpu",node!="$NODE",node!=""}')
_LIVE_PHASE = fresh('kube_pod_status_phase{phase=~"Pending|Running"}')
_PENDING_INFERENCE_PHASE = fresh('kube_pod_status_phase{phase="Pending",namespace=~"$INFERENCE_NAMESPACES"}')
_BOUND = fresh('kube_pod_info{node!=""}')
_ON_VIRTUAL_NODE = fresh('kube_pod_info{node="$NODE",namespace=~"$INFERENCE_NAMESPACES"}')
#: Zero while kube-state-metrics answers (its node series are fresh), empty while it does not.
_KSM_ANSWERS = f"(count({fresh('kube_node_info')}) * 0)"

_SCHEDULABLE_GPUS = f"({_ALLOCATABLE} and on(node) ({_UNSCHEDULABLE_REAL} == 0))"
#: Nodes whose GPUs are no headroom, on both sides: reserved for a waiting gang (promised, not room for inference
#: to come home to) and quarantined (a hot or erroring GPU waiting for its replacement: inference may still run
#: there, but the controller does not bring burst replicas home to it).
_LEAVE_OUT_RESERVED = f" unless on(node) {_RESERVED_TAINT}"
_LEAVE_OUT_QUARANTINED = f" unless on(node) {_QUARANTINE_TAINT}"
_LEAVE_OUT = _LEAVE_OUT_RESERVED + _LEAVE_OUT_QUARANTINED
_LIVE_GPU_REQUESTS = (
    f"(({_GPU_REQUESTS} * on(namespace,pod) group_left() (max by(namespace,pod) ({_LIVE_PHASE}) == 1))"
    f" and on(node) ({_UNSCHEDULABLE} == 0))"
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
_KSM_ANSWERS = f"(count({fresh('kube_node_info')}) * 0)"
DEFAULT_RESERVED_QUERY = f"count({_RESERVED_TAINT}) or {_KSM_ANSWERS}"

_PENDING_PODS = f"(max by(namespace,pod) ({_PENDING_INFERENCE_PHASE}) == 1) unless on(namespace,pod) {_BOUND}"
#: Pending inference pods not yet bound to a node. An empty count means zero pods, but only while
#: kube-state-metrics answers at all (``count(kube_node_info) * 0``); with it down the result stays empty.
DEFAULT_PENDING_QUERY = f"count({_PENDING_PODS}) or {_KSM_ANSWERS}"
#: The same, one series per GPU type the pods ask for; pods asking for no configured type are only in the total.
#: A type with nothing pending has no series (zero). Asked only with ``gpuTypes`` set.
DEFAULT_PENDING_BY_TYPE_QUERY = (
    f"count by(gpu_type) (({_PENDING_PODS}) * on(namespace,pod) group_left(gpu_type) {POD_GPU_TYPES_PLACEHOLDER})"
)

_BURST_PODS = (
    f"(max by(namespace,pod) ({_ON_VIRTUAL_NODE}) and on(namespace,pod) (max by(namespace,pod) ({_LIVE_PHASE}) == 1))"
)
#: Inference pods on the virtual node (Pending at a provider or Running there): the replicas that would come home
#: once the taint is on. One series per GPU type they ask for, and one without ``gpu_type``: all of them (zero
#: while kube-state-metrics answers and none is out). Only the add side reads it.
DEFAULT_BURST_QUERY = (
    f"count by(gpu_type) ({_BURST_PODS} * on(namespace,pod) group_left(gpu_type) {POD_GPU_TYPES_PLACEHOLDER})"
    f" or count({_BURST_PODS}) or {_KSM_ANSWERS}"
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
