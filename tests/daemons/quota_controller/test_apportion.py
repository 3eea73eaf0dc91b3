"""Shares at full capacity -> quotas at the capacity there is: largest remainder, never above the usable GPUs."""

from __future__ import annotations

import pytest

from daemons.quota_controller.apportion import apportion, scaled_limit


def test_full_capacity_gives_every_queue_exactly_its_share() -> None:
    assert apportion({"pretraining": 448, "evaluation": 64}, 512, 512) == {"pretraining": 448, "evaluation": 64}


def test_a_lost_node_shrinks_the_queues_in_proportion() -> None:
    # 512 H100s declared, one 8-GPU node lost: 504 usable; 448/512 and 64/512 of it.
    assert apportion({"pretraining": 448, "evaluation": 64}, 512, 504) == {"pretraining": 441, "evaluation": 63}


def test_remainders_go_to_the_largest_and_the_total_never_exceeds_the_usable_gpus() -> None:
    shares = {"a": 10, "b": 10, "c": 12}
    for usable in range(33):
        quotas = apportion(shares, 32, usable)
        assert sum(quotas.values()) == usable  # the shares add up to the whole flavor
        assert all(0 <= quotas[q] <= shares[q] for q in shares)
    # 24 of 32: exactly 7.5, 7.5, 9 -> the two halves go to the larger share first, then the name
    assert apportion(shares, 32, 24) == {"a": 8, "b": 7, "c": 9}


def test_shares_that_leave_part_of_the_flavor_unqueued_keep_that_part_unqueued() -> None:
    quotas = apportion({"a": 16}, 32, 24)
    assert quotas == {"a": 12}


def test_more_healthy_than_declared_gives_no_queue_more_than_the_stack_says() -> None:
    assert apportion({"a": 24, "b": 8}, 32, 48) == {"a": 24, "b": 8}


def test_nothing_healthy_is_zero_never_negative() -> None:
    assert apportion({"a": 24, "b": 8}, 32, -8) == {"a": 0, "b": 0}


@pytest.mark.parametrize(("shares", "declared"), [({"a": 1}, 0), ({"a": -1}, 8)])
def test_impossible_inputs_are_refused(shares: dict[str, int], declared: int) -> None:
    with pytest.raises(ValueError, match="must"):
        apportion(shares, declared, 4)


def test_borrowing_limits_scale_the_same_way_rounded_down() -> None:
    assert scaled_limit(64, 512, 512) == 64
    assert scaled_limit(64, 512, 504) == 63
    assert scaled_limit(64, 512, 0) == 0
    with pytest.raises(ValueError, match="positive"):
        scaled_limit(8, 0, 0)
