"""The checkpoint verifier's API calls, on the toolkit's client (``daemons/toolkit/kube_api.py``: raw JSON on the
official client's connection, every failure a KubeError, a conflict a ConflictError, a missing object a
NotFoundError).

Reads, per team namespace (it holds Roles there, nothing cluster-wide): the ``checkpoints`` claim, its check and
drill Jobs and their pods (label ``checkpoint.gpucluster.io/check-of``), the ``checkpoint-resume`` ConfigMap.
Writes: a check or drill Job (create: a second replica's create of the same name is refused as already there; delete:
one Kueue never admitted within its deadline),
its record on the claim (a merge patch carrying the resourceVersion read, so a replica that read a stale claim gets a
conflict, not a lost record), the jobs' entries in the ConfigMap (a merge patch of those keys), and Events.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from contract.checkpoint_verifier_settings import FIELD_MANAGER
from contract.constants import CHECKPOINT_CLAIM, RESUME_CONFIGMAP
from contract.controllers.checkpoint_verifier import CHECK_OF_LABEL
from daemons.toolkit.kube_api import MERGE_PATCH, NotFoundError
from daemons.toolkit.kube_api import KubeApi as BaseKubeApi


class KubeApi(BaseKubeApi):
    def __init__(self, api_client: Any, timeout_s: float = 10.0) -> None:
        super().__init__(api_client, timeout_s, FIELD_MANAGER)

    def _get(self, namespace: str, resource: str, name: str) -> Mapping[str, Any] | None:
        path = f"/api/v1/namespaces/{quote(namespace)}/{resource}/{name}"
        try:
            found = self.request("GET", path, f"get {namespace}/{name}")
        except NotFoundError:
            return None
        return found if isinstance(found, Mapping) else None

    def claim(self, namespace: str) -> Mapping[str, Any] | None:
        """The team's ``checkpoints`` claim; None when it has none."""
        return self._get(namespace, "persistentvolumeclaims", CHECKPOINT_CLAIM)

    def list_checks(self, namespace: str) -> list[Mapping[str, Any]]:
        path = f"/apis/batch/v1/namespaces/{quote(namespace)}/jobs"
        return self.list_all(path, f"list check jobs in {namespace}", [("labelSelector", CHECK_OF_LABEL)])

    def list_check_pods(self, namespace: str) -> list[Mapping[str, Any]]:
        path = f"/api/v1/namespaces/{quote(namespace)}/pods"
        return self.list_all(path, f"list check pods in {namespace}", [("labelSelector", CHECK_OF_LABEL)])

    def create_check(self, body: dict[str, Any]) -> None:
        ns = body["metadata"]["namespace"]
        path = f"/apis/batch/v1/namespaces/{quote(ns)}/jobs"
        self.request("POST", path, f"create check job {ns}/{body['metadata']['name']}", body=body)

    def write_record(self, namespace: str, annotation: str, value: str, resource_version: str) -> None:
        body = {"metadata": {"resourceVersion": resource_version, "annotations": {annotation: value}}}
        path = f"/api/v1/namespaces/{quote(namespace)}/persistentvolumeclaims/{CHECKPOINT_CLAIM}"
        what = f"record on {namespace}/{CHECKPOINT_CLAIM}"
        self.request("PATCH", path, what, body=body, content_type=MERGE_PATCH)

    def resume_configmap(self, namespace: str) -> Mapping[str, Any] | None:
        """The team's ``checkpoint-resume`` ConfigMap; None when it has none."""
        return self._get(namespace, "configmaps", RESUME_CONFIGMAP)

    def write_resume(self, namespace: str, data: Mapping[str, str | None]) -> None:
        """Merge ``data`` into the ConfigMap's (None removes a key)."""
        path = f"/api/v1/namespaces/{quote(namespace)}/configmaps/{RESUME_CONFIGMAP}"
        what = f"entries of {namespace}/{RESUME_CONFIGMAP}"
        self.request("PATCH", path, what, body={"data": dict(data)}, content_type=MERGE_PATCH)

    def delete_job(self, namespace: str, name: str) -> None:
        """Delete one of its Jobs and its pods (background propagation); one already gone is no error."""
        path = f"/apis/batch/v1/namespaces/{quote(namespace)}/jobs/{quote(name)}"
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
        try:
            self.request("DELETE", path, f"delete job {namespace}/{name}", body=body)
        except NotFoundError:
            return
