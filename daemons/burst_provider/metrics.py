"""The service's Prometheus metrics, on a registry of their own (one per service, so tests never collide)."""

from __future__ import annotations

from contract.burst_settings import METRICS_PREFIX
from daemons.toolkit.metrics import Families

#: Bucket bounds (seconds) of one reconciliation pass.
RECONCILE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
PLACEMENT = ("provider", "gpu_type")


class Metrics(Families):
    """Every series the provider service exports. Names are documented in daemons/burst_provider/README.md."""

    def __init__(self) -> None:
        super().__init__(METRICS_PREFIX)
        self.decisions = self.counter("decisions", "Placements decided, by chosen provider and GPU type", PLACEMENT)
        self.effective_price = self.gauge(
            "effective_price", "Price per GPU-hour (USD) after the failure penalty, at the last decision", PLACEMENT
        )
        self.failure_rate = self.gauge(
            "provider_failure_rate", "Failures / attempts within the failure window", ["provider"]
        )
        self.no_capacity = self.counter(
            "no_capacity", "Pods failed with NoCapacity: no provider could take them", ["gpu_type"]
        )
        self.spills = self.counter(
            "capacity_spills",
            "Creates refused for capacity (nothing created) and tried on the next provider, by refusing provider",
            PLACEMENT,
        )
        self.pod_failures = self.counter(
            "pod_failures", "Pods reported Failed, by provider and reason", ["provider", "reason"]
        )
        self.provider_errors = self.counter(
            "provider_errors", "Provider calls that raised, by provider and call", ["provider", "call"]
        )
        self.orphans_deleted = self.counter(
            "orphans_deleted", "Instances deleted because no live pod owns them", ["provider"]
        )
        self.reconcile_duration = self.histogram(
            "reconcile_duration_seconds", "Time one reconciliation pass took", RECONCILE_BUCKETS
        )
        self.instances = self.gauge(
            "instances", "Instances tagged with this node, per provider and state", ["provider", "state"]
        )
        self.pods = self.gauge("pods", "Pods the service is responsible for, per phase", ["phase"])
        self.probe_results = self.counter(
            "probe_results", "Probes run against rented replicas, by probe kind and result", ["probe", "result"]
        )
        self.pods_not_ready = self.gauge(
            "pods_not_ready", "Running pods whose probes do not pass (no traffic goes to them)"
        )
        self.gpu_seconds = self.counter(
            "gpu_seconds",
            "GPU-seconds rented, from the create until the instance is gone, by provider and GPU type",
            PLACEMENT,
        )
        self.spend = self.counter(
            "spend_usd", "What the rented GPUs cost at the configured prices (USD), by provider", ["provider"]
        )
        self.spend_rate = self.gauge(
            "spend_rate_usd_per_hour",
            "What everything rented now costs per hour at the configured prices, by provider",
            ["provider"],
        )
        self.spend_ceiling = self.gauge("spend_ceiling_usd_per_hour", "maxSpendPerHour (absent when no ceiling is set)")
        self.spend_refusals = self.counter(
            "spend_refusals", "Pods refused because renting them would pass maxSpendPerHour"
        )
        self.endpoint_slices = self.gauge("endpoint_slices", "EndpointSlices kept for external replicas")
