"""The API calls of the make-before-break controller: raw JSON on the official client's connection.

:class:`KubeApi` sends (its auth, TLS and timeouts are the client's); every failure is a
:class:`~daemons.toolkit.lease.KubeError`, a conflict (HTTP 409, or a JSON patch whose ``test`` failed) a
:class:`~daemons.toolkit.lease.ConflictError`. :func:`read_lists` makes every list call of one cycle.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from components.make_before_break_settings import FIELD_MANAGER, MakeBeforeBreakSettings
from daemons.make_before_break.fields import shown
from daemons.make_before_break.model import KUEUE_API
from daemons.make_before_break.observe import RawLists
from daemons.toolkit.lease import ConflictError, KubeError

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
            raise KubeError(f"{what}: {shown(str(exc))}") from None
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
