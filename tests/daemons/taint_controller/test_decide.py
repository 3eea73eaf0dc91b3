"""The hysteresis rule: hold times, both marks, the second signal, oscillation and unknown input."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from daemons.taint_controller.decide import Action, Decider, Thresholds

HIGH, LOW, HOLD_ADD, HOLD_REMOVE = 8, 2, 600.0, 120.0


def decider() -> Decider:
    return Decider(Thresholds(high_mark=HIGH, low_mark=LOW, hold_add_s=HOLD_ADD, hold_remove_s=HOLD_REMOVE))


def run(d: Decider, steps: Sequence[tuple[float, float | None, float | None, bool]]) -> list[Action]:
    return [d.decide(t, h, p, present).action for t, h, p, present in steps]


def test_add_only_after_hold_add_at_or_above_the_high_mark() -> None:
    d = decider()
    assert d.decide(0, HIGH, 0, False).action is Action.HOLD  # exactly at the mark starts the timer
    assert d.decide(HOLD_ADD - 1, HIGH + 3, 0, False).action is Action.HOLD
    decision = d.decide(HOLD_ADD, HIGH, 0, False)
    assert decision.action is Action.ADD
    assert decision.reason == "headroom-high"


def test_just_below_the_high_mark_never_adds() -> None:
    d = decider()
    assert run(d, [(t, HIGH - 1, 0, False) for t in range(0, 3000, 30)]) == [Action.HOLD] * 100


def test_no_add_when_the_taint_is_already_there() -> None:
    d = decider()
    assert run(d, [(0, HIGH, 0, True), (HOLD_ADD * 2, HIGH, 0, True)]) == [Action.HOLD, Action.HOLD]
    assert d.decide(HOLD_ADD * 3, HIGH, 0, True).reason == "taint-present"


def test_remove_after_hold_remove_below_low_mark_with_pending() -> None:
    d = decider()
    assert d.decide(0, LOW - 1, 3, True).action is Action.HOLD
    assert d.decide(HOLD_REMOVE - 1, 0, 1, True).action is Action.HOLD
    decision = d.decide(HOLD_REMOVE, 0, 1, True)
    assert decision.action is Action.REMOVE
    assert decision.reason == "headroom-low"


def test_a_reservation_for_a_waiting_gang_removes_at_once() -> None:
    """Make-before-break reserved nodes and moved their replicas: they need rented GPUs now, not after the hold."""
    decision = decider().decide(0, 0, 8, True, reserved=4)
    assert (decision.action, decision.reason) == (Action.REMOVE, "room-reserved")
    assert "4 nodes reserved" in decision.detail


@pytest.mark.parametrize(
    ("headroom", "pending", "reserved", "present"),
    [
        (0, 8, 0, True),  # nothing reserved: the hold applies
        (0, 8, None, True),  # reservations unknown: the hold applies
        (0, 0, 4, True),  # reserved but nothing pending: nothing to burst
        (0, None, 4, True),  # pending unknown
        (LOW, 8, 4, True),  # headroom at the low mark: inference still fits in-cluster
        (None, 8, 4, True),  # headroom unknown: fail-static
        (0, 8, 4, False),  # already off
    ],
)
def test_the_shortcut_needs_a_reservation_low_headroom_and_pending(
    headroom: float | None, pending: float | None, reserved: float | None, present: bool
) -> None:
    assert decider().decide(0, headroom, pending, present, reserved=reserved).action is Action.HOLD


@pytest.mark.parametrize("pending", [0, None])
def test_no_remove_without_pending_inference(pending: float | None) -> None:
    d = decider()
    actions = run(d, [(t, 0, pending, True) for t in range(0, 1000, 30)])
    assert set(actions) == {Action.HOLD}
    assert d.decide(1000, 0, pending, True).reason == "nothing-pending"


def test_pending_gap_restarts_the_remove_timer() -> None:
    d = decider()
    d.decide(0, 0, 2, True)
    d.decide(HOLD_REMOVE - 10, 0, 0, True)  # nothing pending for one tick
    assert d.decide(HOLD_REMOVE, 0, 2, True).action is Action.HOLD
    assert d.decide(HOLD_REMOVE * 2, 0, 2, True).action is Action.REMOVE


def test_at_the_low_mark_is_not_below_it() -> None:
    d = decider()
    assert set(run(d, [(t, LOW, 5, True) for t in range(0, 1000, 30)])) == {Action.HOLD}
    assert d.decide(1000, LOW, 5, True).reason == "between-marks"


@pytest.mark.parametrize("headroom", [LOW, LOW + 1, HIGH - 1])
def test_between_the_marks_holds_whatever_the_taint(headroom: float) -> None:
    for present in (True, False):
        d = decider()
        assert set(run(d, [(t, headroom, 10, present) for t in range(0, 5000, 60)])) == {Action.HOLD}


def test_no_remove_when_the_taint_is_absent() -> None:
    d = decider()
    assert set(run(d, [(t, 0, 4, False) for t in range(0, 1000, 30)])) == {Action.HOLD}
    assert d.decide(1000, 0, 4, False).reason == "taint-absent"


def test_headroom_oscillating_around_the_high_mark_never_adds() -> None:
    d = decider()
    steps = [(float(t), HIGH if (t // 30) % 2 else HIGH - 1, 0.0, False) for t in range(0, 6000, 30)]
    assert set(run(d, steps)) == {Action.HOLD}


def test_headroom_oscillating_around_the_low_mark_never_removes() -> None:
    d = decider()
    steps = [(float(t), LOW - 1 if (t // 30) % 2 else LOW, 3.0, True) for t in range(0, 6000, 30)]
    assert set(run(d, steps)) == {Action.HOLD}


def test_a_swing_across_both_marks_moves_once_each_way_after_the_holds() -> None:
    """High for 15 min, then low with pending for 5 min: one add, then one remove, nothing else."""
    d = decider()
    present = False
    changes: list[tuple[int, Action]] = []
    for t in range(0, 900, 30):
        a = d.decide(t, HIGH + 2, 0, present).action
        if a is Action.ADD:
            present, changes = True, [*changes, (t, a)]
    for t in range(900, 1200, 30):
        a = d.decide(t, 0, 3, present).action
        if a is Action.REMOVE:
            present, changes = False, [*changes, (t, a)]
    assert changes == [(600, Action.ADD), (1020, Action.REMOVE)]


@pytest.mark.parametrize("taint_present", [True, False])
def test_unknown_headroom_holds_and_restarts_both_timers(taint_present: bool) -> None:
    d = decider()
    d.decide(0, HIGH, 1, taint_present)
    decision = d.decide(HOLD_ADD - 30, None, 1, taint_present)
    assert decision.action is Action.HOLD
    assert decision.reason == "headroom-unknown"
    assert d.add_since is None
    assert d.remove_since is None
    # continuity is broken: a full hold is needed again
    assert d.decide(HOLD_ADD, HIGH, 1, False).action is Action.HOLD
    assert d.decide(HOLD_ADD * 2, HIGH, 1, False).action is Action.ADD


def test_unknown_headroom_while_low_never_removes() -> None:
    d = decider()
    steps = [(float(t), None if t % 60 else 0.0, 5.0, True) for t in range(0, 3000, 30)]
    assert set(run(d, steps)) == {Action.HOLD}


@pytest.mark.parametrize(("low", "high"), [(4, 4), (5, 4), (-1, 3)])
def test_thresholds_refuse_marks_without_a_gap(low: int, high: int) -> None:
    with pytest.raises(ValueError, match="low_mark"):
        Thresholds(high_mark=high, low_mark=low, hold_add_s=1, hold_remove_s=1)


def test_zero_hold_times_act_on_the_first_observation() -> None:
    d = Decider(Thresholds(high_mark=1, low_mark=0, hold_add_s=0, hold_remove_s=0))
    assert d.decide(0, 1, 0, False).action is Action.ADD
