"""descheduler-bounded: the return evicts a bounded few, only through the burst taint."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest
import yaml

from policies.descheduler import descheduler_bounded
from tests.policies.support import (
    CM,
    KEY,
    NA,
    check_resource,
)


def _desched_policy(**overrides: Any) -> dict[str, Any]:
    policy: dict[str, Any] = {
        "apiVersion": "descheduler/v1alpha2",
        "kind": "DeschedulerPolicy",
        "maxNoOfPodsToEvictPerNode": 2,
        "maxNoOfPodsToEvictTotal": 4,
        "profiles": [
            {
                "name": "p",
                "pluginConfig": [{"name": "RemovePodsViolatingNodeTaints", "args": {"includedTaints": [KEY]}}],
                "plugins": {"deschedule": {"enabled": ["RemovePodsViolatingNodeTaints"]}},
            }
        ],
    }
    policy.update(overrides)
    return policy


def _config_map(policy: Mapping[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "descheduler"}, "data": {"policy.yaml": yaml.safe_dump(dict(policy))}}


def test_descheduler_policy_bounded_passes() -> None:
    assert check_resource(descheduler_bounded, CM, _config_map(_desched_policy())) == []
    assert check_resource(descheduler_bounded, CM, {"data": {"x": "y"}}) == NA


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        (_desched_policy(maxNoOfPodsToEvictTotal=None), "maxNoOfPodsToEvictTotal is not set"),
        (_desched_policy(maxNoOfPodsToEvictPerNode=50), "maxNoOfPodsToEvictPerNode is 50, above the allowed 5"),
        (_desched_policy(profiles=[]), "no profile enables RemovePodsViolatingNodeTaints"),
    ],
)
def test_descheduler_policy_violations(policy: dict[str, Any], message: str) -> None:
    found = check_resource(descheduler_bounded, CM, _config_map(policy))
    assert any(message in v for v in found), found


def test_descheduler_policy_must_include_the_burst_taint() -> None:
    policy = _desched_policy()
    wrong = copy.deepcopy(policy)
    wrong["profiles"][0]["pluginConfig"][0]["args"]["includedTaints"] = ["other/key"]
    (violation,) = check_resource(descheduler_bounded, CM, _config_map(wrong))
    assert "does not include the burst taint" in violation
    chart_values = {"values": {"deschedulerPolicy": wrong}}
    assert check_resource(descheduler_bounded, "kubernetes:helm.sh/v4:Chart", chart_values) != []
