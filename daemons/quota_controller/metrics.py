"""The controller's Prometheus metrics, in a registry of their own. Every name starts with
``gpucluster_quota_controller_``."""

from __future__ import annotations

from collections.abc import Mapping

from contract.controllers.quota_controller import PREFIX
from daemons.quota_controller.capacity import FlavorCount
from daemons.quota_controller.decide import Quota
from daemons.quota_controller.model import Out
from daemons.toolkit.metrics import ControllerMetrics

#: What happened to a queue update: written, conflict, error, skipped (dry run, not leader).
RESULTS = ("applied", "conflict", "error", "skipped")
#: The reads a cycle makes.
READS = ("nodes", "clusterqueues")
#: Why a cycle changed nothing (the reasons of fail_static_total).
FAIL_STATIC_REASONS = ("nodes-unknown", "no-nodes", "queues-unknown")
DECIDE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
CYCLE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Metrics(ControllerMetrics):
    def __init__(self) -> None:
        super().__init__(PREFIX)
        self.declared_gpus = self.gauge("declared_gpus", "GPUs the stack declares, by flavor", ["flavor"])
        self.healthy_gpus = self.gauge(
            "healthy_gpus",
            "GPUs of nodes that count (Ready, schedulable, accepted, not quarantined), by flavor",
            ["flavor"],
        )
        self.out_nodes = self.gauge("out_nodes", "Nodes of a flavor that do not count, by reason", ["flavor", "reason"])
        self.nominal_quota = self.gauge(
            "nominal_quota",
            "The nominalQuota each ClusterQueue should have now, by flavor",
            ["cluster_queue", "flavor"],
        )
        self.updates = self.counter("updates", "ClusterQueue updates, by result", ["result"], known=RESULTS)
        self.below_admitted = self.counter(
            "below_admitted",
            "Quota updates that left a queue below what its admitted workloads hold",
            ["cluster_queue"],
        )
        self.read_errors = self.counter("read_errors", "Reads that failed, by read", ["read"], known=READS)
        self.unchanged = self.counter(
            "fail_static",
            "Cycles that changed nothing because an input was unknown, by reason",
            ["reason"],
            known=FAIL_STATIC_REASONS,
        )
        self.cycles = self.counter("cycles", "Cycles run (read, decide, write)")
        self.decide_seconds = self.histogram("decide_seconds", "Seconds one decision took (no I/O)", DECIDE_BUCKETS)
        self.cycle_seconds = self.histogram(
            "cycle_seconds",
            "Seconds one cycle took: the reads, the decision and, on the leader, the writes",
            CYCLE_BUCKETS,
        )

    def set_capacity(self, counts: Mapping[str, FlavorCount], wanted: Mapping[str, Mapping[str, Quota]]) -> None:
        for flavor, count in counts.items():
            self.declared_gpus.labels(flavor).set(count.declared)
            self.healthy_gpus.labels(flavor).set(count.healthy)
            for reason in Out:
                self.out_nodes.labels(flavor, reason.value).set(sum(1 for why in count.out.values() if why is reason))
        for queue, quotas in wanted.items():
            for flavor, quota in quotas.items():
                self.nominal_quota.labels(queue, flavor).set(quota.nominal)
