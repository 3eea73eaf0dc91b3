"""The pure decision: candidates, the release grace, the circuit breaker per flavor and the ledger, each default
with a case that acts and one that stays quiet."""

from __future__ import annotations

from typing import Any

import pytest

from contract.constants import QUARANTINE_REASON_ANNOTATION, QUARANTINED_AT_ANNOTATION
from contract.quarantine_settings import RELEASED_AT_ANNOTATION, QuarantineSettings
from contract.times import unix_seconds
from daemons.quarantine.decide import (
    LedgerEntry,
    NodeView,
    Outcome,
    Policy,
    Signal,
    Taint,
    build_ledger,
    decide,
    format_time,
)

NOW = 1_800_000_000.0
H100 = {"gpu.example/type": "h100"}
L40S = {"gpu.example/type": "l40s"}


def policy(**change: Any) -> Policy:
    """The settings' defaults: maxShare 0.1, breakerWindow 1h, releaseGrace 30m, ledgerRetention 720h."""
    s = QuarantineSettings()
    base: dict[str, Any] = {
        "max_share": s.max_share,
        "window_s": s.breaker_window_seconds,
        "release_grace_s": s.release_grace_seconds,
        "retention_s": s.ledger_retention_seconds,
        "flavors": (("h100", H100), ("l40s", L40S)),
        "max_quarantined_share": s.max_quarantined_share,
    }
    return Policy(**{**base, **change})


def node(name: str, labels: dict[str, str] | None = None, **kw: Any) -> NodeView:
    return NodeView(name, labels=H100 if labels is None else labels, **kw)


def quarantined(name: str, at: float, reason: str = "xid", labels: dict[str, str] | None = None) -> NodeView:
    return node(
        name,
        labels,
        taints=(Taint("gpucluster.io/quarantine", "NoExecute", reason),),
        annotations={QUARANTINED_AT_ANNOTATION: format_time(at), QUARANTINE_REASON_ANNOTATION: "firing: GpuXidError"},
    )


def hot(name: str, **labels: str) -> Signal:
    return Signal(name, "GpuTemperatureHigh", {"gpu": "0", "UUID": "GPU-a", **labels})


def fleet(count: int, labels: dict[str, str] | None = None, prefix: str = "n") -> list[NodeView]:
    return [node(f"{prefix}{i:02d}", labels) for i in range(count)]


def outcomes(plan: Any) -> dict[str, Outcome]:
    return {d.node: d.outcome for d in plan.decisions}


def test_a_hot_node_of_a_flavor_is_quarantined_with_its_reason_and_a_sentence() -> None:
    plan = decide(fleet(10), [hot("n03")], [], NOW, policy())
    (d,) = plan.decisions
    assert (d.node, d.outcome, d.reason, d.flavor) == ("n03", Outcome.QUARANTINE, "gpu-temperature", "h100")
    assert d.detail == "firing: GpuTemperatureHigh (gpu=0, UUID=GPU-a)"
    (entry,) = plan.ledger
    assert (entry.node, entry.flavor, entry.reason, entry.since, entry.active) == (
        "n03",
        "h100",
        "gpu-temperature",
        NOW,
        True,
    )


def test_no_signal_quarantines_nothing() -> None:
    plan = decide(fleet(10), [], [], NOW, policy())
    assert plan.decisions == ()
    assert plan.ledger == ()
    assert all(not b.open for b in plan.breakers)


@pytest.mark.parametrize(
    ("alert", "reason"),
    [
        ("GpuTemperatureHigh", "gpu-temperature"),
        ("GpuXidError", "xid"),
        ("NvlinkErrorsIncreasing", "nvlink-errors"),
        ("InfinibandLinkErrorsIncreasing", "infiniband-errors"),
        ("HbmRowRemapFailure", "hbm-row-remap-failure"),
    ],
)
def test_each_alert_becomes_its_reason_word(alert: str, reason: str) -> None:
    (d,) = decide(fleet(10), [Signal("n00", alert)], [], NOW, policy()).decisions
    assert d.reason == reason


def test_temperature_names_the_node_when_several_alerts_fire() -> None:
    signals = [Signal("n00", "NvlinkErrorsIncreasing", {"link": "3"}), Signal("n00", "GpuXidError"), hot("n00")]
    (d,) = decide(fleet(10), signals, [], NOW, policy()).decisions
    assert d.reason == "gpu-temperature"
    assert "GpuXidError" in d.detail
    assert "link=3" in d.detail


def test_never_the_virtual_node_nor_a_node_outside_every_flavor_nor_a_missing_one() -> None:
    nodes = [
        *fleet(10),
        node("gpu-burst", {**H100, "type": "virtual-kubelet"}),
        node("cpu-0", {"kubernetes.io/os": "linux"}),
    ]
    signals = [hot("gpu-burst"), hot("cpu-0"), hot("gone")]
    plan = decide(nodes, signals, [], NOW, policy())
    assert outcomes(plan) == {
        "gpu-burst": Outcome.NOT_A_CANDIDATE,
        "cpu-0": Outcome.NOT_A_CANDIDATE,
        "gone": Outcome.UNKNOWN_NODE,
    }
    assert plan.ledger == ()


def test_an_already_quarantined_node_is_left_as_it_is() -> None:
    nodes = [quarantined("n00", NOW - 60), *fleet(9, prefix="m")]
    plan = decide(nodes, [hot("n00")], [], NOW, policy())
    assert outcomes(plan) == {"n00": Outcome.QUARANTINED}
    (entry,) = plan.ledger
    assert (entry.reason, entry.since) == ("xid", NOW - 60)


# --- releaseGrace (30m) -------------------------------------------------------------------------------------------


def _released(seconds_ago: float) -> list[NodeView]:
    return [node("n00", annotations={RELEASED_AT_ANNOTATION: format_time(NOW - seconds_ago)}), *fleet(9, prefix="m")]


def test_a_node_released_within_the_grace_is_not_quarantined_again() -> None:
    plan = decide(_released(29 * 60), [hot("n00")], [], NOW, policy())
    assert outcomes(plan) == {"n00": Outcome.RELEASED_RECENTLY}


def test_a_node_released_before_the_grace_is_quarantined_again_while_its_alert_fires() -> None:
    plan = decide(_released(31 * 60), [hot("n00")], [], NOW, policy())
    assert outcomes(plan) == {"n00": Outcome.QUARANTINE}


# --- the circuit breaker: maxShare 0.1 within breakerWindow 1h, at least one node ---------------------------------


def test_the_breaker_quarantines_up_to_the_share_and_refuses_the_rest() -> None:
    nodes = fleet(20)  # 0.1 x 20 = 2 nodes
    plan = decide(nodes, [hot(f"n{i:02d}") for i in range(5)], [], NOW, policy())
    assert [d.node for d in plan.of(Outcome.QUARANTINE)] == ["n00", "n01"]
    refused = plan.of(Outcome.REFUSED_BY_BREAKER)
    assert [d.node for d in refused] == ["n02", "n03", "n04"]
    assert "circuit breaker open for flavor h100: 2 of its 20 nodes" in refused[0].detail
    (h100, l40s) = plan.breakers
    assert (h100.limit, h100.used, h100.quarantining, h100.refused, h100.open) == (2, 0, 2, 3, True)
    assert not l40s.open
    assert {e.node for e in plan.ledger} == {"n00", "n01"}


def test_within_the_share_the_breaker_stays_closed() -> None:
    plan = decide(fleet(20), [hot("n00"), hot("n01")], [], NOW, policy())
    assert len(plan.of(Outcome.QUARANTINE)) == 2
    assert not any(b.open for b in plan.breakers)


def test_the_breaker_allows_at_least_one_node_of_a_small_flavor() -> None:
    plan = decide(fleet(3), [hot("n00"), hot("n01")], [], NOW, policy())  # 0.1 x 3 rounds down to 0
    assert outcomes(plan) == {"n00": Outcome.QUARANTINE, "n01": Outcome.REFUSED_BY_BREAKER}


def test_the_breaker_counts_each_flavor_apart() -> None:
    nodes = [*fleet(10), *fleet(10, L40S, prefix="l")]
    plan = decide(nodes, [hot("n00"), hot("l00")], [], NOW, policy())
    assert outcomes(plan) == {"n00": Outcome.QUARANTINE, "l00": Outcome.QUARANTINE}


def test_nodes_quarantined_within_the_window_count_and_older_ones_do_not() -> None:
    recent = [quarantined("n00", NOW - 59 * 60), *fleet(9, prefix="m")]
    assert outcomes(decide(recent, [hot("m00")], [], NOW, policy())) == {"m00": Outcome.REFUSED_BY_BREAKER}
    old = [quarantined("n00", NOW - 61 * 60), *fleet(9, prefix="m")]
    assert outcomes(decide(old, [hot("m00")], [], NOW, policy())) == {"m00": Outcome.QUARANTINE}


def test_a_deleted_node_still_counts_for_the_breaker_through_the_ledger() -> None:
    gone = LedgerEntry("n99", "h100", "xid", "firing: GpuXidError", NOW - 600)
    plan = decide(fleet(10), [hot("n00")], [gone], NOW, policy())
    assert outcomes(plan) == {"n00": Outcome.REFUSED_BY_BREAKER}
    (entry,) = plan.ledger
    assert (entry.node, entry.deleted) == ("n99", NOW)


def test_a_released_node_still_counts_for_the_breaker_within_the_window() -> None:
    released = LedgerEntry("n05", "h100", "xid", "", NOW - 600, released=NOW - 60)
    plan = decide(fleet(10), [hot("n00")], [released], NOW, policy())
    assert outcomes(plan) == {"n00": Outcome.REFUSED_BY_BREAKER}
    past = LedgerEntry("n05", "h100", "xid", "", NOW - 3700, released=NOW - 60)
    assert outcomes(decide(fleet(10), [hot("n00")], [past], NOW, policy())) == {"n00": Outcome.QUARANTINE}


# --- the cap on the total: maxQuarantinedShare 0.25 at once, however long ago ---------------------------------------


def test_old_quarantines_still_count_against_the_share_quarantined_at_once() -> None:
    """A slow trickle, one node every 2 hours and none released, passes the rate budget every time; the cap on the
    total stops it at a quarter of the flavor."""
    old = [quarantined(f"q{i}", NOW - (i + 1) * 7200) for i in range(5)]  # each outside the 1h window
    plan = decide([*old, *fleet(15)], [hot("n00")], [], NOW, policy())  # 20 nodes: 5 at once, 5 already
    assert outcomes(plan) == {"n00": Outcome.REFUSED_BY_BREAKER}
    (refused,) = plan.of(Outcome.REFUSED_BY_BREAKER)
    assert "5 of its 20 nodes quarantined now, at most 5 (maxQuarantinedShare 0.25)" in refused.detail
    (h100, _) = plan.breakers
    assert (h100.used, h100.cap, h100.active, h100.open) == (0, 5, 5, True)
    # one fewer held: the next is taken
    plan = decide([*old[:4], *fleet(16)], [hot("n00")], [], NOW, policy())
    assert outcomes(plan) == {"n00": Outcome.QUARANTINE}


def test_a_released_node_no_longer_counts_against_the_total() -> None:
    old = [quarantined(f"q{i}", NOW - (i + 1) * 7200) for i in range(4)]
    released = LedgerEntry("r0", "h100", "xid", "", NOW - 9 * 3600, released=NOW - 3 * 3600)
    plan = decide([*old, *fleet(16)], [hot("n00")], [released], NOW, policy())
    assert outcomes(plan) == {"n00": Outcome.QUARANTINE}


def test_the_share_at_once_is_checked() -> None:
    with pytest.raises(ValueError, match="max_quarantined_share"):
        policy(max_quarantined_share=0)


def test_a_larger_share_lets_more_through() -> None:
    plan = decide(
        fleet(10), [hot(f"n{i:02d}") for i in range(4)], [], NOW, policy(max_share=0.3, max_quarantined_share=0.5)
    )
    assert len(plan.of(Outcome.QUARANTINE)) == 3


# --- the ledger ---------------------------------------------------------------------------------------------------


def test_the_ledger_follows_a_release_and_keeps_the_entry() -> None:
    before = [LedgerEntry("n00", "h100", "xid", "firing: GpuXidError", NOW - 7200)]
    released_at = NOW - 30
    nodes = [node("n00", annotations={RELEASED_AT_ANNOTATION: format_time(released_at)})]
    (entry,) = build_ledger(nodes, before, NOW, policy())
    assert (entry.released, entry.deleted, entry.active) == (released_at, None, False)


def test_a_release_without_its_annotation_is_recorded_now() -> None:
    before = [LedgerEntry("n00", "h100", "xid", "", NOW - 7200)]
    (entry,) = build_ledger([node("n00")], before, NOW, policy())
    assert entry.released == NOW


def test_the_ledger_is_rebuilt_from_the_nodes_after_a_lost_write() -> None:
    """A kill between the node patch and the ledger write: the next cycle lists the node from its annotations."""
    (entry,) = build_ledger([quarantined("n00", NOW - 5, "nvlink-errors")], [], NOW, policy())
    assert (entry.node, entry.reason, entry.since, entry.flavor, entry.detail) == (
        "n00",
        "nvlink-errors",
        NOW - 5,
        "h100",
        "firing: GpuXidError",
    )


def test_ledger_retention_keeps_an_ended_entry_for_720h_and_no_longer() -> None:
    kept = LedgerEntry("n00", "h100", "xid", "", NOW - 800 * 3600, deleted=NOW - 719 * 3600)
    dropped = LedgerEntry("n01", "h100", "xid", "", NOW - 800 * 3600, deleted=NOW - 721 * 3600)
    assert [e.node for e in build_ledger([], [kept, dropped], NOW, policy())] == ["n00"]


def test_an_ended_entry_stays_while_it_counts_for_the_breaker_even_past_a_short_retention() -> None:
    entry = LedgerEntry("n00", "h100", "xid", "", NOW - 1800, deleted=NOW - 1700)
    assert build_ledger([], [entry], NOW, policy(retention_s=60.0)) == (entry,)
    assert build_ledger([], [entry], NOW + 1900, policy(retention_s=60.0)) == ()


def test_a_quarantined_node_that_leaves_its_flavor_keeps_its_flavor_in_the_ledger() -> None:
    before = [LedgerEntry("n00", "h100", "xid", "", NOW - 60)]
    (entry,) = build_ledger([quarantined("n00", NOW - 60, labels={"other": "x"})], before, NOW, policy())
    assert entry.flavor == "h100"


def test_times_round_trip_and_bad_ones_read_as_none() -> None:
    assert unix_seconds(format_time(NOW)) == NOW
    assert unix_seconds("2025-01-01T00:00:00") is None  # no time zone
    assert unix_seconds("yesterday") is None
    assert unix_seconds(None) is None


def test_the_policy_refuses_what_cannot_work() -> None:
    with pytest.raises(ValueError, match="max_share"):
        policy(max_share=0.0)
    with pytest.raises(ValueError, match="longer than zero"):
        policy(window_s=0.0)
