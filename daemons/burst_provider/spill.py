"""Where a pod may go and how it gets there: the providers a pod is kept away from, each provider's live offers, and
the create that spills down the ranked providers on a capacity refusal.

The ranking itself is :func:`daemons.burst_provider.selection.choose`; this module asks the providers and calls
them. It holds no record: the service passes a ``reserve`` callback that marks the record (under its lock) before
each create call and says whether the pod is still wanted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from contract.burst_settings import BurstSettings
from daemons.burst_provider.metrics import Metrics
from daemons.burst_provider.pods import secret_env_sources
from daemons.burst_provider.providers.base import CapacityError, Instance, InstanceSpec, Offer, Provider
from daemons.burst_provider.selection import Decision, FailureTracker, choose

log = logging.getLogger("burst_provider.spill")

#: Marks the record as being created on this provider, with the refusals so far; False: the pod was deleted meanwhile
#: and nothing more may be created for it.
Reserve = Callable[[str, list[str]], bool]


def kept_home(settings: BurstSettings, pod: Mapping[str, Any]) -> dict[str, str] | None:
    """With ``confidentialEnvToRentedProviders: refuse``, the providers a pod that reads a Secret into its env may
    not go to (every one that is not a Kubernetes cluster of ours), each with why; None when none is barred.
    Held here at run time as well as by the policy at deploy time: a pod the policy never saw (created by hand, or by
    a controller) is held the same."""
    if settings.virtual_node.confidential_env_to_rented_providers != "refuse":
        return None
    sources = secret_env_sources(pod)
    if not sources:
        return None
    shown = ", ".join(sources[:3]) + (f" and {len(sources) - 3} more" if len(sources) > 3 else "")
    why = (
        f"{shown} reads a Secret into the env and confidentialEnvToRentedProviders is refuse: it may run only on "
        "a Kubernetes cluster of ours"
    )
    return {p.name: why for p in settings.providers if p.kind != "kubernetes"} or None


def gather_offers(
    settings: BurstSettings,
    providers: Mapping[str, Provider],
    metrics: Metrics,
    *,
    gpu_type: str,
    gpu_count: int,
    barred: Mapping[str, str],
) -> dict[str, list[Offer] | Exception]:
    """Each provider's live offers (or the exception its call raised); one in ``barred`` is not asked and is rejected
    with its reason, one that does not rent ``gpu_type`` is not asked at all."""
    out: dict[str, list[Offer] | Exception] = {}
    for p in settings.providers:
        if p.name in barred:
            out[p.name] = PermissionError(barred[p.name])
            continue
        if gpu_count > 0 and gpu_type not in p.gpu_types:
            continue  # rejected by type anyway: do not spend a call
        provider = providers.get(p.name)
        if provider is None:
            out[p.name] = RuntimeError("provider not built")
            continue
        try:
            out[p.name] = list(provider.offers())
        except Exception as exc:
            metrics.provider_errors.labels(p.name, "offers").inc()
            out[p.name] = exc
    return out


def decide(
    settings: BurstSettings,
    spec: InstanceSpec,
    offers: Mapping[str, list[Offer] | Exception],
    *,
    used_gpus: Mapping[str, int],
    spending: float,
    tracker: FailureTracker,
    metrics: Metrics,
) -> Decision:
    """Rank the providers for the pod's GPUs (``selection.choose``) with the failure rates, the GPUs already held
    and the room left under the spend ceiling; the rates and effective prices go to the metrics."""
    rates = tracker.rates([p.name for p in settings.providers])
    ceiling = settings.virtual_node.max_spend_per_hour
    decision = choose(
        settings,
        spec.gpu_type,
        spec.gpu_count,
        offers=offers,
        used_gpus=used_gpus,
        failure_rates=rates,
        spend_room=None if ceiling is None else ceiling - spending,
    )
    for name, rate in rates.items():
        metrics.failure_rate.labels(name).set(rate)
    for c in decision.ranked:
        metrics.effective_price.labels(c.provider, spec.gpu_type).set(c.effective_price)
    return decision


def refused_for_spend(decision: Decision) -> bool:
    """No provider chosen, and at least one only because its price would pass the spend ceiling."""
    return decision.chosen is None and any(r.spend for r in decision.rejected)


@dataclass
class Spill:
    """How a create down the ranked providers ended: an instance, the pod deleted meanwhile (``abandoned``), a create
    error that is not about capacity (``error``), or every provider refused for capacity (none of these)."""

    instance: Instance | None = None
    abandoned: bool = False
    error: str = ""
    refusals: list[str] = field(default_factory=list)

    def detail(self) -> str:
        """The refusals and the error, as the pod's message says them."""
        return "; ".join([*self.refusals, *([self.error] if self.error else [])])


def create_on_first_with_capacity(
    providers: Mapping[str, Provider],
    spec: InstanceSpec,
    candidates: list[str],
    reserve: Reserve,
    *,
    tracker: FailureTracker,
    metrics: Metrics,
    pod_key: str,
) -> Spill:
    """Create on the first of the ranked providers that has the capacity.

    A capacity refusal (``CapacityError``: nothing was created, nothing bills) spills to the next provider of the
    same placement at once, counted against the refusing one; any other create error ends the spill, as it may mean
    a half-made instance or a request no provider will take.
    """
    out = Spill()
    for chosen in candidates:
        if not reserve(chosen, out.refusals):
            out.abandoned = True
            return out
        metrics.decisions.labels(chosen, spec.gpu_type).inc()
        try:
            out.instance = providers[chosen].create_instance(spec)
            return out
        except CapacityError as exc:
            tracker.record_failure(chosen)
            metrics.provider_errors.labels(chosen, "create_instance").inc()
            metrics.spills.labels(chosen, spec.gpu_type).inc()
            out.refusals.append(f"{chosen} refused for capacity: {exc.detail}")
            log.warning(
                "capacity refusal, trying the next provider",
                extra={"pod": pod_key, "provider": chosen, "detail": exc.detail},
            )
        except Exception as exc:
            tracker.record_failure(chosen)
            metrics.provider_errors.labels(chosen, "create_instance").inc()
            out.error = str(exc)
            return out
    return out
