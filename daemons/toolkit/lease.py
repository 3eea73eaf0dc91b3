"""Leader election on a coordination.k8s.io/v1 Lease, shared by the controllers.

:class:`LeaderElector` runs the election against a :class:`LeaseApi` (tested on an in-memory fake);
:class:`KubeLeaseApi` implements it on the official ``kubernetes`` client. Its failures are the toolkit's
:class:`~daemons.toolkit.kube.KubeError` and :class:`~daemons.toolkit.kube.ConflictError`.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from contract.spec import LeaseSettings
from daemons.toolkit.kube import ConflictError, KubeError, api_error

log = logging.getLogger("toolkit.lease")


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


def utcnow() -> dt.datetime:
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
        wall_clock: Callable[[], dt.datetime] = utcnow,
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


def micro_time(value: dt.datetime | None) -> dt.datetime | None:
    """MicroTime is parsed with a fixed six-digit fraction; isoformat() drops a zero one, so never send zero."""
    if value is None:
        return None
    value = value.astimezone(dt.UTC)
    return value if value.microsecond else value.replace(microsecond=1)


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
                    "acquireTime": micro_time(record.acquire_time),
                    "renewTime": micro_time(record.renew_time),
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
            raise api_error(exc, f"read lease {namespace}/{name}") from None
        except Exception as exc:
            raise KubeError(f"read lease {namespace}/{name}: {exc}") from None

    def create(self, namespace: str, name: str, record: LeaseRecord) -> LeaseRecord:
        body = self._body(namespace, name, replace(record, resource_version=None))
        try:
            return self._record(self._coord.create_namespaced_lease(namespace, body, _request_timeout=self._timeout))
        except ApiException as exc:
            raise api_error(exc, f"create lease {namespace}/{name}") from None
        except Exception as exc:
            raise KubeError(f"create lease {namespace}/{name}: {exc}") from None

    def update(self, namespace: str, name: str, record: LeaseRecord) -> LeaseRecord:
        body = self._body(namespace, name, record)
        try:
            return self._record(
                self._coord.replace_namespaced_lease(name, namespace, body, _request_timeout=self._timeout)
            )
        except ApiException as exc:
            raise api_error(exc, f"update lease {namespace}/{name}") from None
        except Exception as exc:
            raise KubeError(f"update lease {namespace}/{name}: {exc}") from None


def elector_for(api_client: Any, settings: LeaseSettings, identity: str, is_leader_gauge: Any) -> LeaderElector:
    """The controller's LeaderElector on its settings' Lease; ``is_leader_gauge`` follows who leads (1 or 0)."""
    return LeaderElector(
        KubeLeaseApi(api_client),
        settings.namespace,
        settings.lease_name,
        identity,
        lease_duration_s=settings.lease_duration_seconds,
        renew_deadline_s=settings.renew_deadline_seconds,
        on_change=lambda leader: is_leader_gauge.set(1 if leader else 0),
    )
