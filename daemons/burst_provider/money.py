"""What renting costs: each record's GPUs priced at its provider's configured rate, the spend rate and GPU count held
against the caps, and the GPU-second and spend counters advanced between two calls.

Pure over the records it is given: the service calls it with its lock held and passes its own records.
"""

from __future__ import annotations

from collections.abc import Iterable

from contract.burst_settings import BurstSettings
from daemons.burst_provider.metrics import Metrics
from daemons.burst_provider.record import PodRecord


class Ledger:
    """Prices and counts what the records rent. Keeps one thing of its own: until when each record's GPUs are
    already in the counters, so :meth:`account` adds each second once."""

    def __init__(self, settings: BurstSettings, metrics: Metrics) -> None:
        self.settings = settings
        self.metrics = metrics
        self._accounted: dict[str, float] = {}  # uid -> until when its rented GPUs are in the spend metrics
        if settings.virtual_node.max_spend_per_hour is not None:
            metrics.spend_ceiling.set(settings.virtual_node.max_spend_per_hour)

    def price_per_hour(self, provider: str, gpu_type: str, gpu_count: int) -> float:
        """What ``gpu_count`` GPUs of ``gpu_type`` cost per hour at ``provider``'s configured price (0 for none)."""
        if gpu_count <= 0:
            return 0.0
        for p in self.settings.providers:
            if p.name == provider:
                return (p.price(gpu_type) or 0.0) * gpu_count
        return 0.0

    def spend_rate(self, records: Iterable[PodRecord]) -> dict[str, float]:
        """USD per hour of everything rented now (instances that exist or are being created), by provider."""
        rate: dict[str, float] = {}
        for r in records:
            if r.holds_gpus:
                rate[r.provider] = rate.get(r.provider, 0.0) + self.price_per_hour(r.provider, r.gpu_type, r.gpu_count)
        return rate

    def used_gpus(self, records: Iterable[PodRecord]) -> dict[str, int]:
        """GPUs held against each provider's cap: instances that exist or are being created."""
        used: dict[str, int] = {}
        for r in records:
            if r.holds_gpus:
                used[r.provider] = used.get(r.provider, 0) + r.gpu_count
        return used

    def account(self, records: Iterable[PodRecord], now: float) -> None:
        """Add what was rented since the last call to the GPU-second and spend counters; set the rate gauges."""
        holding = [r for r in records if r.holds_gpus]
        for r in holding:
            since = self._accounted.get(r.uid, r.instance_assigned_at or r.created_at)
            seconds = max(0.0, now - since)
            self._accounted[r.uid] = now
            if seconds and r.gpu_count:
                self.metrics.gpu_seconds.labels(r.provider, r.gpu_type).inc(seconds * r.gpu_count)
                cost = self.price_per_hour(r.provider, r.gpu_type, r.gpu_count) * seconds / 3600
                self.metrics.spend.labels(r.provider).inc(cost)
        live = {r.uid for r in holding}
        for uid in [u for u in self._accounted if u not in live]:
            del self._accounted[uid]
        rates = self.spend_rate(holding)
        for p in self.settings.providers:
            self.metrics.spend_rate.labels(p.name).set(rates.get(p.name, 0.0))
