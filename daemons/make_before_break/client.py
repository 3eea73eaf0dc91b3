"""The API calls of the make-before-break controller, on the toolkit's client (``daemons/toolkit/kube_api.py``:
raw JSON on the official client's connection, every failure a KubeError, a conflict a ConflictError).

:func:`read_lists` makes every list call of one cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from contract.constants import KUEUE_API
from contract.make_before_break_settings import FIELD_MANAGER, MakeBeforeBreakSettings
from daemons.make_before_break.observe import RawLists
from daemons.toolkit.kube import KubeError
from daemons.toolkit.kube_api import JSON_PATCH, MERGE_PATCH
from daemons.toolkit.kube_api import KubeApi as BaseKubeApi


class KubeApi(BaseKubeApi):
    """The toolkit's client with this controller's field manager and the calls it makes."""

    def __init__(self, api_client: Any, timeout_s: float = 10.0) -> None:
        super().__init__(api_client, timeout_s, FIELD_MANAGER)

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
