"""GPU inference can burst and comes home: its Deployments tolerate the virtual node but never the burst taint,
and a PodDisruptionBudget bounds how many replicas the descheduler may move back at once.

A GPU Deployment in an inference namespace that does not tolerate ``virtual-kubelet.io/provider`` goes Pending when
training takes the GPUs (an outage); one that tolerates the burst taint stays on rented GPUs forever (the
descheduler only evicts pods that do NOT tolerate it). Without a budget the return could take every replica at once.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from fnmatch import fnmatch
from typing import Any

from pulumi_policy import (
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

from contract.constants import (
    DEFAULT_BURST_TAINT_KEY,
    GPU_RESOURCE,
    VIRTUAL_NODE_TAINT_KEY,
    VIRTUAL_NODE_TAINT_VALUE,
)
from policies.common import MANDATORY, Report, config_value, containers, dig, object_ref, pod_spec, schema

DEPLOYMENT = "kubernetes:apps/v1:Deployment"
PDB = "kubernetes:policy/v1:PodDisruptionBudget"
DEFAULT_INFERENCE_NAMESPACES = ["inference", "inference-*"]
DEFAULT_GPU_RESOURCE = GPU_RESOURCE

_CONFIG: dict[str, dict[str, Any]] = {
    "inferenceNamespaces": {
        "type": "array",
        "items": {"type": "string"},
        "default": DEFAULT_INFERENCE_NAMESPACES,
    },
    "burstTaintKey": {"type": "string", "default": DEFAULT_BURST_TAINT_KEY},
    "gpuResource": {"type": "string", "default": DEFAULT_GPU_RESOURCE},
}


def _quantity_positive(value: Any) -> bool:
    try:
        return float(str(value)) > 0
    except ValueError:
        return bool(value)


def requests_gpus(spec: Mapping[str, Any], resource: str = DEFAULT_GPU_RESOURCE) -> bool:
    """Any container asks for the GPU resource (in limits, or in requests)."""
    for _, c in containers(spec):
        for part in ("limits", "requests"):
            if _quantity_positive(dig(c, "resources", part, resource) or 0):
                return True
    return False


def _covers_no_schedule(toleration: Mapping[str, Any]) -> bool:
    return (toleration.get("effect") or "") in ("", "NoSchedule")


def tolerates(toleration: Mapping[str, Any], key: str, value: str | None = None) -> bool:
    """Whether one toleration lets a pod onto a NoSchedule taint ``key[=value]`` (an empty key with Exists
    tolerates every taint)."""
    if not _covers_no_schedule(toleration):
        return False
    operator = toleration.get("operator") or "Equal"
    tkey = toleration.get("key") or ""
    if operator == "Exists":
        return tkey in ("", key)
    return tkey == key and (value is None or (toleration.get("value") or "") == value)


def burstable_problems(spec: Mapping[str, Any], burst_key: str) -> list[str]:
    """What keeps a GPU inference pod spec from bursting out or coming back (empty when nothing does)."""
    tolerations = [t for t in spec.get("tolerations") or [] if isinstance(t, Mapping)]
    problems = []
    if not any(tolerates(t, VIRTUAL_NODE_TAINT_KEY, VIRTUAL_NODE_TAINT_VALUE) for t in tolerations):
        problems.append(
            f"does not tolerate {VIRTUAL_NODE_TAINT_KEY}={VIRTUAL_NODE_TAINT_VALUE}:NoSchedule: its replicas "
            "cannot burst to the virtual node and go Pending when training takes the GPUs"
        )
    for t in tolerations:
        if tolerates(t, burst_key):
            problems.append(
                f"toleration {dict(t)} tolerates the burst taint {burst_key}: the descheduler could never bring "
                "its replicas home from rented GPUs"
            )
    return problems


def _is_inference_namespace(namespace: str, patterns: list[str]) -> bool:
    return any(fnmatch(namespace, p) for p in patterns)


def _gpu_inference_deployment(
    resource_type: str, props: Mapping[str, Any], config: Mapping[str, Any]
) -> Mapping[str, Any] | None:
    """The pod spec of a GPU Deployment in an inference namespace, else None."""
    if resource_type != DEPLOYMENT:
        return None
    namespace = str(dig(props, "metadata", "namespace") or "default")
    patterns = list(config_value(config, "inferenceNamespaces", DEFAULT_INFERENCE_NAMESPACES))
    spec = pod_spec(resource_type, props)
    resource = str(config_value(config, "gpuResource", DEFAULT_GPU_RESOURCE))
    if spec is None or not _is_inference_namespace(namespace, patterns) or not requests_gpus(spec, resource):
        return None
    return spec


def _validate_burstable(args: ResourceValidationArgs, report: Report) -> None:
    config = args.get_config()
    spec = _gpu_inference_deployment(args.resource_type, args.props, config)
    if spec is None:
        args.not_applicable("not a GPU Deployment in an inference namespace")
        return
    burst_key = str(config_value(config, "burstTaintKey", DEFAULT_BURST_TAINT_KEY))
    for problem in burstable_problems(spec, burst_key):
        report(f"Deployment {object_ref(args.props, args.name)} {problem}")


inference_gpu_deployments_burstable = ResourceValidationPolicy(
    name="inference-gpu-deployments-burstable",
    description="GPU Deployments in inference namespaces tolerate the virtual node and never the burst taint.",
    enforcement_level=MANDATORY,
    validate=_validate_burstable,
    config_schema=schema(**_CONFIG),
)


# --- PodDisruptionBudgets -----------------------------------------------------------------------------------------


def _expression_matches(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, operator = str(expr.get("key") or ""), expr.get("operator")
    values = list(expr.get("values") or [])
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    return False


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A LabelSelector against a pod's labels. policy/v1: an empty selector selects every pod of the namespace;
    a missing one selects none."""
    if selector is None:
        return False
    match_labels = selector.get("matchLabels") or {}
    if any(labels.get(k) != v for k, v in match_labels.items()):
        return False
    return all(_expression_matches(e, labels) for e in selector.get("matchExpressions") or [])


def _pdbs(args: StackValidationArgs) -> Iterator[tuple[str, Mapping[str, Any] | None]]:
    for r in args.resources:
        if r.resource_type == PDB:
            yield str(dig(r.props, "metadata", "namespace") or "default"), dig(r.props, "spec", "selector")


def _validate_pdb(args: StackValidationArgs, report: Report) -> None:
    config = args.get_config()
    budgets = list(_pdbs(args))
    checked = 0
    for r in args.resources:
        if _gpu_inference_deployment(r.resource_type, r.props, config) is None:
            continue
        checked += 1
        namespace = str(dig(r.props, "metadata", "namespace") or "default")
        labels = dig(r.props, "spec", "template", "metadata", "labels") or {}
        if not any(ns == namespace and selector_matches(sel, labels) for ns, sel in budgets):
            report(
                f"Deployment {object_ref(r.props, r.name)} has no PodDisruptionBudget in {namespace} selecting its "
                f"pods ({dict(labels)}): the return from the virtual node could evict every replica at once"
            )
    if not checked:
        args.not_applicable("no GPU Deployment in an inference namespace")


inference_gpu_deployments_have_pdb = StackValidationPolicy(
    name="inference-gpu-deployments-have-pdb",
    description="Every GPU Deployment in an inference namespace has a PodDisruptionBudget selecting its pods.",
    enforcement_level=MANDATORY,
    validate=_validate_pdb,
    config_schema=schema(**_CONFIG),
)
