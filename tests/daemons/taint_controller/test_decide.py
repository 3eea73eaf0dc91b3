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


# --- by GPU type ------------------------------------------------------------------------------------------------
# Rows: "" is the whole cluster, the others GPU types (prod mixes H100 and L40S).


def test_idle_h100s_with_l40s_pending_remove_the_taint() -> None:
    """The whole cluster has 20 free GPUs, all of them H100: the Pending L40S replicas have nowhere to go."""
    d = decider()
    headroom = {"": 20, "H100": 20, "L40S": 0}
    pending = {"": 3, "L40S": 3}
    assert d.decide(0, headroom, pending, True).action is Action.HOLD
    decision = d.decide(HOLD_REMOVE, headroom, pending, True)
    assert (decision.action, decision.reason, decision.gpu_type) == (Action.REMOVE, "headroom-low", "L40S")
    assert decision.detail.startswith("L40S: headroom 0 < lowMark 2 with 3 inference pods pending for 120s")


def test_the_whole_cluster_alone_would_keep_the_taint_on() -> None:
    """The same numbers as one pool (a stack without gpuTypes): 20 free GPUs is room, and nothing comes off."""
    d = decider()
    assert {d.decide(t, 20, 3, True).action for t in range(0, 1000, 30)} == {Action.HOLD}


def test_a_type_with_room_for_its_pending_stays_quiet() -> None:
    """H100 replicas Pending while H100 has room (a moment before the scheduler binds them): no removal."""
    d = decider()
    steps = [d.decide(t, {"": 10, "H100": 6, "L40S": 4}, {"": 2, "H100": 2}, True) for t in range(0, 1000, 30)]
    assert {s.action for s in steps} == {Action.HOLD}
    assert d.remove_since is None


def test_each_type_has_its_own_remove_timer() -> None:
    """L40S low for 90 s, then it gets room just as H100 runs out: H100 needs a full hold of its own."""
    d = decider()
    for t in (0, 30, 60, 90):
        d.decide(t, {"": 8, "H100": 8, "L40S": 0}, {"": 1, "L40S": 1}, True)
    assert d.remove_since_by_type == {"L40S": 0}
    low_h100 = ({"": 4, "H100": 0, "L40S": 4}, {"": 1, "H100": 1})
    assert d.decide(120, *low_h100, True).action is Action.HOLD  # L40S would have completed its hold here
    assert d.remove_since_by_type == {"H100": 120}
    assert d.decide(120 + HOLD_REMOVE - 1, *low_h100, True).action is Action.HOLD
    decision = d.decide(120 + HOLD_REMOVE, *low_h100, True)
    assert (decision.action, decision.gpu_type) == (Action.REMOVE, "H100")


def test_the_type_low_for_longest_decides() -> None:
    d = decider()
    d.decide(0, {"": 0, "H100": 0, "L40S": 0}, {"": 1, "L40S": 1}, True)
    decision = d.decide(HOLD_REMOVE, {"": 0, "H100": 0, "L40S": 0}, {"": 3, "H100": 2, "L40S": 1}, True)
    assert (decision.action, decision.gpu_type) == (Action.REMOVE, "L40S")


def test_a_type_missing_from_headroom_is_zero() -> None:
    """Pending inference asks for a type no in-cluster node has: no room for it anywhere in-cluster."""
    d = decider()
    d.decide(0, {"": 30, "H100": 30}, {"": 1, "L40S": 1}, True)
    decision = d.decide(HOLD_REMOVE, {"": 30, "H100": 30}, {"": 1, "L40S": 1}, True)
    assert (decision.action, decision.gpu_type) == (Action.REMOVE, "L40S")
    assert "L40S: headroom 0 < lowMark" in decision.detail


def test_a_row_that_drops_out_loses_its_timers() -> None:
    d = decider()
    d.decide(0, {"": 0, "L40S": 0}, {"": 1, "L40S": 1}, True)
    d.decide(30, {"": 0}, {"": 0}, True)
    assert d.remove_since_by_type == {}
    d.decide(60, {"": 0, "L40S": 0}, {"": 1, "L40S": 1}, True)
    assert d.decide(60 + HOLD_REMOVE - 1, {"": 0, "L40S": 0}, {"": 1, "L40S": 1}, True).action is Action.HOLD


def test_unknown_headroom_restarts_every_types_timers() -> None:
    d = decider()
    d.decide(0, {"": 20, "H100": 20, "L40S": 0}, {"": 1, "L40S": 1}, True)
    assert d.decide(60, None, {"": 1, "L40S": 1}, True).reason == "headroom-unknown"
    assert (d.add_since_by_type, d.remove_since_by_type) == ({}, {})
    assert d.decide(HOLD_REMOVE, {"": 20, "H100": 20, "L40S": 0}, {"": 1, "L40S": 1}, True).action is Action.HOLD


def test_the_reservation_shortcut_names_the_type() -> None:
    decision = decider().decide(0, {"": 16, "H100": 16, "L40S": 0}, {"": 4, "L40S": 4}, True, reserved=2)
    assert (decision.action, decision.reason, decision.gpu_type) == (Action.REMOVE, "room-reserved", "L40S")


def test_with_nothing_out_the_whole_cluster_high_adds() -> None:
    """No burst replica to bring home: room anywhere is reason enough to keep new replicas in-cluster."""
    d = decider()
    rows = {"": HIGH, "H100": HIGH - 2, "L40S": 2}
    d.decide(0, rows, {"": 0}, False, burst={"": 0})
    decision = d.decide(HOLD_ADD, rows, {"": 0}, False, burst={"": 0})
    assert (decision.action, decision.reason, decision.gpu_type) == (Action.ADD, "headroom-high", "")
    assert decision.detail.startswith(f"all GPU types: headroom {HIGH} >= highMark {HIGH} for 600s")


def test_replicas_out_come_home_only_to_their_own_type() -> None:
    """L40S replicas are out and only H100 has room: the taint stays off until L40S has room too."""
    d = decider()
    out = {"": 2, "L40S": 2}
    no_l40s_room = {"": 20, "H100": 20, "L40S": 3}
    for t in range(0, 2000, 30):
        decision = d.decide(t, no_l40s_room, {"": 0}, False, burst=out)
        assert decision.action is Action.HOLD
    assert (decision.reason, decision.gpu_type) == ("between-marks", "L40S")
    assert "where burst replicas come home: all GPU types, L40S" in decision.detail
    room = {"": 28, "H100": 20, "L40S": HIGH}
    assert d.decide(2000, room, {"": 0}, False, burst=out).reason == "holding-add"
    decision = d.decide(2000 + HOLD_ADD, room, {"": 0}, False, burst=out)
    assert (decision.action, decision.gpu_type) == (Action.ADD, "L40S")


def test_every_type_out_must_hold_high_for_the_whole_hold() -> None:
    """H100 has been high for long, L40S only just: the add waits for L40S's own holdAdd."""
    d = decider()
    out = {"": 2, "H100": 1, "L40S": 1}
    d.decide(0, {"": 30, "H100": 24, "L40S": 6}, {"": 0}, False, burst=out)
    d.decide(300, {"": 32, "H100": 24, "L40S": HIGH}, {"": 0}, False, burst=out)
    assert d.decide(HOLD_ADD, {"": 32, "H100": 24, "L40S": HIGH}, {"": 0}, False, burst=out).action is Action.HOLD
    decision = d.decide(300 + HOLD_ADD, {"": 32, "H100": 24, "L40S": HIGH}, {"": 0}, False, burst=out)
    assert (decision.action, decision.gpu_type) == (Action.ADD, "L40S")


def test_unknown_burst_pods_wait_for_every_type() -> None:
    d = decider()
    one_low = {"": 20, "H100": 20, "L40S": 3}
    assert {d.decide(t, one_low, {"": 0}, False).action for t in range(0, 2000, 30)} == {Action.HOLD}
    all_high = {"": 30, "H100": 20, "L40S": HIGH}
    d.decide(2000, all_high, {"": 0}, False)
    assert d.decide(2000 + HOLD_ADD, all_high, {"": 0}, False).action is Action.ADD


def test_pending_without_room_blocks_the_add_whatever_else_has_room() -> None:
    """The taint never goes on while some Pending inference has nowhere in-cluster to go."""
    d = decider()
    rows = {"": 30, "H100": 30, "L40S": 0}
    for t in range(0, 2000, 30):
        decision = d.decide(t, rows, {"": 1, "L40S": 1}, False, burst={"": 0})
        assert decision.action is Action.HOLD
    assert (decision.reason, decision.gpu_type) == ("taint-absent", "L40S")


def test_a_type_out_with_no_node_in_cluster_never_adds() -> None:
    d = decider()
    steps = [d.decide(t, {"": 30, "H100": 30}, {"": 0}, False, burst={"": 1, "A100": 1}) for t in range(0, 2000, 30)]
    assert {s.action for s in steps} == {Action.HOLD}
    assert steps[-1].gpu_type == "A100"
