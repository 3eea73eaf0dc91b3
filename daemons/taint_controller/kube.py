"""Kubernetes access for the taint controller: the virtual node's taints, Events, and Lease leader election.

Each concern sits behind a small Protocol (:class:`NodeApi`, :class:`EventSink`, :class:`LeaseApi`) so the
controller and the election logic are tested against in-memory fakes; the ``Kube*`` classes implement them on
the official ``kubernetes`` client.

Taint changes are JSON patches (RFC 6902) that first ``test`` the node's resourceVersion and then add, remove or
replace only the burst taint's own list entry: the Node's ``spec.taints`` has no merge key, so a strategic merge
patch would replace the whole list and could drop a taint someone added a moment earlier. A failed test (the
node changed since it was read) is a :class:`ConflictError`; the next tick reads again.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Protocol

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from contract.constants import CLUSTER_EVENTS_NAMESPACE
from daemons.toolkit.events import event_body
from daemons.toolkit.kube import ConflictError, KubeError, load_kube_config
from daemons.toolkit.kube import api_error as _api_error
from daemons.toolkit.lease import KubeLeaseApi, LeaderElector, LeaseApi, LeaseRecord
from daemons.toolkit.taint import Taint

#: The toolkit's names this module's callers and tests use, importable from here too.
__all__ = [
    "ConflictError",
    "KubeError",
    "KubeLeaseApi",
    "LeaderElector",
    "LeaseApi",
    "LeaseRecord",
    "Taint",
    "load_kube_config",
]

log = logging.getLogger("taint_controller.kube")

COMPONENT = "gpucluster-taint-controller"


# --- node taints ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeState:
    name: str
    uid: str
    resource_version: str
    taints: tuple[Taint, ...]

    def with_key(self, key: str) -> list[tuple[int, Taint]]:
        """(index, taint) of every taint with this key, in list order."""
        return [(i, t) for i, t in enumerate(self.taints) if t.key == key]


class NodeApi(Protocol):
    def get_node(self, name: str) -> NodeState:
        """The node's current state; KubeError when it cannot be read (a missing node is an error too)."""
        ...

    def patch_node(self, name: str, ops: list[dict[str, Any]]) -> NodeState:
        """Apply a JSON patch; ConflictError when a test op fails or the node changed."""
        ...


def _guard(node: NodeState) -> dict[str, Any]:
    return {"op": "test", "path": "/metadata/resourceVersion", "value": node.resource_version}


def add_taint_ops(node: NodeState, taint: Taint) -> list[dict[str, Any]]:
    """Append ``taint``; creates ``spec.taints`` when the node has none."""
    if node.taints:
        return [_guard(node), {"op": "add", "path": "/spec/taints/-", "value": taint.to_k8s()}]
    return [_guard(node), {"op": "add", "path": "/spec/taints", "value": [taint.to_k8s()]}]


def remove_taint_ops(node: NodeState, key: str) -> list[dict[str, Any]]:
    """Remove every taint with ``key`` (highest index first so earlier indices stay valid); [] when none."""
    found = node.with_key(key)
    if not found:
        return []
    ops: list[dict[str, Any]] = [_guard(node)]
    for i, taint in reversed(found):
        ops.append({"op": "test", "path": f"/spec/taints/{i}", "value": taint.to_k8s()})
        ops.append({"op": "remove", "path": f"/spec/taints/{i}"})
    return ops


def replace_taint_ops(node: NodeState, key: str, wanted: Taint) -> list[dict[str, Any]]:
    """Make the first ``key`` taint exactly ``wanted`` and drop further duplicates; [] when already so."""
    found = node.with_key(key)
    if not found or (len(found) == 1 and found[0][1] == wanted):
        return []
    first_index, first = found[0]
    ops: list[dict[str, Any]] = [_guard(node)]
    for i, taint in reversed(found[1:]):
        ops.append({"op": "test", "path": f"/spec/taints/{i}", "value": taint.to_k8s()})
        ops.append({"op": "remove", "path": f"/spec/taints/{i}"})
    ops.append({"op": "test", "path": f"/spec/taints/{first_index}", "value": first.to_k8s()})
    ops.append({"op": "replace", "path": f"/spec/taints/{first_index}", "value": wanted.to_k8s()})
    return ops


# --- events -----------------------------------------------------------------------------------------------------


class EventSink(Protocol):
    def emit(self, node: NodeState | None, node_name: str, event_type: str, reason: str, message: str) -> None:
        """Record a core/v1 Event on the node; failures are logged, never raised (an Event is best effort)."""
        ...


# --- the real API, on the official client -----------------------------------------------------------------------


class KubeNodeApi:
    def __init__(self, api_client: Any, timeout_s: float = 10.0) -> None:
        self._core = client.CoreV1Api(api_client)
        self._timeout = timeout_s

    @staticmethod
    def _state(node: Any) -> NodeState:
        taints = tuple(
            Taint(key=t.key, effect=t.effect, value=t.value) for t in (node.spec.taints or []) if t is not None
        )
        meta = node.metadata
        return NodeState(meta.name, meta.uid or "", meta.resource_version or "", taints)

    def get_node(self, name: str) -> NodeState:
        try:
            return self._state(self._core.read_node(name, _request_timeout=self._timeout))
        except ApiException as exc:
            raise _api_error(exc, f"read node {name}") from None
        except Exception as exc:  # urllib3 connection errors and the like
            raise KubeError(f"read node {name}: {exc}") from None

    def patch_node(self, name: str, ops: list[dict[str, Any]]) -> NodeState:
        try:
            node = self._core.patch_node(
                name, ops, _content_type="application/json-patch+json", _request_timeout=self._timeout
            )
        except ApiException as exc:
            raise _api_error(exc, f"patch node {name}") from None
        except Exception as exc:
            raise KubeError(f"patch node {name}: {exc}") from None
        return self._state(node)


class KubeEventSink:
    """core/v1 Events about the node, in namespace ``default``.

    The API server accepts an Event about a cluster-scoped object (a Node) only in ``default`` (or
    ``kube-system`` for new-style events), so this is where they must go, whatever namespace the controller
    runs in; ``kubectl describe node`` shows them.
    """

    def __init__(self, api_client: Any, identity: str, timeout_s: float = 10.0) -> None:
        self._core = client.CoreV1Api(api_client)
        self._identity = identity
        self._timeout = timeout_s

    def emit(self, node: NodeState | None, node_name: str, event_type: str, reason: str, message: str) -> None:
        involved = {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node.uid if node else None}
        body = client.CoreV1Event.model_validate(
            event_body(
                involved,
                CLUSTER_EVENTS_NAMESPACE,
                event_type=event_type,
                reason=reason,
                message=message,
                now=time.time(),
                component=COMPONENT,
                identity=self._identity,
            )
        )
        try:
            self._core.create_namespaced_event(CLUSTER_EVENTS_NAMESPACE, body, _request_timeout=self._timeout)
        except Exception as exc:
            log.warning("cannot record an event", extra={"reason": reason, "error": str(exc)[:500]})
