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

import datetime as dt
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from kubernetes import client
from kubernetes import config as _untyped_config
from kubernetes.client.exceptions import ApiException

log = logging.getLogger("taint_controller.kube")

COMPONENT = "gpucluster-taint-controller"
#: Where Events about the (cluster-scoped) node must live; see KubeEventSink.
EVENT_NAMESPACE = "default"
#: The config loaders carry no annotations; one Any keeps strict mypy quiet at the three call sites.
_kube_config: Any = _untyped_config


class KubeError(Exception):
    """An API call failed (unreachable, forbidden, server error)."""


class ConflictError(KubeError):
    """Optimistic concurrency lost: the object changed (409, or a failed JSON-patch test)."""


# --- node taints ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Taint:
    key: str
    effect: str
    value: str | None = None

    def to_k8s(self) -> dict[str, str]:
        out = {"key": self.key, "effect": self.effect}
        if self.value is not None:
            out["value"] = self.value
        return out


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


# --- leases -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LeaseRecord:
    holder: str
    lease_duration_s: int
    acquire_time: dt.datetime | None
    renew_time: dt.datetime | None
    transitions: int
    resource_version: str | None = None


class LeaseApi(Protocol):
    def get(self, namespace: str, name: str) -> LeaseRecord | None:
        """The Lease, or None when it does not exist; KubeError otherwise."""
        ...

    def create(self, namespace: str, name: str, record: LeaseRecord) -> LeaseRecord:
        """Create it; ConflictError when it already exists."""
        ...

    def update(self, namespace: str, name: str, record: LeaseRecord) -> LeaseRecord:
        """Replace it, conditional on ``record.resource_version``; ConflictError when that is stale."""
        ...


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class LeaderElector:
    """Leader election on a coordination.k8s.io/v1 Lease, the way client-go does it.

    A candidate never trusts another holder's clock: it notes on its own monotonic clock when it last saw the
    record change and treats the lease as expired ``leaseDuration`` after that. The leader renews every
    ``retryPeriod``; if it cannot renew for ``renewDeadline`` (shorter than leaseDuration) it stops being leader
    before anyone else may take over. Writes are conditional on resourceVersion, so of two candidates racing
    for an expired lease exactly one wins; the other gets a 409 and stays standby.
    """

    def __init__(
        self,
        api: LeaseApi,
        namespace: str,
        name: str,
        identity: str,
        *,
        lease_duration_s: float,
        renew_deadline_s: float,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], dt.datetime] = _utcnow,
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        if not identity:
            raise ValueError("the leader election identity must not be empty")
        self.api = api
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration_s = lease_duration_s
        self.renew_deadline_s = renew_deadline_s
        self._clock = clock
        self._wall = wall_clock
        self._on_change = on_change
        self._lock = threading.Lock()
        self._observed: LeaseRecord | None = None
        self._observed_at = 0.0
        self._last_renew: float | None = None
        self._was_leader = False

    def is_leader(self) -> bool:
        """True while our last successful renewal is younger than renewDeadline."""
        with self._lock:
            return self._last_renew is not None and self._clock() - self._last_renew < self.renew_deadline_s

    @property
    def holder(self) -> str | None:
        """The holder seen last (None before the first read)."""
        with self._lock:
            return self._observed.holder if self._observed else None

    def _set_leader(self, renewed: bool) -> None:
        with self._lock:
            if renewed:
                self._last_renew = self._clock()
            elif not renewed and self._last_renew is not None:
                self._last_renew = None
        self._notify()

    def _notify(self) -> None:
        now_leader = self.is_leader()
        if now_leader != self._was_leader:
            self._was_leader = now_leader
            log.info(
                "leadership changed",
                extra={"leader": now_leader, "identity": self.identity, "lease": f"{self.namespace}/{self.name}"},
            )
            if self._on_change is not None:
                self._on_change(now_leader)

    def _observe(self, record: LeaseRecord) -> None:
        with self._lock:
            if self._observed is None or (
                record.holder,
                record.renew_time,
                record.resource_version,
            ) != (self._observed.holder, self._observed.renew_time, self._observed.resource_version):
                self._observed_at = self._clock()
            self._observed = record

    def _expired(self, record: LeaseRecord) -> bool:
        with self._lock:
            duration = record.lease_duration_s or self.lease_duration_s
            return self._clock() >= self._observed_at + duration

    def try_acquire_or_renew(self) -> bool:
        """One election round; returns whether we lead afterwards."""
        now = self._wall()
        try:
            current = self.api.get(self.namespace, self.name)
        except KubeError as exc:
            log.warning("cannot read the lease", extra={"error": str(exc), "lease": f"{self.namespace}/{self.name}"})
            self._notify()  # leadership lapses by itself once renewDeadline passes
            return self.is_leader()
        duration = max(1, round(self.lease_duration_s))
        if current is None:
            record = LeaseRecord(self.identity, duration, now, now, 0)
            try:
                created = self.api.create(self.namespace, self.name, record)
            except ConflictError:
                self._set_leader(False)
                return False
            except KubeError as exc:
                log.warning("cannot create the lease", extra={"error": str(exc)})
                self._notify()
                return self.is_leader()
            self._observe(created)
            self._set_leader(True)
            return True

        self._observe(current)
        ours = current.holder == self.identity
        if current.holder and not ours and not self._expired(current):
            self._set_leader(False)
            return False
        wanted = replace(current, holder=self.identity, lease_duration_s=duration, renew_time=now)
        if not ours:
            wanted = replace(wanted, acquire_time=now, transitions=current.transitions + 1)
        try:
            updated = self.api.update(self.namespace, self.name, wanted)
        except ConflictError:
            self._set_leader(False)
            return False
        except KubeError as exc:
            log.warning("cannot renew the lease", extra={"error": str(exc)})
            self._notify()
            return self.is_leader()
        self._observe(updated)
        self._set_leader(True)
        return True

    def release(self) -> bool:
        """Give the lease up at once (holderIdentity empty) so a standby need not wait for it to expire."""
        if not self.is_leader():
            return False
        with self._lock:
            observed = self._observed
        self._set_leader(False)
        if observed is None or observed.holder != self.identity:
            return False
        now = self._wall()
        try:
            self.api.update(self.namespace, self.name, replace(observed, holder="", lease_duration_s=1, renew_time=now))
        except KubeError as exc:
            log.warning("cannot release the lease", extra={"error": str(exc)})
            return False
        log.info("released the lease", extra={"lease": f"{self.namespace}/{self.name}"})
        return True

    def run(self, stop: threading.Event, retry_period_s: float) -> None:
        """Election rounds every retryPeriod until ``stop`` is set."""
        while not stop.is_set():
            try:
                self.try_acquire_or_renew()
            except Exception:  # a bug here must not end the election thread silently
                log.exception("leader election round failed")
            stop.wait(retry_period_s)


# --- the real API, on the official client -----------------------------------------------------------------------


def _micro_time(value: dt.datetime | None) -> dt.datetime | None:
    """MicroTime is parsed with a fixed six-digit fraction; isoformat() drops a zero one, so never send zero."""
    if value is None:
        return None
    value = value.astimezone(dt.UTC)
    return value if value.microsecond else value.replace(microsecond=1)


def _has_causes(body: object) -> bool:
    """Whether a Status body names the fields that failed validation."""
    try:
        status = json.loads(body) if isinstance(body, str | bytes) else {}
    except ValueError:
        return True
    details = status.get("details") if isinstance(status, dict) else None
    return bool(isinstance(details, dict) and details.get("causes"))


def _api_error(exc: Exception, what: str) -> KubeError:
    status = getattr(exc, "status", None)
    reason = getattr(exc, "reason", None) or str(exc)
    if status == 409:
        return ConflictError(f"{what}: conflict ({reason})")
    if status == 422 and not _has_causes(getattr(exc, "body", None)):
        # A JSON patch that cannot be applied (a failed test op) is 422 Invalid without field causes;
        # a real validation error lists its causes and stays a KubeError.
        return ConflictError(f"{what}: the object changed since it was read")
    return KubeError(f"{what}: HTTP {status}: {reason}" if status else f"{what}: {reason}")


def load_kube_config(kubeconfig: str | None) -> Any:
    """An ApiClient from ``kubeconfig``, else the in-cluster service account, else ~/.kube/config."""
    if kubeconfig:
        return _kube_config.new_client_from_config(config_file=kubeconfig)
    try:
        _kube_config.load_incluster_config()
        return client.ApiClient()
    except _kube_config.ConfigException:
        return _kube_config.new_client_from_config()


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
        now = _micro_time(_utcnow())
        body = client.CoreV1Event.model_validate(
            {
                "metadata": {"generateName": f"{node_name}.", "namespace": EVENT_NAMESPACE},
                "involvedObject": {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": node_name,
                    "uid": node.uid if node else None,
                },
                "type": event_type,
                "reason": reason,
                "message": message[:1024],
                "source": {"component": COMPONENT},
                "reportingComponent": COMPONENT,
                "reportingInstance": self._identity[:128],
                "firstTimestamp": now,
                "lastTimestamp": now,
                "count": 1,
            }
        )
        try:
            self._core.create_namespaced_event(EVENT_NAMESPACE, body, _request_timeout=self._timeout)
        except Exception as exc:
            log.warning("cannot record an event", extra={"reason": reason, "error": str(exc)[:500]})


class KubeLeaseApi:
    def __init__(self, api_client: Any, timeout_s: float = 5.0) -> None:
        self._coord = client.CoordinationV1Api(api_client)
        self._timeout = timeout_s

    @staticmethod
    def _record(lease: Any) -> LeaseRecord:
        spec = lease.spec
        return LeaseRecord(
            holder=spec.holder_identity or "",
            lease_duration_s=spec.lease_duration_seconds or 0,
            acquire_time=spec.acquire_time,
            renew_time=spec.renew_time,
            transitions=spec.lease_transitions or 0,
            resource_version=lease.metadata.resource_version,
        )

    @staticmethod
    def _body(namespace: str, name: str, record: LeaseRecord) -> Any:
        metadata: dict[str, Any] = {"name": name, "namespace": namespace}
        if record.resource_version:
            metadata["resourceVersion"] = record.resource_version
        return client.V1Lease.model_validate(
            {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": metadata,
                "spec": {
                    "holderIdentity": record.holder,
                    "leaseDurationSeconds": record.lease_duration_s,
                    "acquireTime": _micro_time(record.acquire_time),
                    "renewTime": _micro_time(record.renew_time),
                    "leaseTransitions": record.transitions,
                },
            }
        )

    def get(self, namespace: str, name: str) -> LeaseRecord | None:
        try:
            return self._record(self._coord.read_namespaced_lease(name, namespace, _request_timeout=self._timeout))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise _api_error(exc, f"read lease {namespace}/{name}") from None
        except Exception as exc:
            raise KubeError(f"read lease {namespace}/{name}: {exc}") from None

    def create(self, namespace: str, name: str, record: LeaseRecord) -> LeaseRecord:
        body = self._body(namespace, name, replace(record, resource_version=None))
        try:
            return self._record(self._coord.create_namespaced_lease(namespace, body, _request_timeout=self._timeout))
        except ApiException as exc:
            raise _api_error(exc, f"create lease {namespace}/{name}") from None
        except Exception as exc:
            raise KubeError(f"create lease {namespace}/{name}: {exc}") from None

    def update(self, namespace: str, name: str, record: LeaseRecord) -> LeaseRecord:
        body = self._body(namespace, name, record)
        try:
            return self._record(
                self._coord.replace_namespaced_lease(name, namespace, body, _request_timeout=self._timeout)
            )
        except ApiException as exc:
            raise _api_error(exc, f"update lease {namespace}/{name}") from None
        except Exception as exc:
            raise KubeError(f"update lease {namespace}/{name}: {exc}") from None
