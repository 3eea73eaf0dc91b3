"""The API calls of the interruption accounting daemon, on the toolkit's client (``daemons/toolkit/kube_api.py``).

Reads, all namespaces, page by page: training JobSets (label ``gpucluster.io/training-job``), their pods (same
label), Nodes, Kueue Workloads, Events about JobSets, the teams' ``checkpoints`` claims. Writes: the ledger
annotation (a merge patch carrying the resourceVersion read, so a stale writer gets a conflict and not a lost
update), ``spec.active: false`` on a Workload, the reliability ConfigMap, Events.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from contract.constants import CHECKPOINT_CLAIM, KUEUE_API, TRAINING_JOB_LABEL
from contract.interruptions_settings import FIELD_MANAGER
from daemons.interruptions.model import JOBSET_API, LEDGER_ANNOTATION
from daemons.toolkit.kube_api import MERGE_PATCH, NotFoundError
from daemons.toolkit.kube_api import KubeApi as BaseKubeApi


class KubeApi(BaseKubeApi):
    def __init__(self, api_client: Any, timeout_s: float = 10.0) -> None:
        super().__init__(api_client, timeout_s, FIELD_MANAGER)

    def list_jobsets(self) -> list[Mapping[str, Any]]:
        return self.list_all(f"/apis/{JOBSET_API}/jobsets", "list jobsets", [("labelSelector", TRAINING_JOB_LABEL)])

    def list_pods(self) -> list[Mapping[str, Any]]:
        return self.list_all("/api/v1/pods", "list training pods", [("labelSelector", TRAINING_JOB_LABEL)])

    def list_nodes(self) -> list[Mapping[str, Any]]:
        return self.list_all("/api/v1/nodes", "list nodes")

    def list_workloads(self) -> list[Mapping[str, Any]]:
        return self.list_all(f"/apis/{KUEUE_API}/workloads", "list workloads")

    def list_jobset_events(self) -> list[Mapping[str, Any]]:
        return self.list_all("/api/v1/events", "list jobset events", [("fieldSelector", "involvedObject.kind=JobSet")])

    def list_checkpoint_claims(self) -> list[Mapping[str, Any]]:
        query = [("fieldSelector", f"metadata.name={CHECKPOINT_CLAIM}")]
        return self.list_all("/api/v1/persistentvolumeclaims", "list checkpoint claims", query)

    def write_record(self, namespace: str, name: str, text: str, resource_version: str) -> None:
        body = {"metadata": {"resourceVersion": resource_version, "annotations": {LEDGER_ANNOTATION: text}}}
        path = f"/apis/{JOBSET_API}/namespaces/{quote(namespace)}/jobsets/{quote(name)}"
        self.request("PATCH", path, f"annotate jobset {namespace}/{name}", body=body, content_type=MERGE_PATCH)

    def deactivate_workload(self, namespace: str, name: str) -> None:
        path = f"/apis/{KUEUE_API}/namespaces/{quote(namespace)}/workloads/{quote(name)}"
        body = {"spec": {"active": False}}
        self.request("PATCH", path, f"deactivate workload {namespace}/{name}", body=body, content_type=MERGE_PATCH)

    def put_config_map(self, namespace: str, name: str, data: Mapping[str, str]) -> None:
        """Create the ConfigMap, or replace its data (conditional on the resourceVersion just read)."""
        path = f"/api/v1/namespaces/{quote(namespace)}/configmaps"
        what = f"write configmap {namespace}/{name}"
        try:
            found = self.request("GET", f"{path}/{quote(name)}", what)
        except NotFoundError:
            body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": dict(data)}
            self.request("POST", path, what, body=body)
            return
        found = json.loads(json.dumps(found))
        found["data"] = dict(data)
        self.request("PUT", f"{path}/{quote(name)}", what, body=found)
