"""The checkpoint cadence's arithmetic: Young/Daly's interval and the ETTR the first-order model predicts."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from contract.storage_settings import Checkpointing, checkpoint_interval_seconds, predicted_ettr

HOUR = 3600.0


def test_krea_figures_give_an_interval_in_their_20_to_30_minute_range() -> None:
    # 1 TB written in 30 s, one interruption every 8 h.
    minutes = checkpoint_interval_seconds(30.0, 8 * HOUR) / 60.0
    assert 20.0 <= minutes <= 30.0
    assert minutes == pytest.approx(21.9, abs=0.05)


def test_young_daly_interval_beats_a_fixed_two_hours_at_the_same_failure_rate() -> None:
    tau = checkpoint_interval_seconds(30.0, 8 * HOUR)
    assert predicted_ettr(tau, 30.0, 8 * HOUR, 300.0) > predicted_ettr(2 * HOUR, 30.0, 8 * HOUR, 300.0) + 0.05


def test_young_daly_interval_is_the_optimum_of_the_model_without_restart_cost() -> None:
    tau = checkpoint_interval_seconds(30.0, 8 * HOUR)
    best = predicted_ettr(tau, 30.0, 8 * HOUR, 0.0)
    for factor in (0.5, 0.8, 1.25, 2.0):
        assert predicted_ettr(tau * factor, 30.0, 8 * HOUR, 0.0) < best


def test_no_failures_costs_only_the_writes() -> None:
    assert predicted_ettr(600.0, 60.0, math.inf, 0.0) == pytest.approx(600.0 / 660.0)


def test_a_restart_longer_than_the_mtbf_keeps_nothing() -> None:
    assert predicted_ettr(600.0, 30.0, 100.0, 200.0) == 0.0


@pytest.mark.parametrize(
    ("interval", "write", "mtbf", "restart"),
    [(0.0, 30.0, HOUR, 0.0), (600.0, -1.0, HOUR, 0.0), (600.0, 30.0, 0.0, 0.0), (600.0, 30.0, HOUR, -5.0)],
)
def test_bad_inputs_are_refused(interval: float, write: float, mtbf: float, restart: float) -> None:
    with pytest.raises(ValueError, match="positive"):
        predicted_ettr(interval, write, mtbf, restart)


def test_the_prior_is_stated_for_a_job_size_and_read_per_node() -> None:
    per_node = Checkpointing.model_validate({"mtbfHours": 8})
    assert per_node.node_mtbf_seconds() == 8 * HOUR
    assert per_node.job_mtbf_seconds(64) == 8 * HOUR / 64
    big_job = Checkpointing.model_validate({"mtbfHours": 8, "mtbfJobNodes": 256})
    assert big_job.node_mtbf_seconds() == 2048 * HOUR
    assert big_job.job_mtbf_seconds(256) == 8 * HOUR


@pytest.mark.parametrize(("field", "value"), [("mtbfJobNodes", 0), ("mtbfJobNodes", 100_001), ("mtbfHours", 1e308)])
def test_a_prior_out_of_range_is_refused_naming_the_field(field: str, value: float) -> None:
    with pytest.raises(ValidationError, match=field):
        Checkpointing.model_validate({field: value})
    Checkpointing.model_validate({field: 1})
