"""API objects -> the model: Nodes, Pods, Deployments, Kueue Workloads and ResourceFlavors as
:mod:`daemons.make_before_break.model` dataclasses. Pure: objects already listed in, the model out.

An object this controller cannot read raises :class:`~daemons.make_before_break.fields.TranslationError` naming
the object and the field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

from contract.controllers.make_before_break import (
    DELETION_COST_ANNOTATION,
    EPOCH_ANNOTATION,
    FLIPS_ANNOTATION,
    NOTE_ANNOTATION,
    PHASE_ANNOTATION,
)
from contract.make_before_break_settings import MakeBeforeBreakSettings
from contract.model import parse_quantity, pod_resource_count
from daemons.make_before_break.fields import (
    TranslationError,
    conditions_of,
    parse_time,
    ref_of,
    str_map,
    taints_of,
    value_at,
)
from daemons.make_before_break.model import (
    CheckState,
    Deployment,
    Node,
    Phase,
    Pod,
    PodSet,
    VirtualNode,
    Workload,
    parse_flips,
)
from daemons.make_before_break.topology_assignment import AssignmentError, pods_per_node


def _count(value: Any, where: str) -> int:
    """A whole, non-negative resource quantity (``8``, ``"8"``)."""
    if isinstance(value, bool):
        raise TranslationError(f"{where}: not a quantity")
    if isinstance(value, int):
        number = Decimal(value)
    elif isinstance(value, str):
        try:
            number = parse_quantity(value)
        except (ValueError, InvalidOperation):
            raise TranslationError(f"{where}: not a quantity") from None
    else:
        raise TranslationError(f"{where}: not a quantity")
    if number < 0 or number != number.to_integral_value():
        raise TranslationError(f"{where}: not a whole number of devices")
    return int(number)


def pod_gpus(spec: Any, resource: str, where: str) -> int:
    """GPUs a pod (spec) holds (``contract.model.pod_resource_count``: the one rule)."""
    try:
        return pod_resource_count(spec, resource)
    except ValueError as exc:
        raise TranslationError(f"{where}: {exc}") from None


def node_gpus(obj: Mapping[str, Any], resource: str) -> int:
    where = ref_of(obj, "Node")
    allocatable = value_at(obj, "status.allocatable", Mapping, where, {})
    value = allocatable.get(resource)
    return 0 if value is None else _count(value, f"{where}: status.allocatable {resource}")


def node_from(obj: Mapping[str, Any], settings: MakeBeforeBreakSettings) -> Node:
    where = ref_of(obj, "Node")
    name = value_at(obj, "metadata.name", str, where)
    if not name:
        raise TranslationError(f"{where}: metadata.name is missing")
    labels = str_map(obj, "metadata.labels", where)
    ready = conditions_of(obj, where).get("Ready")
    not_ready_since: float | None = None
    if ready is None or ready.get("status") != "True":
        since = (ready or {}).get("lastTransitionTime") or value_at(obj, "metadata.creationTimestamp", str, where)
        not_ready_since = parse_time(since, f"{where}: Ready lastTransitionTime") if since else 0.0
    taints = taints_of(obj, where)
    keys = {t["key"] for t in taints}
    reserved = [t.get("value") for t in taints if t["key"] == settings.reservation_key]
    reserved_for = next((v for v in reserved if isinstance(v, str) and v), None)
    if reserved_for is None:
        reserved_for = labels.get(settings.reservation_key) or None
    return Node(
        name=name,
        labels=labels,
        gpus=node_gpus(obj, settings.gpu_resource),
        not_ready_since=not_ready_since,
        schedulable=not value_at(obj, "spec.unschedulable", bool, where, False),
        quarantined=bool(keys & set(settings.quarantine_taint_keys)),
        reserved_for=reserved_for,
    )


def virtual_node_from(obj: Mapping[str, Any], settings: MakeBeforeBreakSettings) -> VirtualNode:
    where = ref_of(obj, "Node")
    allocatable = value_at(obj, "status.allocatable", Mapping, where, None)
    gpus = (
        None
        if allocatable is None or settings.gpu_resource not in allocatable
        else node_gpus(obj, settings.gpu_resource)
    )
    keys = {t["key"] for t in taints_of(obj, where)}
    return VirtualNode(str(value_at(obj, "metadata.name", str, where, "")), gpus, settings.burst_taint_key in keys)


def _owning_deployment(obj: Mapping[str, Any], where: str) -> str | None:
    """The Deployment a pod belongs to through its ReplicaSet (``<deployment>-<pod-template-hash>``)."""
    labels = str_map(obj, "metadata.labels", where)
    suffix = labels.get("pod-template-hash")
    for owner in value_at(obj, "metadata.ownerReferences", list, where, []):
        if not isinstance(owner, Mapping) or not owner.get("controller"):
            continue
        name = owner.get("name")
        if owner.get("kind") == "ReplicaSet" and isinstance(name, str) and suffix and name.endswith("-" + suffix):
            return name[: -len(suffix) - 1] or None
    return None


def pod_from(obj: Mapping[str, Any], settings: MakeBeforeBreakSettings) -> Pod:
    where = ref_of(obj, "Pod")
    namespace = value_at(obj, "metadata.namespace", str, where, "")
    annotations = str_map(obj, "metadata.annotations", where)
    cost_text = annotations.get(DELETION_COST_ANNOTATION)
    try:
        cost = int(cost_text) if cost_text is not None else None
    except ValueError:
        cost = None
    inference = namespace in settings.inference_namespaces
    return Pod(
        namespace=namespace,
        name=value_at(obj, "metadata.name", str, where, ""),
        node=value_at(obj, "spec.nodeName", str, where, ""),
        gpus=pod_gpus(obj.get("spec"), settings.gpu_resource, where),
        deployment=_owning_deployment(obj, where) if inference else None,
        epoch=annotations.get(EPOCH_ANNOTATION),
        terminating=value_at(obj, "metadata.deletionTimestamp", str, where) is not None,
        deletion_cost=cost,
    )


def _surge(strategy: Mapping[str, Any], desired: int, where: str) -> int:
    if strategy.get("type") == "Recreate":
        return 0
    value = value_at(strategy, "rollingUpdate.maxSurge", (int, str), where, "25%")
    if isinstance(value, int):
        return max(0, value)
    if value.endswith("%") and value[:-1].isdigit():
        return math.ceil(desired * int(value[:-1]) / 100)
    raise TranslationError(f"{where}: spec.strategy.rollingUpdate.maxSurge is neither a number nor a percentage")


def deployment_from(obj: Mapping[str, Any], settings: MakeBeforeBreakSettings) -> Deployment:
    where = ref_of(obj, "Deployment")
    annotations = str_map(obj, "metadata.annotations", where)
    template_annotations = str_map(obj, "spec.template.metadata.annotations", where)
    desired = value_at(obj, "spec.replicas", int, where, 1)
    generation = value_at(obj, "metadata.generation", int, where, 0)
    observed = value_at(obj, "status.observedGeneration", int, where, 0)
    phase_text = annotations.get(PHASE_ANNOTATION)
    phase = Phase(phase_text) if phase_text in {p.value for p in Phase} else None
    return Deployment(
        namespace=value_at(obj, "metadata.namespace", str, where, ""),
        name=value_at(obj, "metadata.name", str, where, ""),
        desired=desired,
        updated=value_at(obj, "status.updatedReplicas", int, where, 0),
        available=value_at(obj, "status.availableReplicas", int, where, 0),
        replicas=value_at(obj, "status.replicas", int, where, 0),
        gpus_per_pod=pod_gpus(
            value_at(obj, "spec.template.spec", Mapping, where, {}), settings.gpu_resource, f"{where}: template"
        ),
        current=observed >= generation,
        surge=_surge(value_at(obj, "spec.strategy", Mapping, where, {}), desired, f"{where}: spec.strategy"),
        flips=parse_flips(annotations.get(FLIPS_ANNOTATION)),
        epoch=template_annotations.get(EPOCH_ANNOTATION),
        phase=phase,
        note=annotations.get(NOTE_ANNOTATION, ""),
    )


def flavor_labels(objs: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    """ResourceFlavor name -> its spec.nodeLabels."""
    out: dict[str, dict[str, str]] = {}
    for obj in objs:
        where = ref_of(obj, "ResourceFlavor")
        out[value_at(obj, "metadata.name", str, where, "")] = str_map(obj, "spec.nodeLabels", where)
    return out


def check_entry(obj: Mapping[str, Any], check_name: str) -> Mapping[str, Any] | None:
    """Our entry in status.admissionChecks, or None."""
    where = ref_of(obj, "Workload")
    for entry in value_at(obj, "status.admissionChecks", list, where, []):
        if isinstance(entry, Mapping) and entry.get("name") == check_name:
            return entry
    return None


def workload_from(
    obj: Mapping[str, Any], flavors: Mapping[str, Mapping[str, str]], settings: MakeBeforeBreakSettings
) -> Workload | None:
    """The workload, or None when its status does not list our check (not ours to drive)."""
    where = ref_of(obj, "Workload")
    entry = check_entry(obj, settings.admission_check_name)
    if entry is None:
        return None
    uid = value_at(obj, "metadata.uid", str, where, "")
    if not uid:
        raise TranslationError(f"{where}: metadata.uid is missing")
    state_text = entry.get("state")
    try:
        check = CheckState(str(state_text))
    except ValueError:
        raise TranslationError(f"{where}: our admissionChecks entry has an unknown state") from None
    conditions = conditions_of(obj, where)

    def true(kind: str) -> bool:
        return conditions.get(kind, {}).get("status") == "True"

    quota_at = None
    if true("QuotaReserved"):
        quota_at = parse_time(conditions["QuotaReserved"].get("lastTransitionTime"), f"{where}: QuotaReserved time")
    templates: dict[str, Any] = {}
    for i, ps in enumerate(value_at(obj, "spec.podSets", list, where, [])):
        if not isinstance(ps, Mapping) or not isinstance(ps.get("name"), str):
            raise TranslationError(f"{where}: spec.podSets[{i}] has no name")
        templates[ps["name"]] = ps
    pod_sets: list[PodSet] = []
    if quota_at is not None:
        assignments = value_at(obj, "status.admission.podSetAssignments", list, where, None)
        if assignments is None:
            raise TranslationError(f"{where}: quota reserved but status.admission.podSetAssignments is missing")
        for i, a in enumerate(assignments):
            at = f"{where}: status.admission.podSetAssignments[{i}]"
            name = value_at(a, "name", str, at, "")
            spec = templates.get(name)
            if spec is None:
                raise TranslationError(f"{at} names a pod set the spec does not have")
            gpus = pod_gpus(value_at(spec, "template.spec", Mapping, at, {}), settings.gpu_resource, f"{at} template")
            count = value_at(a, "count", int, at, None)
            if count is None:
                count = value_at(spec, "count", int, at, 1)
            labels: dict[str, str] = {}
            if gpus:
                flavor = str_map(a, "flavors", at).get(settings.gpu_resource)
                if flavor is None or flavor not in flavors:
                    raise TranslationError(f"{at}: no known ResourceFlavor assigned for {settings.gpu_resource}")
                labels = dict(flavors[flavor])
            assigned: dict[str, int] = {}
            if gpus and a.get("topologyAssignment") is not None:
                try:
                    assigned = pods_per_node(a["topologyAssignment"], f"{at}.topologyAssignment")
                except AssignmentError as exc:
                    raise TranslationError(str(exc)) from None
            pod_sets.append(PodSet(name, count, gpus, labels, assigned))
    return Workload(
        uid=uid,
        namespace=value_at(obj, "metadata.namespace", str, where, ""),
        name=value_at(obj, "metadata.name", str, where, ""),
        pod_sets=tuple(pod_sets),
        quota_reserved_at=quota_at,
        check=check,
        check_message=str(entry.get("message") or ""),
        finished=true("Finished"),
        evicted=true("Evicted"),
        deleting=value_at(obj, "metadata.deletionTimestamp", str, where) is not None,
    )


def controller_name_of(check: Mapping[str, Any]) -> str:
    return str(value_at(check, "spec.controllerName", str, ref_of(check, "AdmissionCheck"), ""))
