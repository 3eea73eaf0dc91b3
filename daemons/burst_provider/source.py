"""What the service needs from the source cluster (the one the virtual node belongs to).

Objects travel as plain JSON-shaped dicts with the API's camelCase keys, so the service's logic never depends on a
client library; daemons/burst_provider/kube.py implements this with the official client, tests use a fake.
"""

from __future__ import annotations

from typing import Any, Protocol

from daemons.burst_provider.pods import ReferenceResolver

JsonObject = dict[str, Any]


class SourceCluster(ReferenceResolver, Protocol):
    """Reads pods, ConfigMaps, Secrets and Services; writes pod annotations and EndpointSlices."""

    def live_pods_on_node(self, node: str) -> list[JsonObject]:
        """Pods with spec.nodeName == node that are neither terminal (Succeeded/Failed) nor being deleted."""
        ...

    def services(self, namespace: str) -> list[JsonObject]: ...

    def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str | None]) -> None:
        """Merge-patch the pod's annotations; a None value removes the key. A missing pod is not an error."""
        ...

    def endpoint_slices(self, namespace: str, labels: dict[str, str]) -> list[JsonObject]:
        """EndpointSlices in `namespace` carrying every label in `labels`."""
        ...

    def apply_endpoint_slice(self, endpoint_slice: JsonObject) -> None:
        """Create the slice, or replace the one of that namespace/name."""
        ...

    def delete_endpoint_slice(self, namespace: str, name: str) -> None:
        """Delete; a missing slice is not an error."""
        ...

    def create_event(self, event: JsonObject) -> None:
        """Create a core/v1 Event (``daemons/toolkit/events.event_body``)."""
        ...
