"""The quarantine controller's API calls and the one patch that quarantines a node.

:class:`KubeApi` sends raw JSON on the official client's connection (its auth, TLS and timeouts); every failure is
a :class:`~daemons.toolkit.lease.KubeError`, a conflict (HTTP 409, or a JSON patch whose ``test`` failed) a
:class:`~daemons.toolkit.lease.ConflictError`.

:func:`quarantine_ops` is ONE JSON patch (RFC 6902) of the Node: it tests the resourceVersion, then adds the taint
(an entry of ``spec.taints``, which has no merge key), the quarantined label and the reason and time annotations,
and drops an old release annotation. The API server applies a patch whole or not at all, so a kill -9 can never
leave a node with the taint but without its reason, or the other way round.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from components.constants import (
    QUARANTINE_REASON_ANNOTATION,
    QUARANTINE_TAINT_EFFECT,
    QUARANTINE_TAINT_KEY,
    QUARANTINED_AT_ANNOTATION,
    QUARANTINED_LABEL,
)
from components.quarantine_settings import FIELD_MANAGER, LEDGER_NAME, RELEASED_AT_ANNOTATION
from daemons.quarantine.decide import NodeView, Taint, format_time
from daemons.toolkit.lease import ConflictError, KubeError

APPLY = "application/apply-patch+yaml"
JSON_PATCH = "application/json-patch+json"
#: Longest API message shown in a log line or an Event.
_MAX_SHOWN = 300


class TranslationError(ValueError):
    """A Node this controller cannot read: which node and which field (never the value)."""


def _shown(text: str) -> str:
    return text if len(text) <= _MAX_SHOWN else text[:_MAX_SHOWN] + "…"


def _message(data: bytes) -> str:
    try:
        status = json.loads(data)
    except ValueError:
        return ""
    message = status.get("message") if isinstance(status, dict) else None
    return _shown(message) if isinstance(message, str) else ""


def _has_causes(data: bytes) -> bool:
    try:
        status = json.loads(data)
    except ValueError:
        return True
    details = status.get("details") if isinstance(status, dict) else None
    return bool(isinstance(details, dict) and details.get("causes"))


class NotFoundError(KubeError):
    """HTTP 404: the object does not exist."""


class KubeApi:
    """Raw JSON calls on the official client's connection; errors are KubeError."""

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
        message = _message(data or b"")
        if status == 404:
            raise NotFoundError(f"{what}: not found")
        if status == 409:
            raise ConflictError(f"{what}: conflict ({message})")
        if status == 422 and content_type == JSON_PATCH and not _has_causes(data or b""):
            raise ConflictError(f"{what}: the object changed since it was read")
        raise KubeError(f"{what}: HTTP {status}: {message}")

    def list_nodes(self) -> list[Mapping[str, Any]]:
        items: list[Mapping[str, Any]] = []
        token = ""
        for _ in range(1000):
            query = [("limit", "500"), *([("continue", token)] if token else [])]
            page = self.request("GET", "/api/v1/nodes", "list nodes", query=query)
            batch = page.get("items") if isinstance(page, dict) else None
            if not isinstance(batch, list) or not all(isinstance(i, Mapping) for i in batch):
                raise KubeError("list nodes: the reply has no list of items")
            items += batch
            token = (page.get("metadata") or {}).get("continue") or ""
            if not token:
                return items
        raise KubeError("list nodes: more than 1000 pages")

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
        query = [("fieldManager", FIELD_MANAGER), ("force", "true")]
        what = f"apply configmap {ns}/{LEDGER_NAME}"
        return dict(self.request("PATCH", path, what, query=query, body=body, content_type=APPLY))

    def create_event(self, body: dict[str, Any]) -> None:
        ns = body["metadata"]["namespace"]
        self.request("POST", f"/api/v1/namespaces/{quote(ns)}/events", "create event", body=body)


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
