"""The quarantine controller's API calls and the one patch that quarantines a node.

:class:`KubeApi` is the toolkit's client (``daemons/toolkit/kube_api.py``: raw JSON on the official client's
connection, every failure a KubeError, a conflict a ConflictError, a missing object a NotFoundError) with this
controller's field manager.

:func:`quarantine_ops` is ONE JSON patch (RFC 6902) of the Node: it tests the resourceVersion, then adds the taint
(an entry of ``spec.taints``, which has no merge key), the quarantined label and the reason and time annotations,
and drops an old release annotation. The API server applies a patch whole or not at all, so a kill -9 can never
leave a node with the taint but without its reason, or the other way round.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from contract.constants import (
    QUARANTINE_REASON_ANNOTATION,
    QUARANTINE_TAINT_EFFECT,
    QUARANTINE_TAINT_KEY,
    QUARANTINED_AT_ANNOTATION,
    QUARANTINED_LABEL,
)
from contract.quarantine_settings import FIELD_MANAGER, LEDGER_NAME, RELEASED_AT_ANNOTATION
from daemons.quarantine.decide import NodeView
from daemons.toolkit.events import format_time
from daemons.toolkit.kube_api import JSON_PATCH, NotFoundError
from daemons.toolkit.kube_api import KubeApi as BaseKubeApi
from daemons.toolkit.kube_api import shown as _shown
from daemons.toolkit.taint import Taint


class TranslationError(ValueError):
    """A Node this controller cannot read: which node and which field (never the value)."""


class KubeApi(BaseKubeApi):
    """The toolkit's client with this controller's field manager and the calls it makes."""

    def __init__(self, api_client: Any, timeout_s: float = 10.0) -> None:
        super().__init__(api_client, timeout_s, FIELD_MANAGER)

    def list_nodes(self) -> list[Mapping[str, Any]]:
        return self.list_all("/api/v1/nodes", "list nodes")

    def patch_node(self, name: str, ops: list[dict[str, Any]]) -> Mapping[str, Any]:
        path = f"/api/v1/nodes/{quote(name)}"
        return dict(self.request("PATCH", path, f"patch node {name}", body=ops, content_type=JSON_PATCH))

    def get_ledger(self, namespace: str) -> Mapping[str, Any] | None:
        """The ledger ConfigMap, or None when it does not exist yet."""
        path = f"/api/v1/namespaces/{quote(namespace)}/configmaps/{LEDGER_NAME}"
        try:
            return dict(self.request("GET", path, f"read configmap {namespace}/{LEDGER_NAME}"))
        except NotFoundError:
            return None

    def apply_ledger(self, body: dict[str, Any]) -> Mapping[str, Any]:
        ns = body["metadata"]["namespace"]
        path = f"/api/v1/namespaces/{quote(ns)}/configmaps/{LEDGER_NAME}"
        return self.apply(path, f"apply configmap {ns}/{LEDGER_NAME}", body, force=True)


# --- nodes ------------------------------------------------------------------------------------------------------


def _strings(obj: Any, where: str, field: str) -> dict[str, str]:
    if obj is None:
        return {}
    if not isinstance(obj, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in obj.items()):
        raise TranslationError(f"{where}: {field} is not a map of strings")
    return dict(obj)


def node_from(obj: Mapping[str, Any]) -> NodeView:
    """A listed Node as the decision reads it; TranslationError names the node and the field."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str) or not meta.get("name"):
        raise TranslationError("a Node without metadata.name")
    name = str(meta["name"])
    where = f"Node {_shown(name)}"
    spec = obj.get("spec") or {}
    if not isinstance(spec, Mapping):
        raise TranslationError(f"{where}: spec is not an object")
    taints: list[Taint] = []
    raw_taints = spec.get("taints") or []
    if not isinstance(raw_taints, list):
        raise TranslationError(f"{where}: spec.taints is not a list")
    for i, t in enumerate(raw_taints):
        if not isinstance(t, Mapping) or not isinstance(t.get("key"), str) or not isinstance(t.get("effect"), str):
            raise TranslationError(f"{where}: spec.taints[{i}] has no key or effect")
        value = t.get("value")
        taints.append(Taint(t["key"], t["effect"], value if isinstance(value, str) else None))
    return NodeView(
        name=name,
        labels=_strings(meta.get("labels"), where, "metadata.labels"),
        annotations=_strings(meta.get("annotations"), where, "metadata.annotations"),
        taints=tuple(taints),
        uid=str(meta.get("uid") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
    )


def _pointer(key: str) -> str:
    """A map key as a JSON pointer segment (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def quarantine_ops(node: NodeView, reason: str, detail: str, now: float) -> list[dict[str, Any]]:
    """The one JSON patch that quarantines ``node``: taint, label and both annotations together."""
    taint = {"key": QUARANTINE_TAINT_KEY, "value": reason, "effect": QUARANTINE_TAINT_EFFECT}
    ops: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/resourceVersion", "value": node.resource_version}]
    if node.taints:
        ops.append({"op": "add", "path": "/spec/taints/-", "value": taint})
    else:
        ops.append({"op": "add", "path": "/spec/taints", "value": [taint]})
    label = {QUARANTINED_LABEL: "true"}
    if node.labels:
        ops += [{"op": "add", "path": f"/metadata/labels/{_pointer(k)}", "value": v} for k, v in label.items()]
    else:
        ops.append({"op": "add", "path": "/metadata/labels", "value": label})
    annotations = {QUARANTINE_REASON_ANNOTATION: detail, QUARANTINED_AT_ANNOTATION: format_time(now)}
    if node.annotations:
        ops += [
            {"op": "add", "path": f"/metadata/annotations/{_pointer(k)}", "value": v} for k, v in annotations.items()
        ]
        if RELEASED_AT_ANNOTATION in node.annotations:
            ops.append({"op": "remove", "path": f"/metadata/annotations/{_pointer(RELEASED_AT_ANNOTATION)}"})
    else:
        ops.append({"op": "add", "path": "/metadata/annotations", "value": annotations})
    return ops
