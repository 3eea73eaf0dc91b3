"""The controller's Prometheus metrics, in a registry of their own. Every name starts with
``gpucluster_quota_controller_``."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import Counter, Gauge, Histogram

from contract.controllers.quota_controller import PREFIX
from daemons.quota_controller.capacity import FlavorCount
from daemons.quota_controller.decide import Quota
from daemons.quota_controller.model import Out
from daemons.toolkit.metrics import ControllerMetrics

#: What happened to a queue update: written, conflict, error, skipped (dry run, not leader).
RESULTS = ("applied", "conflict", "error", "skipped")
#: The reads a cycle makes.
READS = ("nodes", "clusterqueues")
DECIDE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
CYCLE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Metrics(ControllerMetrics):
    def __init__(self) -> None:
        super().__init__(PREFIX)
        r = self.registry
        self.declared_gpus = Gauge(
            f"{PREFIX}_declared_gpus", "GPUs the stack declares, by flavor", ["flavor"], registry=r
        )
        self.healthy_gpus = Gauge(
            f"{PREFIX}_healthy_gpus",
            "GPUs of nodes that count (Ready, schedulable, accepted, not quarantined), by flavor",
            ["flavor"],
            registry=r,
        )
        self.out_nodes = Gauge(
            f"{PREFIX}_out_nodes", "Nodes of a flavor that do not count, by reason", ["flavor", "reason"], registry=r
        )
        self.nominal_quota = Gauge(
            f"{PREFIX}_nominal_quota",
            "The nominalQuota each ClusterQueue should have now, by flavor",
            ["cluster_queue", "flavor"],
            registry=r,
        )
        self.updates = Counter(f"{PREFIX}_updates", "ClusterQueue updates, by result", ["result"], registry=r)
        self.below_admitted = Counter(
            f"{PREFIX}_below_admitted",
            "Quota updates that left a queue below what its admitted workloads hold",
            ["cluster_queue"],
            registry=r,
        )
        self.read_errors = Counter(f"{PREFIX}_read_errors", "Reads that failed, by read", ["read"], registry=r)
        self.unchanged = Counter(
            f"{PREFIX}_fail_static",
            "Cycles that changed nothing because an input was unknown, by reason",
            ["reason"],
            registry=r,
        )
        self.cycles = Counter(f"{PREFIX}_cycles", "Cycles run (read, decide, write)", registry=r)
        self.decide_seconds = Histogram(
            f"{PREFIX}_decide_seconds", "Seconds one decision took (no I/O)", buckets=DECIDE_BUCKETS, registry=r
        )
        self.cycle_seconds = Histogram(
            f"{PREFIX}_cycle_seconds",
            "Seconds one cycle took: the reads, the decision and, on the leader, the writes",
            buckets=CYCLE_BUCKETS,
            registry=r,
        )
        for result in RESULTS:
            self.updates.labels(result)
        for read in READS:
            self.read_errors.labels(read)
        for reason in ("nodes-unknown", "no-nodes", "queues-unknown"):
            self.unchanged.labels(reason)

    def set_capacity(self, counts: Mapping[str, FlavorCount], wanted: Mapping[str, Mapping[str, Quota]]) -> None:
        for flavor, count in counts.items():
            self.declared_gpus.labels(flavor).set(count.declared)
            self.healthy_gpus.labels(flavor).set(count.healthy)
            for reason in Out:
                self.out_nodes.labels(flavor, reason.value).set(sum(1 for why in count.out.values() if why is reason))
        for queue, quotas in wanted.items():
            for flavor, quota in quotas.items():
                self.nominal_quota.labels(queue, flavor).set(quota.nominal)
