"""What the service knows about one pod (a :class:`PodRecord`), the phases and reasons it reports, and its
PodStatus as docs/burst-provider-api.md defines it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from contract.times import rfc3339
from daemons.burst_provider.probes import ReplicaProbes
from daemons.burst_provider.providers.base import Instance, InstanceState, Port

PENDING, RUNNING, FAILED, SUCCEEDED = "Pending", "Running", "Failed", "Succeeded"
TERMINAL = frozenset({FAILED, SUCCEEDED})
CREATING = "ProviderCreating"
CREATE_FAILED = "ProviderCreateFailed"
TIMEOUT = "ProviderTimeout"
VANISHED = "InstanceVanished"
DIED = "InstanceDied"
NO_CAPACITY = "NoCapacity"
PROBE_FAILED = "ProbeFailed"
SPEND_CEILING = "SpendCeiling"
ADDRESS_REFUSED = "AddressRefused"
#: The pod reads a Secret into its env, confidentialEnvToRentedProviders is ``refuse`` and no cluster of ours is a
#: provider: it stays home.
CONFIDENTIAL_ENV = "ConfidentialEnvRefused"
NOT_READY = "NotReadyTimeout"
#: Exit code reported for containers of an instance that vanished, died or was killed for a timeout.
KILLED_EXIT_CODE = 137
#: Exit code reported when the instance was never created.
REFUSED_EXIT_CODE = 1


def _times(**stamps: float | None) -> dict[str, str]:
    """RFC 3339 timestamps, leaving out the unknown ones (a client decoding a time must never get "")."""
    return {k: rfc3339(v) for k, v in stamps.items() if v is not None}


@dataclass
class PodRecord:
    """What the service knows about one pod (by uid). Mutated only under the service's lock."""

    namespace: str
    name: str
    uid: str
    pod: dict[str, Any]
    created_at: float
    phase: str = PENDING
    reason: str = CREATING
    message: str = "choosing a provider"
    provider: str = ""
    instance_id: str = ""
    instance_assigned_at: float | None = None
    gpu_type: str = ""
    gpu_count: int = 0
    address: str = ""
    ports: tuple[Port, ...] = ()
    start_time: float | None = None
    finished_at: float | None = None
    exit_code: int | None = None
    creating: bool = False  # the create worker is still running
    deleting: bool = False  # DELETE received; forgotten once the instance is gone
    instance_gone: bool = False  # the instance is deleted or the provider no longer knows it
    #: The pod's probes against the running instance (None until it runs and its pod is known).
    probes: ReplicaProbes | None = field(default=None, compare=False, repr=False)
    ready: bool = False  # Running and every container ready: the Ready condition and the endpoints' ``ready``
    unready_since: float | None = None  # Running and not ready since then
    not_ready_detail: str = ""  # what the failing probes said
    #: Deleted while it served: the instance keeps serving, its endpoints terminating, until then (its preStop).
    drain_until: float | None = None
    #: Rebuilt from a provider's listing after a restart: its probes resume from the readiness the cluster last
    #: recorded, and it is not listed until its pod is known (the node keeps the pod's status meanwhile).
    rebuilt: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}/{self.uid}"

    @property
    def draining(self) -> bool:
        """Deleted, and still serving through its preStop sleep (its endpoints terminating)."""
        return self.deleting and self.drain_until is not None and self.phase == RUNNING

    @property
    def holds_gpus(self) -> bool:
        """Counts against the provider's cap: an instance exists, or is being created, for this pod."""
        if not self.provider or self.instance_gone:
            return False
        return self.phase not in TERMINAL or bool(self.instance_id)

    def _container_status(self, c: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"name": c.get("name", ""), "image": c.get("image", ""), "restartCount": 0}
        if self.phase == PENDING:
            out.update(state="waiting", reason=self.reason, message=self.message)
        elif self.phase == RUNNING:
            name = str(c.get("name", ""))
            ready = self.probes is not None and self.probes.container_ready(name)
            started = self.probes is not None and self.probes.started(name)
            out.update(state="running", ready=ready, started=started, **_times(startedAt=self.start_time))
        else:
            out.update(
                state="terminated",
                reason=self.reason or ("Completed" if self.exit_code == 0 else "Error"),
                message=self.message,
                exitCode=self.exit_code if self.exit_code is not None else REFUSED_EXIT_CODE,
                **_times(startedAt=self.start_time, finishedAt=self.finished_at),
            )
        return out

    def _not_ready_message(self) -> str:
        detail = self.not_ready_detail or "waiting for the first probe"
        return f"{self.message}; not ready: {detail}"

    def status(self) -> dict[str, Any]:
        """The PodStatus of docs/burst-provider-api.md."""
        containers = (self.pod.get("spec") or {}).get("containers") or []
        return {
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "phase": self.phase,
            "reason": self.reason,
            "message": self.message if self.ready or self.phase != RUNNING else self._not_ready_message(),
            "provider": self.provider,
            "instanceId": self.instance_id,
            "gpuType": self.gpu_type,
            "address": self.address,
            "ports": [{"name": p.name, "port": p.port, "protocol": p.protocol} for p in self.ports],
            **_times(startTime=self.start_time),
            "containers": [self._container_status(c) for c in containers],
        }


class Records(dict[str, PodRecord]):
    """The service's records by pod uid, with the lookups and sweeps that read only records. The service guards it
    with its lock; nothing here calls a provider."""

    def find(self, namespace: str, name: str, uid: str | None = None) -> PodRecord | None:
        """The record of the pod by namespace and name (and uid, when given): a live one before one being deleted,
        the newest first."""
        matches = [
            r for r in self.values() if r.namespace == namespace and r.name == name and (not uid or r.uid == uid)
        ]
        if not matches:
            return None
        return max(matches, key=lambda r: (not r.deleting, r.created_at))

    def rebuild(self, provider: str, instances: Iterable[Instance], owner: str, now: float) -> list[Instance]:
        """Add a record for each live instance tagged with ``owner`` whose pod is not known (after a restart); the
        instances added."""
        added = []
        for inst in instances:
            uid = inst.tags.uid
            if inst.tags.node != owner or uid in self or inst.state is InstanceState.TERMINATED:
                continue
            self[uid] = PodRecord(
                inst.tags.namespace,
                inst.tags.pod,
                uid,
                {},
                now,
                provider=provider,
                instance_id=inst.instance_id,
                instance_assigned_at=now,
                gpu_type=inst.gpu_type,
                gpu_count=inst.gpu_count,
                message=f"instance {inst.instance_id} on {provider} is {inst.state.value}",
                rebuilt=True,
            )
            added.append(inst)
        return added

    def drop_stale(self, live_uids: set[str], now: float, older_than: float) -> list[str]:
        """Drop finished records whose pod is no longer live, whose instance is gone and which ended more than
        `older_than` seconds ago; their keys."""
        stale = []
        for uid, rec in list(self.items()):
            if uid in live_uids or rec.phase not in TERMINAL or rec.creating:
                continue
            if rec.instance_id and not rec.instance_gone:
                continue
            if rec.finished_at is not None and now - rec.finished_at > older_than:
                stale.append(rec.key)
                del self[uid]
        return stale
