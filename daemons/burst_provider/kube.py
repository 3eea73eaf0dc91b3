"""SourceCluster on the official Kubernetes client (in-cluster service account, or a kubeconfig file)."""

from __future__ import annotations

import base64
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from daemons.burst_provider.source import JsonObject

_NOT_FOUND = 404
_TERMINAL = ("Succeeded", "Failed")
#: (connect, read) seconds for every call: without one, a connection the API server never answers would stop the
#: reconcile loop for good (no annotation, no EndpointSlice, no orphan deletion) while the pods keep running.
REQUEST_TIMEOUT = (5.0, 30.0)


class KubeSourceCluster:
    """Reads and writes the source cluster with the official client; objects come back as camelCase dicts."""

    def __init__(self, kubeconfig: str | None = None, request_timeout: tuple[float, float] = REQUEST_TIMEOUT) -> None:
        # The client's own annotations are partial; its objects are handled as Any and turned into dicts at once.
        self._timeout = request_timeout
        cfg: Any = config
        api_client: Any = cfg.new_client_from_config(config_file=kubeconfig) if kubeconfig else self._in_cluster(cfg)
        self._api: Any = api_client
        self._core: Any = client.CoreV1Api(api_client)
        self._discovery: Any = client.DiscoveryV1Api(api_client)

    @staticmethod
    def _in_cluster(cfg: Any) -> Any:
        cfg.load_incluster_config()
        return client.ApiClient()

    def _json(self, obj: Any) -> JsonObject:
        out: JsonObject = self._api.sanitize_for_serialization(obj)
        return out

    def live_pods_on_node(self, node: str) -> list[JsonObject]:
        pods = self._core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={node}", _request_timeout=self._timeout
        )
        out = []
        for pod in pods.items:
            if pod.metadata.deletion_timestamp is not None:
                continue
            if pod.status is not None and pod.status.phase in _TERMINAL:
                continue
            out.append(self._json(pod))
        return out

    def config_map(self, namespace: str, name: str) -> dict[str, str] | None:
        try:
            cm = self._core.read_namespaced_config_map(name, namespace, _request_timeout=self._timeout)
        except ApiException as exc:
            if exc.status == _NOT_FOUND:
                return None
            raise
        return dict(cm.data or {})

    def secret(self, namespace: str, name: str) -> dict[str, str] | None:
        try:
            s = self._core.read_namespaced_secret(name, namespace, _request_timeout=self._timeout)
        except ApiException as exc:
            if exc.status == _NOT_FOUND:
                return None
            raise
        return {k: base64.b64decode(v).decode("utf-8", "replace") for k, v in (s.data or {}).items()}

    def services(self, namespace: str) -> list[JsonObject]:
        return [
            self._json(s) for s in self._core.list_namespaced_service(namespace, _request_timeout=self._timeout).items
        ]

    def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str | None]) -> None:
        try:
            self._core.patch_namespaced_pod(
                name, namespace, {"metadata": {"annotations": annotations}}, _request_timeout=self._timeout
            )
        except ApiException as exc:
            if exc.status != _NOT_FOUND:
                raise

    def create_event(self, event: JsonObject) -> None:
        self._core.create_namespaced_event(event["metadata"]["namespace"], event, _request_timeout=self._timeout)

    def endpoint_slices(self, namespace: str, labels: dict[str, str]) -> list[JsonObject]:
        selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        items = self._discovery.list_namespaced_endpoint_slice(
            namespace, label_selector=selector, _request_timeout=self._timeout
        ).items
        return [self._json(s) for s in items]

    def apply_endpoint_slice(self, endpoint_slice: JsonObject) -> None:
        meta = endpoint_slice["metadata"]
        ns, name = meta["namespace"], meta["name"]
        try:
            current = self._discovery.read_namespaced_endpoint_slice(name, ns, _request_timeout=self._timeout)
        except ApiException as exc:
            if exc.status != _NOT_FOUND:
                raise
            self._discovery.create_namespaced_endpoint_slice(ns, endpoint_slice, _request_timeout=self._timeout)
            return
        body = dict(endpoint_slice)
        body["metadata"] = {**meta, "resourceVersion": current.metadata.resource_version}
        self._discovery.replace_namespaced_endpoint_slice(name, ns, body, _request_timeout=self._timeout)

    def delete_endpoint_slice(self, namespace: str, name: str) -> None:
        try:
            self._discovery.delete_namespaced_endpoint_slice(name, namespace, _request_timeout=self._timeout)
        except ApiException as exc:
            if exc.status != _NOT_FOUND:
                raise
