"""The API calls of the quota controller, on the toolkit's client (``daemons/toolkit/kube_api.py``).

Reads: every Node (a list, page by page) and each of the stack's ClusterQueues by name (a queue not there is
None). Writes: a server-side apply of one ClusterQueue's ``spec.resourceGroups`` with the controller's field manager,
forced (the first apply takes the field from Pulumi, which created the queue and then leaves the field alone), and
Events.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from contract.constants import KUEUE_API
from contract.quota_controller_settings import FIELD_MANAGER
from daemons.toolkit.kube_api import KubeApi as BaseKubeApi
from daemons.toolkit.kube_api import NotFoundError


class KubeApi(BaseKubeApi):
    def __init__(self, api_client: Any, timeout_s: float = 5.0) -> None:
        super().__init__(api_client, timeout_s, FIELD_MANAGER)

    def list_nodes(self) -> list[Mapping[str, Any]]:
        return self.list_all("/api/v1/nodes", "list nodes")

    def get_cluster_queue(self, name: str) -> Mapping[str, Any] | None:
        try:
            return dict(
                self.request("GET", f"/apis/{KUEUE_API}/clusterqueues/{quote(name)}", f"read clusterqueue {name}")
            )
        except NotFoundError:
            return None

    def apply_resource_groups(self, name: str, groups: list[dict[str, object]]) -> Mapping[str, Any]:
        body = {
            "apiVersion": KUEUE_API,
            "kind": "ClusterQueue",
            "metadata": {"name": name},
            "spec": {"resourceGroups": groups},
        }
        path = f"/apis/{KUEUE_API}/clusterqueues/{quote(name)}"
        return self.apply(path, f"apply clusterqueue {name} resourceGroups", body, force=True)
