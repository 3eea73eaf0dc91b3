"""Actions -> the exact writes: request bodies and JSON patches, one per action. Pure (no I/O).

* Node reservation: one RFC 6902 JSON patch that first ``test``s the node's resourceVersion, then sets the label
  and the reservation taint's own list entry (``spec.taints`` is atomic: a merge patch would replace the list).
* Pod deletion cost: a JSON merge patch of that one annotation.
* Deployment placement: server-side apply of our annotation keys only, field manager
  :data:`~contract.make_before_break_settings.FIELD_MANAGER`, force=false (a conflict is reported, not forced).
* The Workload's check: server-side apply on the status subresource, force, with the resourceVersion read just
  before (optimistic concurrency), holding only our ``admissionChecks`` entry.
* The AdmissionCheck's ``Active`` condition: server-side apply on its status subresource.
* Events: a ``v1`` Event about the object, from this controller.

:class:`~daemons.make_before_break.client.KubeApi` only sends them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contract.constants import KUEUE_API
from contract.controllers.make_before_break import DELETION_COST_ANNOTATION
from contract.make_before_break_settings import FIELD_MANAGER
from daemons.make_before_break.actions import SetCheckPending, SetCheckReady, SetPlacement
from daemons.make_before_break.fields import conditions_of, ref_of, str_map, taints_of, value_at
from daemons.make_before_break.model import CheckState
from daemons.make_before_break.translate import check_entry
from daemons.toolkit.events import format_time


def _pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _taint(key: str, uid: str) -> dict[str, str]:
    return {"key": key, "value": uid, "effect": "NoSchedule"}


def reserve_ops(node: Mapping[str, Any], key: str, uid: str) -> list[dict[str, Any]]:
    """JSON patch: the reservation label and exactly one reservation taint with ``uid``; [] when already so."""
    where = ref_of(node, "Node")
    labels = str_map(node, "metadata.labels", where)
    taints = taints_of(node, where)
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
        if value_at(node, "metadata.labels", Mapping, where) is None:
            ops.append({"op": "add", "path": "/metadata/labels", "value": {key: uid}})
        else:
            ops.append({"op": "add", "path": f"/metadata/labels/{_pointer(key)}", "value": uid})
    if not taint_ok:
        for i, t in reversed(found):
            ops.append({"op": "test", "path": f"/spec/taints/{i}", "value": dict(t)})
            ops.append({"op": "remove", "path": f"/spec/taints/{i}"})
        if value_at(node, "spec.taints", list, where) is None:
            ops.append({"op": "add", "path": "/spec/taints", "value": [want]})
        else:
            ops.append({"op": "add", "path": "/spec/taints/-", "value": want})
    return ops


def release_ops(node: Mapping[str, Any], key: str, uid: str) -> list[dict[str, Any]]:
    """JSON patch: remove the label and taint entries holding ``uid`` (another uid's stay); [] when none."""
    where = ref_of(node, "Node")
    labels = str_map(node, "metadata.labels", where)
    taints = taints_of(node, where)
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
    where = ref_of(check, "AdmissionCheck")
    generation = value_at(check, "metadata.generation", int, where, 0)
    active = conditions_of(check, where).get("Active")
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
