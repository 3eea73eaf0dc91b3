"""The stall detector's API calls, on the toolkit's client (``daemons/toolkit/kube_api.py``: raw JSON on the
official client's connection, every failure a KubeError, a conflict a ConflictError, a missing object a
NotFoundError).

Reads, per team namespace (it holds Roles there, nothing cluster-wide): training JobSets and their pods (label
``gpucluster.io/training-job``) and the ``checkpoints`` claim's annotations (the progress reports). Writes: the
restart record on a JobSet (a merge patch carrying the resourceVersion read, so a replica that read a stale JobSet
gets a conflict, not a second record), one pod's eviction (the Eviction API: a PodDisruptionBudget is honoured and
the pod is marked ``DisruptionTarget``), Events, and the suspects ConfigMap in its own namespace.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from contract.constants import CHECKPOINT_CLAIM, STALL_RESTART_ANNOTATION, TRAINING_JOB_LABEL
from contract.stall_detector_settings import FIELD_MANAGER, SUSPECTS_CONFIGMAP
from daemons.toolkit.kube_api import MERGE_PATCH, NotFoundError
from daemons.toolkit.kube_api import KubeApi as BaseKubeApi

JOBSET_API = "jobset.x-k8s.io/v1alpha2"
#: The key of the suspects ConfigMap.
SUSPECTS_KEY = "named.json"


class KubeApi(BaseKubeApi):
    def __init__(self, api_client: Any, timeout_s: float = 10.0) -> None:
        super().__init__(api_client, timeout_s, FIELD_MANAGER)

    def list_jobsets(self, namespace: str) -> list[Mapping[str, Any]]:
        path = f"/apis/{JOBSET_API}/namespaces/{quote(namespace)}/jobsets"
        return self.list_all(path, f"list jobsets in {namespace}", [("labelSelector", TRAINING_JOB_LABEL)])

    def list_pods(self, namespace: str) -> list[Mapping[str, Any]]:
        path = f"/api/v1/namespaces/{quote(namespace)}/pods"
        return self.list_all(path, f"list training pods in {namespace}", [("labelSelector", TRAINING_JOB_LABEL)])

    def claim_annotations(self, namespace: str) -> dict[str, str]:
        """The ``checkpoints`` claim's annotations; empty when the team has no such claim."""
        path = f"/api/v1/namespaces/{quote(namespace)}/persistentvolumeclaims/{CHECKPOINT_CLAIM}"
        try:
            claim = self.request("GET", path, f"get {namespace}/{CHECKPOINT_CLAIM}")
        except NotFoundError:
            return {}
        annotations = (claim.get("metadata") or {}).get("annotations") if isinstance(claim, Mapping) else None
        if not isinstance(annotations, Mapping):
            return {}
        return {str(k): v for k, v in annotations.items() if isinstance(v, str)}

    def write_restart(self, namespace: str, name: str, record: str, resource_version: str) -> None:
        body = {"metadata": {"resourceVersion": resource_version, "annotations": {STALL_RESTART_ANNOTATION: record}}}
        path = f"/apis/{JOBSET_API}/namespaces/{quote(namespace)}/jobsets/{quote(name)}"
        self.request("PATCH", path, f"annotate jobset {namespace}/{name}", body=body, content_type=MERGE_PATCH)

    def evict(self, namespace: str, pod: str) -> bool:
        """Evict the pod; False when it is gone already."""
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": namespace}}
        path = f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(pod)}/eviction"
        try:
            self.request("POST", path, f"evict pod {namespace}/{pod}", body=body)
        except NotFoundError:
            return False
        return True

    def get_suspects(self, namespace: str) -> tuple[str, str] | None:
        """The suspects ConfigMap's text and resourceVersion; None when there is none yet."""
        path = f"/api/v1/namespaces/{quote(namespace)}/configmaps/{SUSPECTS_CONFIGMAP}"
        try:
            found = self.request("GET", path, f"get configmap {namespace}/{SUSPECTS_CONFIGMAP}")
        except NotFoundError:
            return None
        data = found.get("data") if isinstance(found, Mapping) else None
        meta = found.get("metadata") if isinstance(found, Mapping) else None
        text = data.get(SUSPECTS_KEY, "") if isinstance(data, Mapping) else ""
        version = meta.get("resourceVersion", "") if isinstance(meta, Mapping) else ""
        return str(text), str(version)

    def put_suspects(self, namespace: str, text: str, resource_version: str | None) -> str:
        """Create the ConfigMap, or replace it conditional on the resourceVersion read (a conflict otherwise); the
        new resourceVersion."""
        path = f"/api/v1/namespaces/{quote(namespace)}/configmaps"
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": SUSPECTS_CONFIGMAP, "namespace": namespace},
            "data": {SUSPECTS_KEY: text},
        }
        what = f"write configmap {namespace}/{SUSPECTS_CONFIGMAP}"
        if resource_version is None:
            written = self.request("POST", path, what, body=body)
        else:
            body["metadata"]["resourceVersion"] = resource_version
            written = self.request("PUT", f"{path}/{SUSPECTS_CONFIGMAP}", what, body=body)
        meta = written.get("metadata") if isinstance(written, Mapping) else None
        return str(meta.get("resourceVersion", "")) if isinstance(meta, Mapping) else ""
