"""Choosing the provider for one pod: a pure function of settings, live offers, usage and recent failures.

Candidates are the providers that list the pod's GPU type, whose live offers have room for its GPUs and whose cap
is not exceeded. They are ranked by effective price = price x (1 + failurePenalty x failureRate), so a provider
that keeps failing loses to a slightly dearer one that works, then by preference (higher first), list order and
name, so the same inputs always give the same choice.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from contract.burst_settings import BurstSettings, ProviderSettings
from daemons.burst_provider.providers.base import Offer


@dataclass(frozen=True)
class Candidate:
    provider: str
    price: float  # USD per GPU-hour from the settings
    failure_rate: float
    effective_price: float
    preference: int
    index: int  # position in the settings' provider list
    available_gpus: int

    def reason(self) -> str:
        return (
            f"price {self.price:.4g} x (1 + penalty x failure rate {self.failure_rate:.2f}) = "
            f"{self.effective_price:.4g}, preference {self.preference}, {self.available_gpus} GPUs free"
        )


@dataclass(frozen=True)
class Rejection:
    provider: str
    reason: str
    spend: bool = False  # rejected only because the rental would pass the spend ceiling


@dataclass(frozen=True)
class Decision:
    gpu_type: str
    gpu_count: int
    chosen: Candidate | None
    ranked: tuple[Candidate, ...]
    rejected: tuple[Rejection, ...]

    def summary(self) -> str:
        """One line for logs and the NoCapacity message."""
        if self.chosen is not None:
            return f"{self.chosen.provider}: {self.chosen.reason()}"
        why = "; ".join(f"{r.provider}: {r.reason}" for r in self.rejected) or "no providers configured"
        return f"no provider can take {self.gpu_count} x {self.gpu_type or 'no GPU'}: {why}"

    def log_fields(self) -> dict[str, object]:
        return {
            "gpu_type": self.gpu_type,
            "gpu_count": self.gpu_count,
            "chosen": self.chosen.provider if self.chosen else None,
            "ranked": [{"provider": c.provider, "effective_price": round(c.effective_price, 6)} for c in self.ranked],
            "rejected": [{"provider": r.provider, "reason": r.reason} for r in self.rejected],
        }


OffersOrError = Sequence[Offer] | Exception


def _price_for(p: ProviderSettings, gpu_type: str, gpu_count: int) -> float | None:
    if gpu_count == 0:  # CPU-only pods: any provider with an offer; rank by its cheapest configured type
        return min(o.price_per_gpu_hour for o in p.gpu_types.values())
    return p.price(gpu_type)


def _free(offers: Sequence[Offer], gpu_type: str, gpu_count: int) -> int:
    if gpu_count == 0:
        return max((o.available_gpus for o in offers), default=0) if offers else 0
    return sum(o.available_gpus for o in offers if o.gpu_type == gpu_type)


def choose(
    settings: BurstSettings,
    gpu_type: str,
    gpu_count: int,
    *,
    offers: Mapping[str, OffersOrError],
    used_gpus: Mapping[str, int],
    failure_rates: Mapping[str, float],
    spend_room: float | None = None,
) -> Decision:
    """Rank the providers able to run `gpu_count` GPUs of `gpu_type`; `offers` maps provider name to its live
    offers, or to the exception its offers() call raised (such a provider is rejected). `spend_room`: USD per hour
    left under the spend ceiling (None: no ceiling); a provider whose price for these GPUs passes it is rejected."""
    ranked: list[Candidate] = []
    rejected: list[Rejection] = []
    penalty = settings.virtual_node.failure_penalty
    for index, p in enumerate(settings.providers):
        price = _price_for(p, gpu_type, gpu_count)
        if price is None:
            rejected.append(Rejection(p.name, f"GPU type {gpu_type} not in its gpuTypes"))
            continue
        used = used_gpus.get(p.name, 0)
        if used + gpu_count > p.max_gpus:
            rejected.append(Rejection(p.name, f"cap: {used} GPUs in use + {gpu_count} > maxGpus {p.max_gpus}"))
            continue
        live = offers.get(p.name)
        if isinstance(live, Exception) or live is None:
            rejected.append(Rejection(p.name, f"offers unavailable: {live or 'not asked'}"))
            continue
        free = _free(live, gpu_type, gpu_count)
        if gpu_count == 0 and not live:
            rejected.append(Rejection(p.name, "no live offers"))
            continue
        if free < gpu_count:
            rejected.append(Rejection(p.name, f"capacity: {free} {gpu_type} GPUs free, {gpu_count} needed"))
            continue
        cost = price * gpu_count
        if spend_room is not None and cost > spend_room + 1e-9:
            rejected.append(
                Rejection(
                    p.name,
                    f"spend ceiling: {cost:.4g} USD/h more, "
                    f"{max(spend_room, 0.0):.4g} USD/h left under maxSpendPerHour",
                    spend=True,
                )
            )
            continue
        rate = min(max(failure_rates.get(p.name, 0.0), 0.0), 1.0)
        ranked.append(Candidate(p.name, price, rate, price * (1 + penalty * rate), p.preference, index, free))
    ranked.sort(key=lambda c: (c.effective_price, -c.preference, c.index, c.provider))
    return Decision(gpu_type, gpu_count, ranked[0] if ranked else None, tuple(ranked), tuple(rejected))


class FailureTracker:
    """Outcomes of recent placements per provider, within a sliding window, for the failure penalty.

    A failure is a refused create, a creation timeout, an instance that died or vanished; a success is an instance
    that reached RUNNING. The rate is failures / (failures + successes) inside the window, 0 with no outcomes.
    """

    def __init__(self, window_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._window = window_seconds
        self._clock = clock
        self._events: dict[str, deque[tuple[float, bool]]] = {}
        self._lock = threading.Lock()

    def _add(self, provider: str, failed: bool) -> None:
        with self._lock:
            self._events.setdefault(provider, deque()).append((self._clock(), failed))

    def record_success(self, provider: str) -> None:
        self._add(provider, False)

    def record_failure(self, provider: str) -> None:
        self._add(provider, True)

    def rate(self, provider: str) -> float:
        with self._lock:
            events = self._events.get(provider)
            if not events:
                return 0.0
            horizon = self._clock() - self._window
            while events and events[0][0] < horizon:
                events.popleft()
            if not events:
                return 0.0
            return sum(1 for _, failed in events if failed) / len(events)

    def rates(self, providers: Sequence[str]) -> dict[str, float]:
        return {p: self.rate(p) for p in providers}
