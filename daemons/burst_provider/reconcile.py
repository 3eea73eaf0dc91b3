"""Periodic reconciliation of three truths: the providers' instances, the source cluster's pods, our records.

Every pass: (1) list each provider's instances tagged with this node, (2) list the live pods bound to the node,
(3) delete instances no live pod owns (no money leaks), (4) fail records whose instance is gone, (5) leave a live
pod without record or instance alone (the node calls POST for it). Instances are listed *before* pods, so an
instance in the listing was created for a pod that was already bound: a missing pod means the pod is really gone.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from daemons.burst_provider.endpoints import EndpointManager
from daemons.burst_provider.providers.base import Instance, InstanceState
from daemons.burst_provider.service import BurstService
from daemons.burst_provider.source import SourceCluster

log = logging.getLogger("burst_provider.reconcile")

#: A finished record whose pod left the cluster is kept this long (the node normally deletes it well before).
STALE_RECORD_SECONDS = 3600.0
#: An instance the provider has ended by itself: deleting it again changes nothing.
_ENDED = (InstanceState.EXITED, InstanceState.FAILED)


@dataclass
class ReconcileReport:
    listed: dict[str, int] = field(default_factory=dict)  # provider -> instances tagged with the node
    listing_errors: dict[str, str] = field(default_factory=dict)
    live_pods: int | None = None  # None: the source cluster could not be read
    orphans_deleted: list[str] = field(default_factory=list)  # provider/instance
    vanished: list[str] = field(default_factory=list)  # pod keys
    forgotten: list[str] = field(default_factory=list)  # finished records of pods that are gone
    seconds: float = 0.0


class Reconciler:
    """Runs reconciliation passes and the service's polling; also gates readiness on the first full listing."""

    def __init__(
        self,
        service: BurstService,
        source: SourceCluster | None,
        endpoints: EndpointManager | None = None,
        *,
        timer: Callable[[], float] = time.monotonic,
        startup_grace: float = 120.0,
    ) -> None:
        self.service = service
        self.source = source
        self.endpoints = endpoints
        self.timer = timer
        self.ready = threading.Event()
        self._ready_deadline = timer() + startup_grace
        self._wake = threading.Event()
        service.on_change = self._wake.set
        # Ended orphans whose delete the provider accepted: they linger in its listings for a while (a provider
        # keeps failed and exited instances listed), and are not deleted, nor counted, again on every pass.
        self._ended_orphans_deleted: set[tuple[str, str]] = set()

    def list_instances(self, report: ReconcileReport) -> dict[str, list[Instance]]:
        listings: dict[str, list[Instance]] = {}
        owner = self.service.owner  # the cluster's and the node's name: never another cluster's instances
        for name, provider in self.service.providers.items():
            try:
                instances = [i for i in provider.list_instances(owner) if i.tags.node == owner]
            except Exception as exc:
                self.service.metrics.provider_errors.labels(name, "list_instances").inc()
                report.listing_errors[name] = str(exc)
                log.warning("list_instances failed", extra={"provider": name, "err": str(exc)})
                continue
            listings[name] = instances
            report.listed[name] = len(instances)
        return listings

    def startup(self) -> bool:
        """Rebuild records from every provider's listing; ready (for /healthz) once all providers answered."""
        report = ReconcileReport()
        listings = self.list_instances(report)
        self.service.rebuild(listings)
        if not report.listing_errors:
            self.ready.set()
        return self.ready.is_set()

    def _export_instances(self, listings: dict[str, list[Instance]]) -> None:
        gauge = self.service.metrics.instances
        for name, instances in listings.items():
            for state in InstanceState:
                gauge.labels(name, state.value).set(sum(1 for i in instances if i.state is state))

    def _export_pods(self) -> None:
        records = self.service.records()
        for phase in ("Pending", "Running", "Failed", "Succeeded"):
            self.service.metrics.pods.labels(phase).set(sum(1 for r in records if r.phase == phase))
        self.service.metrics.pods_not_ready.set(sum(1 for r in records if r.phase == "Running" and not r.ready))

    def run_once(self) -> ReconcileReport:
        """One pass; never raises for a provider or source-cluster error (they are logged and counted)."""
        started = self.timer()
        report = ReconcileReport()
        listing_started = self.service.clock()
        listings = self.list_instances(report)
        self._export_instances(listings)
        if not self.ready.is_set():
            self.service.rebuild(listings)
            if not report.listing_errors:
                self.ready.set()
            elif self.timer() >= self._ready_deadline:
                log.warning("ready without every provider's listing", extra={"errors": report.listing_errors})
                self.ready.set()
        pods: list[dict[str, Any]] | None = None
        if self.source is not None:
            try:
                pods = self.source.live_pods_on_node(self.service.node)
            except Exception as exc:
                log.warning("listing the node's pods failed", extra={"err": str(exc)})
        if pods is not None:
            report.live_pods = len(pods)
            self.service.adopt_pods(pods)
            self._delete_orphans(listings, pods, report)
            live = {str((p.get("metadata") or {}).get("uid")) for p in pods}
            report.forgotten = self.service.forget_stale(live, STALE_RECORD_SECONDS)
        self._fail_vanished(listings, listing_started, report)
        if self.endpoints is not None:
            try:
                self.endpoints.sync(self.service.records(), pods)
            except Exception as exc:
                log.warning("endpoint sync failed", extra={"err": str(exc)})
        self._export_pods()
        report.seconds = self.timer() - started
        self.service.metrics.reconcile_duration.observe(report.seconds)
        log.debug("reconciled", extra={"report": report.__dict__})
        return report

    def _delete_orphans(
        self, listings: dict[str, list[Instance]], pods: list[dict[str, Any]], report: ReconcileReport
    ) -> None:
        live = {str((p.get("metadata") or {}).get("uid")) for p in pods}
        live |= {r.uid for r in self.service.records() if r.draining}  # its pod is terminating: not an orphan yet
        listed = {(name, inst.instance_id) for name, instances in listings.items() for inst in instances}
        self._ended_orphans_deleted &= listed
        for name, instances in listings.items():
            for inst in instances:
                if inst.tags.uid in live or inst.state is InstanceState.TERMINATED:
                    continue
                key = (name, inst.instance_id)
                if key in self._ended_orphans_deleted and inst.state in _ENDED:
                    continue
                try:
                    self.service.providers[name].delete_instance(inst.instance_id)
                except Exception as exc:
                    self.service.metrics.provider_errors.labels(name, "delete_instance").inc()
                    log.warning(
                        "orphan delete failed", extra={"provider": name, "instance": inst.instance_id, "err": str(exc)}
                    )
                    continue
                if inst.state in _ENDED:
                    self._ended_orphans_deleted.add(key)
                self.service.orphaned(inst.tags.uid, inst.instance_id)
                self.service.metrics.orphans_deleted.labels(name).inc()
                report.orphans_deleted.append(f"{name}/{inst.instance_id}")
                log.info(
                    "orphan instance deleted",
                    extra={"provider": name, "instance": inst.instance_id, "pod": inst.tags.key()},
                )

    def _fail_vanished(
        self, listings: dict[str, list[Instance]], listing_started: float, report: ReconcileReport
    ) -> None:
        present = {(name, i.instance_id) for name, instances in listings.items() for i in instances}
        for rec in self.service.records():
            if rec.provider not in listings or not rec.instance_id or rec.deleting or rec.instance_gone:
                continue
            if rec.phase in ("Failed", "Succeeded"):
                continue
            # An instance created after the listing began cannot be in it yet.
            if rec.instance_assigned_at is None or rec.instance_assigned_at >= listing_started:
                continue
            if (rec.provider, rec.instance_id) not in present:
                self.service.mark_vanished(rec.uid, rec.instance_id)
                report.vanished.append(rec.key)

    def run_forever(self, stop: threading.Event, poll_interval: float = 2.0) -> None:
        """Poll pods every `poll_interval`; reconcile every reconcileInterval or sooner after a state change."""
        interval = self.service.settings.virtual_node.reconcile_interval_seconds
        next_reconcile = 0.0
        while not stop.is_set():
            now = self.timer()
            try:
                self.service.poll_once()
                self.service.account()
                if now >= next_reconcile or self._wake.is_set():
                    self._wake.clear()
                    self.run_once()
                    next_reconcile = now + interval
            except Exception:
                log.exception("reconcile loop error")
            stop.wait(min(poll_interval, interval))
