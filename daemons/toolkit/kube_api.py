"""Raw JSON calls to the Kubernetes API on the official client's connection, for our controllers.

:class:`KubeApi` sends (its auth, TLS and timeouts are the client's); every failure is a
:class:`~daemons.toolkit.kube.KubeError`, a conflict (HTTP 409, or a JSON patch whose ``test`` failed) a
:class:`~daemons.toolkit.kube.ConflictError`. Server-side applies carry the controller's own field manager. What a
reply says is cut before it reaches a message (:func:`shown`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from daemons.toolkit.kube import ConflictError, KubeError

#: Longest piece of a reply a message shows.
_MAX_SHOWN = 300


def shown(text: str) -> str:
    return text if len(text) <= _MAX_SHOWN else text[:_MAX_SHOWN] + "…"


APPLY = "application/apply-patch+yaml"
JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"


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
    return shown(message) if isinstance(message, str) else ""


class NotFoundError(KubeError):
    """HTTP 404: the object does not exist."""


class KubeApi:
    """Raw JSON calls on the official client's connection (its auth, TLS and timeouts); errors are KubeError."""

    def __init__(self, api_client: Any, timeout_s: float, field_manager: str) -> None:
        self._api = api_client
        self._timeout = timeout_s
        self.field_manager = field_manager

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
            raise KubeError(f"{what}: {shown(str(exc))}") from None
        status = int(getattr(response, "status", 0) or 0)
        if 200 <= status < 300:
            try:
                return json.loads(data) if data else {}
            except ValueError:
                raise KubeError(f"{what}: the reply is not JSON") from None
        message = _status_message(data or b"")
        if status == 404:
            raise NotFoundError(f"{what}: not found")
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

    def apply(self, path: str, what: str, body: dict[str, Any], *, force: bool) -> Mapping[str, Any]:
        query = [("fieldManager", self.field_manager), *([("force", "true")] if force else [])]
        return dict(self.request("PATCH", path, what, query=query, body=body, content_type=APPLY))

    def create_event(self, body: dict[str, Any]) -> None:
        ns = body["metadata"]["namespace"]
        self.request("POST", f"/api/v1/namespaces/{quote(ns)}/events", "create event", body=body)
