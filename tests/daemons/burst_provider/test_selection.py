"""Provider selection: price, failure penalty, caps, live capacity, preference and deterministic ties."""

from __future__ import annotations

from daemons.burst_provider.providers.base import Offer, ProviderError
from daemons.burst_provider.selection import FailureTracker, choose
from tests.daemons.burst_provider.support import ManualClock, make_settings, provider_entry


def offers(**free: int) -> dict[str, list[Offer]]:
    return {name: [Offer("H100", 1.0, n)] for name, n in free.items()}


def test_cheapest_wins() -> None:
    s = make_settings(provider_entry("a", price=3.0), provider_entry("b", price=2.0))
    d = choose(s, "H100", 1, offers=offers(a=8, b=8), used_gpus={}, failure_rates={})
    assert d.chosen is not None
    assert d.chosen.provider == "b"
    assert [c.provider for c in d.ranked] == ["b", "a"]


def test_failure_penalty_flips_the_choice() -> None:
    s = make_settings(provider_entry("a", price=2.0), provider_entry("b", price=2.5), failurePenalty=2.0)
    # a: 2.0 x (1 + 2 x 0.5) = 4.0 > b: 2.5
    d = choose(s, "H100", 1, offers=offers(a=8, b=8), used_gpus={}, failure_rates={"a": 0.5})
    assert d.chosen is not None
    assert d.chosen.provider == "b"
    assert d.ranked[1].effective_price == 4.0
    # a small failure rate does not flip it: 2.0 x (1 + 2 x 0.1) = 2.4 < 2.5
    d = choose(s, "H100", 1, offers=offers(a=8, b=8), used_gpus={}, failure_rates={"a": 0.1})
    assert d.chosen is not None
    assert d.chosen.provider == "a"


def test_cap_excludes_a_provider_at_its_limit() -> None:
    s = make_settings(provider_entry("a", price=1.0, max_gpus=4), provider_entry("b", price=2.0))
    d = choose(s, "H100", 2, offers=offers(a=8, b=8), used_gpus={"a": 3}, failure_rates={})
    assert d.chosen is not None
    assert d.chosen.provider == "b"
    assert "cap: 3 GPUs in use + 2 > maxGpus 4" in d.rejected[0].reason
    d = choose(s, "H100", 1, offers=offers(a=8, b=8), used_gpus={"a": 3}, failure_rates={})
    assert d.chosen is not None
    assert d.chosen.provider == "a"  # 3 + 1 <= 4


def test_live_capacity_is_required() -> None:
    s = make_settings(provider_entry("a", price=1.0), provider_entry("b", price=2.0))
    d = choose(s, "H100", 4, offers=offers(a=2, b=4), used_gpus={}, failure_rates={})
    assert d.chosen is not None
    assert d.chosen.provider == "b"
    assert "capacity: 2 H100 GPUs free, 4 needed" in d.rejected[0].reason


def test_gpu_type_must_be_listed_in_settings() -> None:
    s = make_settings(provider_entry("a"), {**provider_entry("b"), "gpuTypes": {"A100": {"pricePerGpuHour": 1.0}}})
    d = choose(
        s,
        "A100",
        1,
        offers={"a": [Offer("A100", 1.0, 8)], "b": [Offer("A100", 1.0, 8)]},
        used_gpus={},
        failure_rates={},
    )
    assert d.chosen is not None
    assert d.chosen.provider == "b"
    assert d.rejected[0].reason == "GPU type A100 not in its gpuTypes"


def test_preference_then_list_order_break_ties_deterministically() -> None:
    s = make_settings(provider_entry("a"), provider_entry("b", preference=1), provider_entry("c"))
    d = choose(s, "H100", 1, offers=offers(a=8, b=8, c=8), used_gpus={}, failure_rates={})
    assert [c.provider for c in d.ranked] == ["b", "a", "c"]
    s = make_settings(provider_entry("c"), provider_entry("a"))
    for _ in range(3):
        d = choose(s, "H100", 1, offers=offers(a=8, c=8), used_gpus={}, failure_rates={})
        assert d.chosen is not None
        assert d.chosen.provider == "c"  # list order, not name order


def test_no_capacity_lists_every_reason() -> None:
    s = make_settings(provider_entry("a", max_gpus=1), provider_entry("b"), provider_entry("c"))
    d = choose(
        s,
        "H100",
        2,
        offers={"b": [Offer("H100", 1.0, 1)], "c": ProviderError("c", "offers", "unreachable")},
        used_gpus={},
        failure_rates={},
    )
    assert d.chosen is None
    assert [r.provider for r in d.rejected] == ["a", "b", "c"]
    summary = d.summary()
    assert summary.startswith("no provider can take 2 x H100")
    assert "unreachable" in summary


def test_cpu_only_pod_needs_any_offer() -> None:
    s = make_settings(provider_entry("a", price=1.0), provider_entry("b", price=2.0))
    d = choose(s, "", 0, offers={"a": [], "b": [Offer("H100", 2.0, 0)]}, used_gpus={}, failure_rates={})
    assert d.chosen is not None
    assert d.chosen.provider == "b"
    assert d.rejected[0].reason == "no live offers"


def test_failure_tracker_rate_within_window() -> None:
    clock = ManualClock()
    t = FailureTracker(window_seconds=60, clock=clock)
    assert t.rate("a") == 0.0
    t.record_failure("a")
    t.record_success("a")
    assert t.rate("a") == 0.5
    clock.advance(30)
    t.record_failure("a")
    assert t.rate("a") == 2 / 3
    clock.advance(31)  # the first two fall out of the window
    assert t.rate("a") == 1.0
    clock.advance(60)
    assert t.rate("a") == 0.0
    assert t.rates(["a", "b"]) == {"a": 0.0, "b": 0.0}
