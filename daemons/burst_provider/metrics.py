"""The service's Prometheus metrics, on a registry of their own (one per service, so tests never collide)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from contract.burst_settings import METRICS_PREFIX as PREFIX


class Metrics:
    """Every series the provider service exports. Names are documented in daemons/burst_provider/README.md."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.decisions = Counter(
            f"{PREFIX}_decisions",
            "Placements decided, by chosen provider and GPU type",
            ["provider", "gpu_type"],
            registry=r,
        )
        self.effective_price = Gauge(
            f"{PREFIX}_effective_price",
            "Price per GPU-hour (USD) after the failure penalty, at the last decision",
            ["provider", "gpu_type"],
            registry=r,
        )
        self.failure_rate = Gauge(
            f"{PREFIX}_provider_failure_rate", "Failures / attempts within the failure window", ["provider"], registry=r
        )
        self.no_capacity = Counter(
            f"{PREFIX}_no_capacity",
            "Pods failed with NoCapacity: no provider could take them",
            ["gpu_type"],
            registry=r,
        )
        self.spills = Counter(
            f"{PREFIX}_capacity_spills",
            "Creates refused for capacity (nothing created) and tried on the next provider, by refusing provider",
            ["provider", "gpu_type"],
            registry=r,
        )
        self.pod_failures = Counter(
            f"{PREFIX}_pod_failures", "Pods reported Failed, by provider and reason", ["provider", "reason"], registry=r
        )
        self.provider_errors = Counter(
            f"{PREFIX}_provider_errors",
            "Provider calls that raised, by provider and call",
            ["provider", "call"],
            registry=r,
        )
        self.orphans_deleted = Counter(
            f"{PREFIX}_orphans_deleted", "Instances deleted because no live pod owns them", ["provider"], registry=r
        )
        self.reconcile_duration = Histogram(
            f"{PREFIX}_reconcile_duration_seconds",
            "Time one reconciliation pass took",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
        self.instances = Gauge(
            f"{PREFIX}_instances",
            "Instances tagged with this node, per provider and state",
            ["provider", "state"],
            registry=r,
        )
        self.pods = Gauge(f"{PREFIX}_pods", "Pods the service is responsible for, per phase", ["phase"], registry=r)
        self.probe_results = Counter(
            f"{PREFIX}_probe_results",
            "Probes run against rented replicas, by probe kind and result",
            ["probe", "result"],
            registry=r,
        )
        self.pods_not_ready = Gauge(
            f"{PREFIX}_pods_not_ready", "Running pods whose probes do not pass (no traffic goes to them)", registry=r
        )
        self.gpu_seconds = Counter(
            f"{PREFIX}_gpu_seconds",
            "GPU-seconds rented, from the create until the instance is gone, by provider and GPU type",
            ["provider", "gpu_type"],
            registry=r,
        )
        self.spend = Counter(
            f"{PREFIX}_spend_usd",
            "What the rented GPUs cost at the configured prices (USD), by provider",
            ["provider"],
            registry=r,
        )
        self.spend_rate = Gauge(
            f"{PREFIX}_spend_rate_usd_per_hour",
            "What everything rented now costs per hour at the configured prices, by provider",
            ["provider"],
            registry=r,
        )
        self.spend_ceiling = Gauge(
            f"{PREFIX}_spend_ceiling_usd_per_hour",
            "maxSpendPerHour (absent when no ceiling is set)",
            registry=r,
        )
        self.spend_refusals = Counter(
            f"{PREFIX}_spend_refusals", "Pods refused because renting them would pass maxSpendPerHour", registry=r
        )
        self.endpoint_slices = Gauge(
            f"{PREFIX}_endpoint_slices", "EndpointSlices kept for external replicas", registry=r
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
