"""The per-pod state machine: create in the background, watch until running, report every failure as Failed.

A POST registers the pod and returns at once; a worker translates the pod, chooses a provider and creates the
instance. :meth:`BurstService.poll_once` (called every few seconds) moves pods along from what the providers report.
Any failure is final for that pod: no retry on another provider, because the ReplicaSet's replacement pod is placed
afresh (with the failure now counted against the provider that failed).

Phases: Pending/ProviderCreating -> Running -> (deleted) | Failed/<reason> | Succeeded (containers exited 0).

Running is not serving: a Running pod is Ready only once its own probes pass against the instance's address
(:meth:`BurstService.probe_once`, the kubelet's rules in ``probes.py``), and a liveness or startup probe that fails,
or a replica not ready for ``notReadyTimeout``, fails the pod like a dead instance.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from contract.burst_settings import BurstSettings
from daemons.burst_provider import addresses, readiness, spill
from daemons.burst_provider.metrics import Metrics
from daemons.burst_provider.money import Ledger
from daemons.burst_provider.pods import (
    PodTranslationError,
    ReferenceResolver,
    pod_identity,
    prestop_sleep_seconds,
    translate_pod,
)
from daemons.burst_provider.prober import run_probe
from daemons.burst_provider.probes import Probe, ProbeSpecError
from daemons.burst_provider.providers.base import (
    Instance,
    InstanceSpec,
    InstanceState,
    Provider,
)
from daemons.burst_provider.record import (
    ADDRESS_REFUSED,
    CONFIDENTIAL_ENV,
    CREATE_FAILED,
    DIED,
    FAILED,
    KILLED_EXIT_CODE,
    NO_CAPACITY,
    NOT_READY,
    PENDING,
    PROBE_FAILED,
    REFUSED_EXIT_CODE,
    RUNNING,
    SPEND_CEILING,
    SUCCEEDED,
    TERMINAL,
    TIMEOUT,
    VANISHED,
    PodRecord,
    Records,
)
from daemons.burst_provider.selection import FailureTracker

log = logging.getLogger("burst_provider.service")

Spawn = Callable[[Callable[[], None], str], None]
#: Runs one probe: (address, published port, probe) -> (passed, what happened). ``prober.run_probe`` by default.
ProbeRunner = Callable[[str, int, Probe], tuple[bool, str]]


def spawn_thread(target: Callable[[], None], name: str) -> None:
    """Run `target` on a daemon thread: the default way the service does background work."""
    threading.Thread(target=target, name=name, daemon=True).start()


#: Records a Kubernetes Event about a record's pod: (record, type, reason, message).
EventSink = Callable[[PodRecord, str, str, str], None]


class BurstService:
    """Owns the pod records and drives them; thread-safe. Background work goes through `spawn` (tests pass a
    synchronous or queued one), time through `clock` (unix seconds)."""

    def __init__(
        self,
        settings: BurstSettings,
        providers: Mapping[str, Provider],
        resolver: ReferenceResolver,
        *,
        clock: Callable[[], float] = time.time,
        spawn: Spawn = spawn_thread,
        metrics: Metrics | None = None,
        tracker: FailureTracker | None = None,
        prober: ProbeRunner = run_probe,
        address_resolver: addresses.Resolver = addresses.system_resolver,
    ) -> None:
        self.settings = settings
        self.node = settings.virtual_node.node_name
        #: What this node's instances are tagged with: the cluster's name and the node's (``instance_owner``).
        self.owner = settings.virtual_node.instance_owner
        self.providers = dict(providers)
        self.resolver = resolver
        self.clock = clock
        self.spawn = spawn
        self.metrics = metrics or Metrics()
        self.tracker = tracker or FailureTracker(settings.virtual_node.failure_window_seconds, clock)
        self.prober = prober
        #: Resolves a host name a provider reports (``addresses.check``); the system's resolver by default.
        self.address_resolver = address_resolver
        self.on_change: Callable[[], None] = lambda: None
        self.on_event: EventSink = lambda *_: None
        self.ledger = Ledger(settings, self.metrics)
        self._records = Records()
        self._lock = threading.RLock()

    # ------------------------------------------------------------------------------------------------
    # API calls
    # ------------------------------------------------------------------------------------------------

    def create_pod(self, pod: dict[str, Any]) -> dict[str, Any]:
        """Register the pod and start creating it; a known uid returns its current status (idempotent)."""
        namespace, name, uid = pod_identity(pod)
        with self._lock:
            rec = self._records.get(uid)
            if rec is not None:
                if not rec.pod:  # rebuilt from a listing after a restart: now we know its containers
                    rec.pod = dict(pod)
                    self._start_probes(rec)
                return rec.status()
            rec = PodRecord(namespace, name, uid, dict(pod), self.clock(), creating=True)
            self._records[uid] = rec
            status = rec.status()
        log.info("pod accepted", extra={"pod": rec.key})
        self.spawn(lambda: self._create(uid), f"create-{namespace}-{name}")
        return status

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            rec = self._records.find(namespace, name)
            return rec.status() if rec else None

    def list_pods(self) -> list[dict[str, Any]]:
        """Every record's status, but a rebuilt one's whose pod is not known yet: with no containers to report, its
        status would take the pod's readiness away; unlisted, the node keeps what it showed and posts the pod again."""
        with self._lock:
            records = sorted(self._records.values(), key=lambda r: r.key)
            return [r.status() for r in records if r.pod or not r.rebuilt]

    def delete_pod(self, namespace: str, name: str, uid: str | None = None) -> float | None:
        """Start deleting the pod's instance; None when the pod is unknown, else the seconds it drains first.

        A Running pod with a preStop sleep keeps its instance, serving, for that long (its endpoints terminating, so
        new traffic goes elsewhere while what is in flight finishes), as the kubelet runs the hook before it stops
        the container; without one the instance is deleted at once.
        """
        with self._lock:
            rec = self._records.find(namespace, name, uid)
            if rec is None:
                return None
            already = rec.deleting
            rec.deleting = True
            creating = rec.creating
            uid_ = rec.uid
            drain = 0.0
            if not already and not creating and rec.phase == RUNNING and rec.pod:
                try:
                    drain = prestop_sleep_seconds(rec.pod)
                except PodTranslationError:  # refused at translation; a record rebuilt from an older service
                    drain = 0.0
                if drain > 0:
                    rec.drain_until = self.clock() + drain
            elif already and rec.drain_until is not None:
                drain = max(0.0, rec.drain_until - self.clock())
        if not already and not creating and drain == 0:  # a running create worker deletes the instance itself
            self.spawn(lambda: self._delete(uid_), f"delete-{namespace}-{name}")
        log.info("pod deletion requested", extra={"pod": f"{namespace}/{name}/{uid_}", "drain_seconds": drain})
        self.on_change()
        return drain

    def logs(self, namespace: str, name: str, container: str, tail: int | None) -> str | None:
        """The container's logs from its provider; None when the pod is unknown."""
        with self._lock:
            rec = self._records.find(namespace, name)
            if rec is None:
                return None
            provider, instance_id = rec.provider, rec.instance_id
            message = rec.message
        if not instance_id or provider not in self.providers:
            return f"no instance for this pod ({message})\n"
        try:
            return self.providers[provider].logs(instance_id, container, tail)
        except Exception as exc:
            self.metrics.provider_errors.labels(provider, "logs").inc()
            return f"logs unavailable: {exc}\n"

    # ------------------------------------------------------------------------------------------------
    # Views used by reconciliation and endpoints
    # ------------------------------------------------------------------------------------------------

    def records(self) -> list[PodRecord]:
        """Copies of every record (safe to read without the lock)."""
        with self._lock:
            return [replace(r, pod=r.pod) for r in self._records.values()]

    def _address_ranges(self, provider: str) -> list[str]:
        return next((list(p.address_ranges) for p in self.settings.providers if p.name == provider), [])

    def price_per_hour(self, provider: str, gpu_type: str, gpu_count: int) -> float:
        """What ``gpu_count`` GPUs of ``gpu_type`` cost per hour at ``provider``'s configured price (0 for none)."""
        return self.ledger.price_per_hour(provider, gpu_type, gpu_count)

    def spend_rate(self) -> dict[str, float]:
        """USD per hour of everything rented now (instances that exist or are being created), by provider."""
        with self._lock:
            return self.ledger.spend_rate(self._records.values())

    def account(self) -> None:
        """Add what was rented since the last call to the GPU-second and spend counters; set the rate gauges."""
        with self._lock:
            self.ledger.account(self._records.values(), self.clock())

    def used_gpus(self) -> dict[str, int]:
        with self._lock:
            return self.ledger.used_gpus(self._records.values())

    # ------------------------------------------------------------------------------------------------
    # Creation
    # ------------------------------------------------------------------------------------------------

    def _create(self, uid: str) -> None:
        """The create worker of one pod. Never raises: every outcome is a state of the record."""
        try:
            self._create_steps(uid)
        except Exception as exc:  # a bug or an unexpected provider exception: the pod still must not hang
            log.exception("create worker failed", extra={"uid": uid})
            with self._lock:
                rec = self._records.get(uid)
                if rec is not None:
                    rec.creating = False
                    self._fail(rec, CREATE_FAILED, f"internal error: {exc}", REFUSED_EXIT_CODE)

    def _create_steps(self, uid: str) -> None:
        with self._lock:
            rec = self._records.get(uid)
            if rec is None:
                return
            pod = rec.pod
        if rec.namespace not in self.settings.virtual_node.inference_namespaces:
            self._refuse(rec, CREATE_FAILED, f"namespace {rec.namespace} is not in inferenceNamespaces")
            return
        try:
            spec = translate_pod(pod, self.owner, self.settings, self.resolver)
        except PodTranslationError as exc:
            self._refuse(rec, CREATE_FAILED, str(exc))
            return
        kept_home = spill.kept_home(self.settings, pod)
        if kept_home is not None and all(p.name in kept_home for p in self.settings.providers):
            self._refuse(rec, CONFIDENTIAL_ENV, kept_home[self.settings.providers[0].name], event=True)
            return
        offers = spill.gather_offers(
            self.settings,
            self.providers,
            self.metrics,
            gpu_type=spec.gpu_type,
            gpu_count=spec.gpu_count,
            barred=kept_home or {},
        )
        with self._lock:
            if rec.deleting:
                rec.creating = False
                self._forget(uid)
                return
            spending = sum(self.ledger.spend_rate(self._records.values()).values())
            decision = spill.decide(
                self.settings,
                spec,
                offers,
                used_gpus=self.ledger.used_gpus(self._records.values()),
                spending=spending,
                tracker=self.tracker,
                metrics=self.metrics,
            )
            log.info("placement decision", extra={"pod": rec.key, **decision.log_fields()})
            rec.gpu_type, rec.gpu_count = spec.gpu_type, spec.gpu_count
            if decision.chosen is not None:  # reserve the GPUs (and their spend) against the caps before unlocking
                rec.provider = decision.chosen.provider
        if spill.refused_for_spend(decision):
            self.metrics.spend_refusals.inc()
            message = (
                f"renting {spec.gpu_count} x {spec.gpu_type} would pass maxSpendPerHour "
                f"{self.settings.virtual_node.max_spend_per_hour:g} USD/h ({spending:.4g} USD/h rented now); "
                f"{decision.summary()}"
            )
            self._refuse(rec, SPEND_CEILING, message, event=True)
            return
        if decision.chosen is None:
            self.metrics.no_capacity.labels(spec.gpu_type).inc()
            self._refuse(rec, NO_CAPACITY, decision.summary())
            return
        candidates = [c.provider for c in decision.ranked]
        inst = self._create_on_first_with_capacity(rec, spec, candidates)
        if inst is None:
            return
        chosen = rec.provider
        with self._lock:
            rec.creating = False
            rec.instance_id = inst.instance_id
            rec.instance_assigned_at = self.clock()
            rec.message = f"instance {inst.instance_id} on {chosen} is {inst.state.value}"
            deleting = rec.deleting
        log.info("instance created", extra={"pod": rec.key, "provider": chosen, "instance": inst.instance_id})
        if deleting:
            self._delete(uid)
        else:
            self.observe(uid, inst)

    def _refuse(self, rec: PodRecord, reason: str, message: str, *, event: bool = False) -> None:
        """The create worker ends with the pod Failed and no instance made (a Warning Event as well when `event`); a
        pod deleted meanwhile is forgotten."""
        with self._lock:
            rec.creating = False
            self._fail(rec, reason, message, REFUSED_EXIT_CODE)
        if event:
            self.on_event(rec, "Warning", reason, rec.message)
        self._forget_if_deleting(rec.uid)

    def _create_on_first_with_capacity(
        self, rec: PodRecord, spec: InstanceSpec, candidates: list[str]
    ) -> Instance | None:
        """Create on the first of the ranked providers that has the capacity (``spill``); None when the pod failed or
        was deleted instead."""

        def reserve(chosen: str, refusals: list[str]) -> bool:
            with self._lock:
                if rec.deleting:
                    return False
                rec.provider = chosen  # reserves the GPUs against the cap while the create call runs
                rec.message = f"creating on {chosen}" + (f" ({'; '.join(refusals)})" if refusals else "")
                return True

        out = spill.create_on_first_with_capacity(
            self.providers, spec, candidates, reserve, tracker=self.tracker, metrics=self.metrics, pod_key=rec.key
        )
        if out.instance is not None:
            return out.instance
        if out.abandoned:
            with self._lock:
                rec.creating = False
                self._forget(rec.uid)
        elif out.error:
            self._refuse(rec, CREATE_FAILED, out.detail())
        else:
            with self._lock:
                rec.provider = ""
            self.metrics.no_capacity.labels(spec.gpu_type).inc()
            self._refuse(rec, NO_CAPACITY, "every provider refused for capacity: " + out.detail())
        return None

    # ------------------------------------------------------------------------------------------------
    # Observation: the state machine proper
    # ------------------------------------------------------------------------------------------------

    def _fail(self, rec: PodRecord, reason: str, message: str, exit_code: int) -> None:
        """Make the record Failed (caller holds the lock). Idempotent: the first failure wins."""
        if rec.phase in TERMINAL:
            return
        was_running = rec.phase == RUNNING
        rec.phase, rec.reason, rec.message, rec.exit_code = FAILED, reason, message, exit_code
        rec.ready, rec.unready_since = False, None
        rec.finished_at = self.clock()
        self.metrics.pod_failures.labels(rec.provider or "none", reason).inc()
        log.warning("pod failed", extra={"pod": rec.key, "reason": reason, "provider": rec.provider, "detail": message})
        if was_running:
            self.on_change()

    def _cleanup_instance(self, uid: str) -> None:
        """Delete the instance of a finished pod, so nothing keeps costing money."""
        with self._lock:
            rec = self._records.get(uid)
            if rec is None or not rec.instance_id or rec.instance_gone:
                return
            provider, instance_id = rec.provider, rec.instance_id
        try:
            self.providers[provider].delete_instance(instance_id)
        except Exception as exc:
            self.metrics.provider_errors.labels(provider, "delete_instance").inc()
            log.warning(
                "instance delete failed", extra={"provider": provider, "instance": instance_id, "err": str(exc)}
            )
            return
        with self._lock:
            rec.instance_gone = True

    def observe(self, uid: str, inst: Instance | None) -> None:
        """Apply what the provider reports about the pod's instance (None: it no longer knows it)."""
        cleanup = False
        verdict = addresses.Verdict()
        if inst is not None and inst.address:  # judged before the lock: a host name is resolved
            with self._lock:
                known = self._records.get(uid)
                provider = known.provider if known is not None else ""
            verdict = addresses.check(inst.address, self._address_ranges(provider), self.address_resolver)
        with self._lock:
            rec = self._records.get(uid)
            if rec is None or rec.deleting or rec.phase in TERMINAL:
                return
            if inst is None:
                rec.instance_gone = True
                self.tracker.record_failure(rec.provider)
                self._fail(rec, VANISHED, f"instance {rec.instance_id} is gone from {rec.provider}", KILLED_EXIT_CODE)
                return
            shown = inst.address[: addresses.SHOWN]
            if verdict.refusal:
                self.tracker.record_failure(rec.provider)
                self._fail(
                    rec,
                    ADDRESS_REFUSED,
                    f"instance {rec.instance_id} on {rec.provider} reports the address {shown!r}, "
                    f"{verdict.refusal}: no traffic or probe is sent there",
                    KILLED_EXIT_CODE,
                )
                cleanup = True
            elif verdict.unknown:
                log.warning(
                    "instance address not judged",
                    extra={"pod": rec.key, "provider": rec.provider, "address": shown, "why": verdict.unknown},
                )
            if verdict.address and not cleanup:
                rec.address = verdict.address
            if inst.ports:
                rec.ports = inst.ports
            if cleanup:
                pass  # refused: the instance is deleted below, nothing else it reports matters
            elif inst.state is InstanceState.RUNNING:
                if rec.phase == PENDING:
                    rec.phase, rec.reason = RUNNING, ""
                    rec.message = f"running on {rec.provider} as {rec.instance_id}"
                    rec.start_time = inst.started_at or self.clock()
                    rec.unready_since = self.clock()
                    self._start_probes(rec)
                    self.tracker.record_success(rec.provider)
                    log.info("pod running", extra={"pod": rec.key, "provider": rec.provider, "address": rec.address})
                    self.on_change()
            elif inst.state is InstanceState.CREATING:
                timeout = self.settings.virtual_node.creation_timeout_seconds
                if self.clock() - rec.created_at > timeout:
                    self.tracker.record_failure(rec.provider)
                    self._fail(
                        rec,
                        TIMEOUT,
                        f"instance {rec.instance_id} on {rec.provider} not running after "
                        f"{self.settings.virtual_node.creation_timeout}",
                        KILLED_EXIT_CODE,
                    )
                    cleanup = True
            else:
                cleanup = self._ended(rec, inst)
        if cleanup:
            self.spawn(lambda: self._cleanup_instance(uid), f"cleanup-{uid}")

    def _ended(self, rec: PodRecord, inst: Instance) -> bool:
        """The instance stopped (EXITED, FAILED, TERMINATED): exit 0 is Succeeded, anything else InstanceDied."""
        detail = f": {inst.message}" if inst.message else ""
        if inst.state is InstanceState.EXITED and inst.exit_code == 0:
            rec.phase, rec.reason, rec.exit_code = SUCCEEDED, "", 0
            rec.message = f"instance {rec.instance_id} exited 0{detail}"
            rec.finished_at = inst.finished_at or self.clock()
            self.on_change()
            return True
        self.tracker.record_failure(rec.provider)
        code = inst.exit_code if inst.exit_code is not None else KILLED_EXIT_CODE
        self._fail(rec, DIED, f"instance {rec.instance_id} on {rec.provider} is {inst.state.value}{detail}", code)
        rec.finished_at = inst.finished_at or rec.finished_at
        return True

    # ------------------------------------------------------------------------------------------------
    # Probes: Running is not Ready until the pod's own probes pass against the instance
    # ------------------------------------------------------------------------------------------------

    def _start_probes(self, rec: PodRecord) -> None:
        """Begin probing a Running record whose pod is known (caller holds the lock)."""
        now = self.clock()
        try:
            started = readiness.start_probes(rec, now)
        except ProbeSpecError as exc:  # refused at translation; only a record rebuilt from an older service
            self._fail(rec, PROBE_FAILED, str(exc), KILLED_EXIT_CODE)
            self.spawn(lambda: self._cleanup_instance(rec.uid), f"cleanup-{rec.uid}")
            return
        if started:
            self._update_ready(rec, now)

    def _update_ready(self, rec: PodRecord, now: float) -> None:
        """Recompute the record's readiness; a change re-syncs the endpoints (caller holds the lock)."""
        if readiness.update_ready(rec, now):
            self.on_change()

    def probe_once(self) -> None:
        """Run every probe that is due, each on its own worker; fail replicas not ready for notReadyTimeout."""
        now = self.clock()
        with self._lock:
            for rec in self._records.values():
                if rec.phase == RUNNING and not rec.deleting:
                    self._start_probes(rec)
            jobs, expired = readiness.due(
                self._records.values(), now, self.settings.virtual_node.not_ready_timeout_seconds
            )
            for uid in expired:
                rec = self._records[uid]
                self.tracker.record_failure(rec.provider)
                detail = rec.not_ready_detail or "no probe has passed"
                self._fail(
                    rec,
                    NOT_READY,
                    f"instance {rec.instance_id} on {rec.provider} not ready for "
                    f"{self.settings.virtual_node.not_ready_timeout}: {detail}",
                    KILLED_EXIT_CODE,
                )
        for uid in expired:
            self.spawn(functools.partial(self._cleanup_instance, uid), f"cleanup-{uid}")
        for job in jobs:
            self.spawn(functools.partial(self._probe, job), f"probe-{job.uid}")

    def _probe(self, job: readiness.ProbeJob) -> None:
        try:
            ok, detail = self.prober(job.address, job.port, job.state.probe)
        except Exception as exc:  # a prober bug must not leave the probe in flight forever
            ok, detail = False, f"probe error: {type(exc).__name__}: {exc}"[:300]
        self.metrics.probe_results.labels(job.state.probe.kind, "success" if ok else "failure").inc()
        cleanup = False
        with self._lock:
            rec = self._records.get(job.uid)
            if rec is None or rec.probes is not job.probes or rec.phase != RUNNING or rec.deleting:
                return
            now = self.clock()
            killed = job.probes.record(job.state, ok, detail, now)
            if killed is not None:
                self.tracker.record_failure(rec.provider)
                self._fail(rec, PROBE_FAILED, f"instance {rec.instance_id}: {killed.message()}", KILLED_EXIT_CODE)
                cleanup = True
            else:
                self._update_ready(rec, now)
        if cleanup:
            self.spawn(lambda: self._cleanup_instance(job.uid), f"cleanup-{job.uid}")

    def poll_once(self) -> None:
        """Ask the providers about every pod still in flight, and finish pending deletions."""
        with self._lock:
            active = [
                (r.uid, r.provider, r.instance_id)
                for r in self._records.values()
                if r.instance_id and not r.creating and (r.deleting or r.phase not in TERMINAL)
            ]
            deleting = {r.uid for r in self._records.values() if r.deleting and not r.creating}
        for uid, provider, instance_id in active:
            if uid in deleting:
                continue
            try:
                inst = self.providers[provider].get_instance(instance_id)
            except Exception as exc:
                self.metrics.provider_errors.labels(provider, "get_instance").inc()
                log.warning(
                    "get_instance failed", extra={"provider": provider, "instance": instance_id, "err": str(exc)}
                )
                continue
            self.observe(uid, inst)
        now = self.clock()
        for uid in deleting:
            with self._lock:
                rec = self._records.get(uid)
                draining = rec is not None and rec.drain_until is not None and now < rec.drain_until
            if not draining:
                self._delete(uid)

    # ------------------------------------------------------------------------------------------------
    # Deletion
    # ------------------------------------------------------------------------------------------------

    def _forget(self, uid: str) -> None:
        with self._lock:
            rec = self._records.pop(uid, None)
        if rec is not None:
            log.info("pod forgotten", extra={"pod": rec.key})
            self.on_change()

    def _forget_if_deleting(self, uid: str) -> None:
        with self._lock:
            rec = self._records.get(uid)
            deleting = rec is not None and rec.deleting
        if deleting:
            self._forget(uid)

    def _delete(self, uid: str) -> None:
        """Delete the pod's instance and forget the pod once the provider no longer has it. Retried by poll_once
        until that is confirmed."""
        with self._lock:
            rec = self._records.get(uid)
            if rec is None or rec.creating:
                return
            if rec.drain_until is not None:
                rec.drain_until = None  # drained: its endpoints go, then its instance
                self.on_change()
            provider, instance_id, gone = rec.provider, rec.instance_id, rec.instance_gone
        if not instance_id:
            self._forget(uid)
            return
        p = self.providers.get(provider)
        if p is None:
            self._forget(uid)
            return
        try:
            if not gone:
                p.delete_instance(instance_id)
            inst = p.get_instance(instance_id)
        except Exception as exc:
            self.metrics.provider_errors.labels(provider, "delete_instance").inc()
            log.warning(
                "instance delete failed", extra={"provider": provider, "instance": instance_id, "err": str(exc)}
            )
            return
        if inst is None or inst.state is InstanceState.TERMINATED:
            self._forget(uid)
        else:
            log.info("instance still present after delete", extra={"instance": instance_id, "state": inst.state.value})

    # ------------------------------------------------------------------------------------------------
    # Reconciliation support
    # ------------------------------------------------------------------------------------------------

    def rebuild(self, listings: Mapping[str, list[Instance]]) -> int:
        """Records for tagged instances the service does not know (after a restart); returns how many it added."""
        with self._lock:
            added = [
                (p, inst)
                for p, insts in listings.items()
                for inst in self._records.rebuild(p, insts, self.owner, self.clock())
            ]
        for _, inst in added:
            self.observe(inst.tags.uid, inst)
        if added:
            log.info("records rebuilt from provider listings", extra={"count": len(added)})
        return len(added)

    def adopt_pods(self, pods: list[dict[str, Any]]) -> None:
        """Give records rebuilt after a restart their pod (containers, labels) from the source cluster."""
        by_uid = {str((p.get("metadata") or {}).get("uid")): p for p in pods}
        with self._lock:
            for uid, rec in self._records.items():
                if not rec.pod and uid in by_uid:
                    rec.pod = dict(by_uid[uid])
                    self._start_probes(rec)

    def orphaned(self, uid: str, instance_id: str) -> None:
        """Reconciliation deleted the instance because no live pod owns it. Not the provider's fault: the pod
        was deleted or finished in the source cluster, so no failure is counted against the provider."""
        with self._lock:
            rec = self._records.get(uid)
            if rec is None or rec.instance_id != instance_id:
                return
            rec.instance_gone = True
            if rec.phase not in TERMINAL and not rec.deleting:
                self._fail(
                    rec,
                    VANISHED,
                    "the pod is no longer live in the cluster; its instance was deleted",
                    KILLED_EXIT_CODE,
                )

    def forget_stale(self, live_uids: set[str], older_than: float) -> list[str]:
        """Forget finished records whose pod is no longer live, whose instance is gone and which ended more than
        `older_than` seconds ago: left behind when a pod disappeared while the service was down."""
        with self._lock:
            stale = self._records.drop_stale(live_uids, self.clock(), older_than)
        for key in stale:
            log.info("stale pod record forgotten", extra={"pod": key})
        return stale

    def mark_vanished(self, uid: str, instance_id: str) -> None:
        """Reconciliation found the record's instance missing from its provider's listing."""
        with self._lock:
            rec = self._records.get(uid)
            if rec is None or rec.instance_id != instance_id:
                return
        self.observe(uid, None)
