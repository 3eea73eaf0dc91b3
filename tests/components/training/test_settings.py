"""``gpucluster:training``: its defaults, its bounds both ways, and the stack reading it."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from components.config import StackConfigError, parse_stack_config
from components.training.settings import MAX_RESTARTS_LIMIT, MAX_RESTARTS_PER_HOUR_LIMIT, TrainingSettings
from contract.constants import TRAINING_NAMESPACE
from tests.components.training.conftest import local_raw


def test_defaults() -> None:
    s = TrainingSettings()
    assert (s.max_restarts_per_hour, s.max_restarts, s.reliability_namespace) == (6, 100, TRAINING_NAMESPACE)


@pytest.mark.parametrize(
    ("field", "value", "ok"),
    [
        ("maxRestartsPerHour", 1, True),
        ("maxRestartsPerHour", MAX_RESTARTS_PER_HOUR_LIMIT, True),
        ("maxRestartsPerHour", 0, False),
        ("maxRestartsPerHour", MAX_RESTARTS_PER_HOUR_LIMIT + 1, False),
        ("maxRestarts", 0, True),
        ("maxRestarts", MAX_RESTARTS_LIMIT, True),
        ("maxRestarts", -1, False),
        ("maxRestarts", MAX_RESTARTS_LIMIT + 1, False),
        ("reliabilityNamespace", "ops", True),
        ("reliabilityNamespace", "Not_A_Label", False),
    ],
)
def test_bounds(field: str, value: Any, ok: bool) -> None:
    if ok:
        assert TrainingSettings.model_validate({field: value}).model_dump(by_alias=True)[field] == value
    else:
        with pytest.raises(ValidationError):
            TrainingSettings.model_validate({field: value})


def test_the_stack_defaults_the_section() -> None:
    assert parse_stack_config(local_raw()).training == TrainingSettings()


def test_the_stack_reads_the_section_and_names_a_bad_key() -> None:
    raw = local_raw()
    raw["training"] = {"maxRestartsPerHour": 2}
    assert parse_stack_config(raw).training.max_restarts_per_hour == 2
    raw["training"] = {"maxRestartsPerHour": 0, "maxRestart": 1}
    with pytest.raises(StackConfigError) as err:
        parse_stack_config(raw)
    paths = [i.path for i in err.value.issues]
    assert "training.maxRestartsPerHour" in paths
    assert "training.maxRestart" in paths
