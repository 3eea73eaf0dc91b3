"""The Kubernetes side of the make-before-break controller: API JSON in, :class:`Observation` out; actions in,
exact writes out.

Reading is polling (one list per kind per cycle, no watches). A list that fails, or holds an object this module
cannot read, makes its part of the observation None, with the reason: the decision then changes nothing
(fail-static). Writing, one call per action, each as the research behind the design says:

* Node reservation: one RFC 6902 JSON patch that first ``test``s the node's resourceVersion, then sets the label
  and the reservation taint's own list entry (``spec.taints`` is atomic: a merge patch would replace the list).
* Pod deletion cost: a JSON merge patch of that one annotation.
* Deployment placement: server-side apply of our annotation keys only, field manager
  :data:`~components.make_before_break_settings.FIELD_MANAGER`, force=false (a conflict is reported, not forced).
* The Workload's check: server-side apply on the status subresource, force, with the resourceVersion read just
  before (optimistic concurrency), holding only our ``admissionChecks`` entry.
* The AdmissionCheck's ``Active`` condition: server-side apply on its status subresource.

Every function that builds a body is pure and tested on recorded-shaped objects; :class:`KubeApi` only sends.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any
from urllib.parse import quote

from components.make_before_break_settings import CONTROLLER_NAME, FIELD_MANAGER, MakeBeforeBreakSettings
from components.model import parse_quantity
from daemons.make_before_break.decide import SetCheckPending, SetCheckReady, SetPlacement
from daemons.make_before_break.model import (
    DELETION_COST_ANNOTATION,
    EPOCH_ANNOTATION,
    FLIPS_ANNOTATION,
    NOTE_ANNOTATION,
    PHASE_ANNOTATION,
    CheckState,
    Deployment,
    Node,
    Observation,
    Phase,
    Pod,
    PodSet,
    VirtualNode,
    Workload,
    parse_flips,
)
from daemons.toolkit.lease import ConflictError, KubeError

log = logging.getLogger("make_before_break.kube")

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta2"
KUEUE_API = f"{KUEUE_GROUP}/{KUEUE_VERSION}"
#: Events about cluster-scoped objects (Nodes, the AdmissionCheck) must live here.
EVENT_NAMESPACE = "default"
COMPONENT = FIELD_MANAGER
APPLY = "application/apply-patch+yaml"
JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
#: The part of a list that names an object: ``kind namespace/name`` and a field path.
_MAX_SHOWN = 200


class TranslationError(ValueError):
    """An API object this controller cannot read: which object, which field, what is wrong (never the value)."""


# ------------------------------------------------------------------------------------------------ reading


def _shown(text: str) -> str:
    return text if len(text) <= _MAX_SHOWN else text[:_MAX_SHOWN] + "…"


def _ref(obj: Mapping[str, Any], kind: str) -> str:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return f"{kind} (no metadata)"
    name = meta.get("name")
    ns = meta.get("namespace")
    text = f"{ns}/{name}" if isinstance(ns, str) and ns else f"{name}"
    return f"{kind} {_shown(text)}"


def _field(obj: Any, path: str, kind: type | tuple[type, ...], where: str, default: Any = None) -> Any:
    """The value at dotted ``path``; ``default`` when absent (or null); TranslationError when of another type."""
    value = obj
    for part in path.split("."):
        if not isinstance(value, Mapping):
            raise TranslationError(f"{where}: {path} is not an object")
        value = value.get(part)
        if value is None:
            return default
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise TranslationError(f"{where}: {path} has the wrong type (bool)")
    if not isinstance(value, kind):
        raise TranslationError(f"{where}: {path} has the wrong type ({type(value).__name__})")
    return value


def _str_map(obj: Any, path: str, where: str) -> dict[str, str]:
    value = _field(obj, path, Mapping, where, {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise TranslationError(f"{where}: {path} is not a map of strings")
    return dict(value)


def parse_time(text: Any, where: str) -> float:
    """An RFC 3339 timestamp as Unix seconds."""
    if not isinstance(text, str):
        raise TranslationError(f"{where}: not a timestamp")
    try:
        value = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise TranslationError(f"{where}: not an RFC 3339 timestamp") from None
    if value.tzinfo is None:
        raise TranslationError(f"{where}: timestamp without a time zone")
    return value.timestamp()


def format_time(seconds: float) -> str:
    return dt.datetime.fromtimestamp(math.floor(seconds), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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
    """GPUs a pod (spec) requests: the larger of its containers' sum and its largest init container."""

    def one(container: Any, i: int, list_name: str) -> int:
        at = f"{where}: spec.{list_name}[{i}]"
        if not isinstance(container, Mapping):
            raise TranslationError(f"{at} is not an object")
        requests = _field(container, "resources.requests", Mapping, at, {})
        limits = _field(container, "resources.limits", Mapping, at, {})
        value = requests.get(resource, limits.get(resource))
        return 0 if value is None else _count(value, f"{at}.resources {resource}")

    def each(list_name: str) -> list[int]:
        items = _field({"spec": spec}, f"spec.{list_name}", list, where, [])
        return [one(c, i, list_name) for i, c in enumerate(items)]

    if not isinstance(spec, Mapping):
        raise TranslationError(f"{where}: spec is missing")
    return max([sum(each("containers")), *each("initContainers")])


def _conditions(obj: Mapping[str, Any], where: str) -> dict[str, Mapping[str, Any]]:
    out: dict[str, Mapping[str, Any]] = {}
    for i, cond in enumerate(_field(obj, "status.conditions", list, where, [])):
        if not isinstance(cond, Mapping) or not isinstance(cond.get("type"), str):
            raise TranslationError(f"{where}: status.conditions[{i}] has no type")
        out[cond["type"]] = cond
    return out


def _taints(obj: Mapping[str, Any], where: str) -> list[Mapping[str, Any]]:
    taints = _field(obj, "spec.taints", list, where, [])
    for i, taint in enumerate(taints):
        if not isinstance(taint, Mapping) or not isinstance(taint.get("key"), str):
            raise TranslationError(f"{where}: spec.taints[{i}] has no key")
    return list(taints)


def node_gpus(obj: Mapping[str, Any], resource: str) -> int:
    where = _ref(obj, "Node")
    allocatable = _field(obj, "status.allocatable", Mapping, where, {})
    value = allocatable.get(resource)
    return 0 if value is None else _count(value, f"{where}: status.allocatable {resource}")


def node_from(obj: Mapping[str, Any], settings: MakeBeforeBreakSettings) -> Node:
    where = _ref(obj, "Node")
    name = _field(obj, "metadata.name", str, where)
    if not name:
        raise TranslationError(f"{where}: metadata.name is missing")
    labels = _str_map(obj, "metadata.labels", where)
    ready = _conditions(obj, where).get("Ready")
    not_ready_since: float | None = None
    if ready is None or ready.get("status") != "True":
        since = (ready or {}).get("lastTransitionTime") or _field(obj, "metadata.creationTimestamp", str, where)
        not_ready_since = parse_time(since, f"{where}: Ready lastTransitionTime") if since else 0.0
    taints = _taints(obj, where)
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
        schedulable=not _field(obj, "spec.unschedulable", bool, where, False),
        quarantined=bool(keys & set(settings.quarantine_taint_keys)),
        reserved_for=reserved_for,
    )


def virtual_node_from(obj: Mapping[str, Any], settings: MakeBeforeBreakSettings) -> VirtualNode:
    where = _ref(obj, "Node")
    allocatable = _field(obj, "status.allocatable", Mapping, where, None)
    gpus = (
        None
        if allocatable is None or settings.gpu_resource not in allocatable
        else node_gpus(obj, settings.gpu_resource)
    )
    keys = {t["key"] for t in _taints(obj, where)}
    return VirtualNode(str(_field(obj, "metadata.name", str, where, "")), gpus, settings.burst_taint_key in keys)


def _owning_deployment(obj: Mapping[str, Any], where: str) -> str | None:
    """The Deployment a pod belongs to through its ReplicaSet (``<deployment>-<pod-template-hash>``)."""
    labels = _str_map(obj, "metadata.labels", where)
    suffix = labels.get("pod-template-hash")
    for owner in _field(obj, "metadata.ownerReferences", list, where, []):
        if not isinstance(owner, Mapping) or not owner.get("controller"):
            continue
        name = owner.get("name")
        if owner.get("kind") == "ReplicaSet" and isinstance(name, str) and suffix and name.endswith("-" + suffix):
            return name[: -len(suffix) - 1] or None
    return None


def pod_from(obj: Mapping[str, Any], settings: MakeBeforeBreakSettings) -> Pod:
    where = _ref(obj, "Pod")
    namespace = _field(obj, "metadata.namespace", str, where, "")
    annotations = _str_map(obj, "metadata.annotations", where)
    cost_text = annotations.get(DELETION_COST_ANNOTATION)
    try:
        cost = int(cost_text) if cost_text is not None else None
    except ValueError:
        cost = None
    inference = namespace in settings.inference_namespaces
    return Pod(
        namespace=namespace,
        name=_field(obj, "metadata.name", str, where, ""),
        node=_field(obj, "spec.nodeName", str, where, ""),
        gpus=pod_gpus(obj.get("spec"), settings.gpu_resource, where),
        deployment=_owning_deployment(obj, where) if inference else None,
        epoch=annotations.get(EPOCH_ANNOTATION),
        terminating=_field(obj, "metadata.deletionTimestamp", str, where) is not None,
        deletion_cost=cost,
    )


def _surge(strategy: Mapping[str, Any], desired: int, where: str) -> int:
    if strategy.get("type") == "Recreate":
        return 0
    value = _field(strategy, "rollingUpdate.maxSurge", (int, str), where, "25%")
    if isinstance(value, int):
        return max(0, value)
    if value.endswith("%") and value[:-1].isdigit():
        return math.ceil(desired * int(value[:-1]) / 100)
    raise TranslationError(f"{where}: spec.strategy.rollingUpdate.maxSurge is neither a number nor a percentage")


def deployment_from(obj: Mapping[str, Any], settings: MakeBeforeBreakSettings) -> Deployment:
    where = _ref(obj, "Deployment")
    annotations = _str_map(obj, "metadata.annotations", where)
    template_annotations = _str_map(obj, "spec.template.metadata.annotations", where)
    desired = _field(obj, "spec.replicas", int, where, 1)
    generation = _field(obj, "metadata.generation", int, where, 0)
    observed = _field(obj, "status.observedGeneration", int, where, 0)
    phase_text = annotations.get(PHASE_ANNOTATION)
    phase = Phase(phase_text) if phase_text in {p.value for p in Phase} else None
    return Deployment(
        namespace=_field(obj, "metadata.namespace", str, where, ""),
        name=_field(obj, "metadata.name", str, where, ""),
        desired=desired,
        updated=_field(obj, "status.updatedReplicas", int, where, 0),
        available=_field(obj, "status.availableReplicas", int, where, 0),
        replicas=_field(obj, "status.replicas", int, where, 0),
        gpus_per_pod=pod_gpus(
            _field(obj, "spec.template.spec", Mapping, where, {}), settings.gpu_resource, f"{where}: template"
        ),
        current=observed >= generation,
        surge=_surge(_field(obj, "spec.strategy", Mapping, where, {}), desired, f"{where}: spec.strategy"),
        flips=parse_flips(annotations.get(FLIPS_ANNOTATION)),
        epoch=template_annotations.get(EPOCH_ANNOTATION),
        phase=phase,
        note=annotations.get(NOTE_ANNOTATION, ""),
    )


def flavor_labels(objs: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    """ResourceFlavor name -> its spec.nodeLabels."""
    out: dict[str, dict[str, str]] = {}
    for obj in objs:
        where = _ref(obj, "ResourceFlavor")
        out[_field(obj, "metadata.name", str, where, "")] = _str_map(obj, "spec.nodeLabels", where)
    return out


def check_entry(obj: Mapping[str, Any], check_name: str) -> Mapping[str, Any] | None:
    """Our entry in status.admissionChecks, or None."""
    where = _ref(obj, "Workload")
    for entry in _field(obj, "status.admissionChecks", list, where, []):
        if isinstance(entry, Mapping) and entry.get("name") == check_name:
            return entry
    return None


def workload_from(
    obj: Mapping[str, Any], flavors: Mapping[str, Mapping[str, str]], settings: MakeBeforeBreakSettings
) -> Workload | None:
    """The workload, or None when its status does not list our check (not ours to drive)."""
    where = _ref(obj, "Workload")
    entry = check_entry(obj, settings.admission_check_name)
    if entry is None:
        return None
    uid = _field(obj, "metadata.uid", str, where, "")
    if not uid:
        raise TranslationError(f"{where}: metadata.uid is missing")
    state_text = entry.get("state")
    try:
        check = CheckState(str(state_text))
    except ValueError:
        raise TranslationError(f"{where}: our admissionChecks entry has an unknown state") from None
    conditions = _conditions(obj, where)

    def true(kind: str) -> bool:
        return conditions.get(kind, {}).get("status") == "True"

    quota_at = None
    if true("QuotaReserved"):
        quota_at = parse_time(conditions["QuotaReserved"].get("lastTransitionTime"), f"{where}: QuotaReserved time")
    templates: dict[str, Any] = {}
    for i, ps in enumerate(_field(obj, "spec.podSets", list, where, [])):
        if not isinstance(ps, Mapping) or not isinstance(ps.get("name"), str):
            raise TranslationError(f"{where}: spec.podSets[{i}] has no name")
        templates[ps["name"]] = ps
    pod_sets: list[PodSet] = []
    if quota_at is not None:
        assignments = _field(obj, "status.admission.podSetAssignments", list, where, None)
        if assignments is None:
            raise TranslationError(f"{where}: quota reserved but status.admission.podSetAssignments is missing")
        for i, a in enumerate(assignments):
            at = f"{where}: status.admission.podSetAssignments[{i}]"
            name = _field(a, "name", str, at, "")
            spec = templates.get(name)
            if spec is None:
                raise TranslationError(f"{at} names a pod set the spec does not have")
            gpus = pod_gpus(_field(spec, "template.spec", Mapping, at, {}), settings.gpu_resource, f"{at} template")
            count = _field(a, "count", int, at, None)
            if count is None:
                count = _field(spec, "count", int, at, 1)
            labels: dict[str, str] = {}
            if gpus:
                flavor = _str_map(a, "flavors", at).get(settings.gpu_resource)
                if flavor is None or flavor not in flavors:
                    raise TranslationError(f"{at}: no known ResourceFlavor assigned for {settings.gpu_resource}")
                labels = dict(flavors[flavor])
            pod_sets.append(PodSet(name, count, gpus, labels))
    return Workload(
        uid=uid,
        namespace=_field(obj, "metadata.namespace", str, where, ""),
        name=_field(obj, "metadata.name", str, where, ""),
        pod_sets=tuple(pod_sets),
        quota_reserved_at=quota_at,
        check=check,
        check_message=str(entry.get("message") or ""),
        finished=true("Finished"),
        evicted=true("Evicted"),
        deleting=_field(obj, "metadata.deletionTimestamp", str, where) is not None,
    )


@dataclass
class RawLists:
    """The API's lists as JSON items; None where the list call failed (``errors`` says why)."""

    nodes: list[Mapping[str, Any]] | None
    pods: list[Mapping[str, Any]] | None
    deployments: list[Mapping[str, Any]] | None
    workloads: list[Mapping[str, Any]] | None
    flavors: list[Mapping[str, Any]] | None
    errors: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Observed:
    observation: Observation
    #: list name -> why it is unknown (a failed call, or an object that cannot be read).
    problems: Mapping[str, str]


def _each(items: Sequence[Mapping[str, Any]] | None, what: str, problems: dict[str, str], parse: Any) -> Any:
    if items is None:
        return None
    out = []
    for obj in items:
        try:
            value = parse(obj)
        except TranslationError as exc:
            problems[what] = str(exc)
            return None
        if value is not None:
            out.append(value)
    return tuple(out)


def observe(raw: RawLists, settings: MakeBeforeBreakSettings) -> Observed:
    """The observation the decision takes; a failed or unreadable list makes its part None (fail-static)."""
    problems = dict(raw.errors)
    virtual: VirtualNode | None = None
    nodes: tuple[Node, ...] | None = None
    if raw.nodes is not None:
        real = []
        try:
            for obj in raw.nodes:
                name = obj.get("metadata", {}).get("name") if isinstance(obj.get("metadata"), Mapping) else None
                if settings.virtual_node_name is not None and name == settings.virtual_node_name:
                    virtual = virtual_node_from(obj, settings)
                elif node_gpus(obj, settings.gpu_resource) > 0:
                    real.append(node_from(obj, settings))
            nodes = tuple(real)
        except TranslationError as exc:
            problems["nodes"] = str(exc)
            virtual = None
    known = {n.name for n in nodes or ()} | ({virtual.name} if virtual else set())

    def pod(obj: Mapping[str, Any]) -> Pod | None:
        phase = _field(obj, "status.phase", str, _ref(obj, "Pod"), "")
        if phase in ("Succeeded", "Failed") or _field(obj, "spec.nodeName", str, _ref(obj, "Pod"), "") not in known:
            return None
        p = pod_from(obj, settings)
        return p if p.gpus > 0 else None

    pods = _each(raw.pods, "pods", problems, pod) if nodes is not None else None
    deployments = _each(raw.deployments, "deployments", problems, lambda o: deployment_from(o, settings))
    flavors: dict[str, dict[str, str]] | None = None
    if raw.flavors is not None:
        try:
            flavors = flavor_labels(raw.flavors)
        except TranslationError as exc:
            problems["resourceflavors"] = str(exc)
    workloads = None
    if flavors is not None:
        workloads = _each(raw.workloads, "workloads", problems, lambda o: workload_from(o, flavors, settings))
    elif "resourceflavors" not in problems:
        problems["resourceflavors"] = "the ResourceFlavor list failed"
    return Observed(Observation(nodes, pods, deployments, workloads, virtual), problems)


# ------------------------------------------------------------------------------------------------ writing


def _pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _taint(key: str, uid: str) -> dict[str, str]:
    return {"key": key, "value": uid, "effect": "NoSchedule"}


def reserve_ops(node: Mapping[str, Any], key: str, uid: str) -> list[dict[str, Any]]:
    """JSON patch: the reservation label and exactly one reservation taint with ``uid``; [] when already so."""
    where = _ref(node, "Node")
    labels = _str_map(node, "metadata.labels", where)
    taints = _taints(node, where)
    found = [(i, t) for i, t in enumerate(taints) if t["key"] == key]
    want = _taint(key, uid)
    label_ok = labels.get(key) == uid
    taint_ok = len(found) == 1 and dict(found[0][1]) == want
    if label_ok and taint_ok:
        return []
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": node["metadata"]["resourceVersion"]}
    ]
    if not label_ok:
        if _field(node, "metadata.labels", Mapping, where) is None:
            ops.append({"op": "add", "path": "/metadata/labels", "value": {key: uid}})
        else:
            ops.append({"op": "add", "path": f"/metadata/labels/{_pointer(key)}", "value": uid})
    if not taint_ok:
        for i, t in reversed(found):
            ops.append({"op": "test", "path": f"/spec/taints/{i}", "value": dict(t)})
            ops.append({"op": "remove", "path": f"/spec/taints/{i}"})
        if _field(node, "spec.taints", list, where) is None:
            ops.append({"op": "add", "path": "/spec/taints", "value": [want]})
        else:
            ops.append({"op": "add", "path": "/spec/taints/-", "value": want})
    return ops


def release_ops(node: Mapping[str, Any], key: str, uid: str) -> list[dict[str, Any]]:
    """JSON patch: remove the label and taint entries holding ``uid`` (another uid's stay); [] when none."""
    where = _ref(node, "Node")
    labels = _str_map(node, "metadata.labels", where)
    taints = _taints(node, where)
    ops: list[dict[str, Any]] = []
    if labels.get(key) == uid:
        path = f"/metadata/labels/{_pointer(key)}"
        ops += [{"op": "test", "path": path, "value": uid}, {"op": "remove", "path": path}]
    for i, t in reversed(list(enumerate(taints))):
        if t["key"] == key and t.get("value") == uid:
            ops += [
                {"op": "test", "path": f"/spec/taints/{i}", "value": dict(t)},
                {"op": "remove", "path": f"/spec/taints/{i}"},
            ]
    if not ops:
        return []
    return [{"op": "test", "path": "/metadata/resourceVersion", "value": node["metadata"]["resourceVersion"]}, *ops]


def deletion_cost_patch(cost: int | None) -> dict[str, Any]:
    """Merge patch of the pod-deletion-cost annotation (None: removed)."""
    return {"metadata": {"annotations": {DELETION_COST_ANNOTATION: None if cost is None else str(cost)}}}


def placement_body(action: SetPlacement) -> dict[str, Any]:
    """The apply configuration of our keys on the Deployment (keys we applied before and leave out are removed)."""
    metadata: dict[str, Any] = {"name": action.deployment, "namespace": action.namespace}
    if action.annotations:
        metadata["annotations"] = action.annotations
    body: dict[str, Any] = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata}
    if action.template_annotations:
        body["spec"] = {"template": {"metadata": {"annotations": action.template_annotations}}}
    return body


def check_body(
    action: SetCheckPending | SetCheckReady, workload: Mapping[str, Any], check_name: str, now: float
) -> dict[str, Any]:
    """The status apply configuration holding only our admissionChecks entry, conditional on resourceVersion.

    lastTransitionTime stays as it is while the state does not change.
    """
    state = CheckState.READY if isinstance(action, SetCheckReady) else CheckState.PENDING
    current = check_entry(workload, check_name) or {}
    since = current.get("lastTransitionTime")
    if current.get("state") != state.value or not isinstance(since, str):
        since = format_time(now)
    entry: dict[str, Any] = {"name": check_name, "state": state.value, "lastTransitionTime": since}
    entry["message"] = action.message
    if isinstance(action, SetCheckReady) and action.pod_set_updates:
        entry["podSetUpdates"] = [
            {
                "name": u.name,
                "nodeSelector": dict(u.node_selector),
                "tolerations": [
                    {"key": t.key, "operator": t.operator, "value": t.value, "effect": t.effect} for t in u.tolerations
                ],
            }
            for u in action.pod_set_updates
        ]
    meta = workload["metadata"]
    return {
        "apiVersion": KUEUE_API,
        "kind": "Workload",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"], "resourceVersion": meta["resourceVersion"]},
        "status": {"admissionChecks": [entry]},
    }


def active_body(check: Mapping[str, Any], now: float) -> dict[str, Any] | None:
    """The AdmissionCheck's Active=True condition to apply; None when it already holds for this generation."""
    where = _ref(check, "AdmissionCheck")
    generation = _field(check, "metadata.generation", int, where, 0)
    active = _conditions(check, where).get("Active")
    if active and active.get("status") == "True" and active.get("observedGeneration") == generation:
        return None
    return {
        "apiVersion": KUEUE_API,
        "kind": "AdmissionCheck",
        "metadata": {"name": check["metadata"]["name"]},
        "status": {
            "conditions": [
                {
                    "type": "Active",
                    "status": "True",
                    "reason": "Active",
                    "message": f"{FIELD_MANAGER} is running",
                    "lastTransitionTime": format_time(now),
                    "observedGeneration": generation,
                }
            ]
        },
    }


def controller_name_of(check: Mapping[str, Any]) -> str:
    return str(_field(check, "spec.controllerName", str, _ref(check, "AdmissionCheck"), ""))


def event_body(
    involved: Mapping[str, Any],
    namespace: str,
    *,
    event_type: str,
    reason: str,
    message: str,
    now: float,
    identity: str,
) -> dict[str, Any]:
    stamp = format_time(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{involved['name']}.", "namespace": namespace},
        "involvedObject": dict(involved),
        "type": event_type,
        "reason": reason,
        "message": message[:1024],
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": identity[:128],
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


# ------------------------------------------------------------------------------------------------ the API


def _has_causes(data: bytes) -> bool:
    try:
        status = json.loads(data)
    except ValueError:
        return True
    details = status.get("details") if isinstance(status, dict) else None
    return bool(isinstance(details, dict) and details.get("causes"))


def _status_message(data: bytes) -> str:
    try:
        status = json.loads(data)
    except ValueError:
        return ""
    message = status.get("message") if isinstance(status, dict) else None
    return _shown(message) if isinstance(message, str) else ""


class KubeApi:
    """Raw JSON calls on the official client's connection (its auth, TLS and timeouts); errors are KubeError."""

    def __init__(self, api_client: Any, timeout_s: float = 10.0) -> None:
        self._api = api_client
        self._timeout = timeout_s

    def request(
        self,
        method: str,
        path: str,
        what: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: Any = None,
        content_type: str | None = None,
    ) -> Any:
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        try:
            serialized = self._api.param_serialize(
                method=method,
                resource_path=path,
                query_params=list(query),
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
            )
            response = self._api.call_api(*serialized, _request_timeout=self._timeout)
            data = response.read()
        except Exception as exc:  # unreachable, TLS, timeouts
            raise KubeError(f"{what}: {_shown(str(exc))}") from None
        status = int(getattr(response, "status", 0) or 0)
        if 200 <= status < 300:
            try:
                return json.loads(data) if data else {}
            except ValueError:
                raise KubeError(f"{what}: the reply is not JSON") from None
        message = _status_message(data or b"")
        if status == 409:
            raise ConflictError(f"{what}: conflict ({message})")
        if status == 422 and content_type == JSON_PATCH and not _has_causes(data or b""):
            raise ConflictError(f"{what}: the object changed since it was read")
        raise KubeError(f"{what}: HTTP {status}: {message}")

    def list_all(self, path: str, what: str, query: Sequence[tuple[str, str]] = ()) -> list[Mapping[str, Any]]:
        """Every item of a list, page by page."""
        items: list[Mapping[str, Any]] = []
        token = ""
        for _ in range(1000):
            page = self.request(
                "GET", path, what, query=[*query, ("limit", "500"), *([("continue", token)] if token else [])]
            )
            batch = page.get("items") if isinstance(page, dict) else None
            if not isinstance(batch, list) or not all(isinstance(i, Mapping) for i in batch):
                raise KubeError(f"{what}: the reply has no list of items")
            items += batch
            token = (page.get("metadata") or {}).get("continue") or ""
            if not token:
                return items
        raise KubeError(f"{what}: more than 1000 pages")

    # reading
    def list_nodes(self) -> list[Mapping[str, Any]]:
        return self.list_all("/api/v1/nodes", "list nodes")

    def list_pods(self) -> list[Mapping[str, Any]]:
        selector = "status.phase!=Succeeded,status.phase!=Failed,spec.nodeName!="
        return self.list_all("/api/v1/pods", "list pods", [("fieldSelector", selector)])

    def list_deployments(self, namespace: str) -> list[Mapping[str, Any]]:
        return self.list_all(
            f"/apis/apps/v1/namespaces/{quote(namespace)}/deployments", f"list deployments in {namespace}"
        )

    def list_workloads(self) -> list[Mapping[str, Any]]:
        return self.list_all(f"/apis/{KUEUE_API}/workloads", "list workloads")

    def list_flavors(self) -> list[Mapping[str, Any]]:
        return self.list_all(f"/apis/{KUEUE_API}/resourceflavors", "list resourceflavors")

    def get_node(self, name: str) -> Mapping[str, Any]:
        return dict(self.request("GET", f"/api/v1/nodes/{quote(name)}", f"read node {name}"))

    def get_workload(self, namespace: str, name: str) -> Mapping[str, Any]:
        path = f"/apis/{KUEUE_API}/namespaces/{quote(namespace)}/workloads/{quote(name)}"
        return dict(self.request("GET", path, f"read workload {namespace}/{name}"))

    def get_admission_check(self, name: str) -> Mapping[str, Any]:
        return dict(
            self.request("GET", f"/apis/{KUEUE_API}/admissionchecks/{quote(name)}", f"read admissioncheck {name}")
        )

    # writing
    def patch_node(self, name: str, ops: list[dict[str, Any]]) -> Mapping[str, Any]:
        return dict(
            self.request(
                "PATCH", f"/api/v1/nodes/{quote(name)}", f"patch node {name}", body=ops, content_type=JSON_PATCH
            )
        )

    def patch_pod(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        path = f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}"
        self.request("PATCH", path, f"patch pod {namespace}/{name}", body=patch, content_type=MERGE_PATCH)

    def apply(self, path: str, what: str, body: dict[str, Any], *, force: bool) -> Mapping[str, Any]:
        query = [("fieldManager", FIELD_MANAGER), *([("force", "true")] if force else [])]
        return dict(self.request("PATCH", path, what, query=query, body=body, content_type=APPLY))

    def apply_deployment(self, body: dict[str, Any]) -> Mapping[str, Any]:
        ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
        path = f"/apis/apps/v1/namespaces/{quote(ns)}/deployments/{quote(name)}"
        return self.apply(path, f"apply deployment {ns}/{name}", body, force=False)

    def apply_workload_status(self, body: dict[str, Any]) -> Mapping[str, Any]:
        ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
        path = f"/apis/{KUEUE_API}/namespaces/{quote(ns)}/workloads/{quote(name)}/status"
        return self.apply(path, f"apply workload status {ns}/{name}", body, force=True)

    def apply_admission_check_status(self, body: dict[str, Any]) -> Mapping[str, Any]:
        name = body["metadata"]["name"]
        path = f"/apis/{KUEUE_API}/admissionchecks/{quote(name)}/status"
        return self.apply(path, f"apply admissioncheck status {name}", body, force=True)

    def create_event(self, body: dict[str, Any]) -> None:
        ns = body["metadata"]["namespace"]
        self.request("POST", f"/api/v1/namespaces/{quote(ns)}/events", "create event", body=body)


def read_lists(api: KubeApi, settings: MakeBeforeBreakSettings) -> RawLists:
    """Every list the observation needs; a failed call leaves its list None with the reason in ``errors``."""
    errors: dict[str, str] = {}

    def attempt(what: str, call: Any) -> Any:
        try:
            return call()
        except KubeError as exc:
            errors[what] = str(exc)
            return None

    def deployments() -> list[Mapping[str, Any]]:
        out: list[Mapping[str, Any]] = []
        for ns in settings.inference_namespaces:
            out += api.list_deployments(ns)
        return out

    return RawLists(
        nodes=attempt("nodes", api.list_nodes),
        pods=attempt("pods", api.list_pods),
        deployments=attempt("deployments", deployments),
        workloads=attempt("workloads", api.list_workloads),
        flavors=attempt("resourceflavors", api.list_flavors),
        errors=errors,
    )


__all__ = ["CONTROLLER_NAME", "ConflictError", "KubeError"]
