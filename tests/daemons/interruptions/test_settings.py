from __future__ import annotations

import json

import pytest

from contract.constants import RELIABILITY_CONFIGMAP, TRAINING_NAMESPACE
from contract.interruptions_settings import InterruptionsSettings, SettingsError, parse_settings


def test_defaults_follow_the_contract() -> None:
    s = InterruptionsSettings()
    assert s.namespace == TRAINING_NAMESPACE
    assert s.reliability_config_map == RELIABILITY_CONFIGMAP
    assert s.interval_seconds == 5.0
    assert s.default_max_restarts_per_hour == 6


def test_round_trip_through_the_file_the_component_writes() -> None:
    s = parse_settings({"defaultMaxRestartsPerHour": 3, "checkpointWriteSeconds": 12})
    again = parse_settings(json.loads(s.to_json()))
    assert again == s
    assert again.default_max_restarts_per_hour == 3


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"defaultMaxRestartsPerHour": 1001}, "defaultMaxRestartsPerHour"),
        ({"checkpointWriteSeconds": -1}, "checkpointWriteSeconds"),
        ({"ledgerEntries": 3}, "ledgerEntries"),
        ({"ledgerEntries": 201}, "ledgerEntries"),
        ({"interval": "100ms"}, "interval"),
        ({"renewDeadline": "20s"}, "renewDeadline"),
        ({"quarantineTaintKeys": ["not a key"]}, "quarantineTaintKeys"),
        ({"unknownKey": 1}, "unknownKey"),
    ],
)
def test_bad_settings_name_the_key(data: dict[str, object], key: str) -> None:
    with pytest.raises(SettingsError) as info:
        parse_settings(data)
    assert key in str(info.value)


def test_limits_that_hold() -> None:
    assert parse_settings({"defaultMaxRestartsPerHour": 0, "ledgerEntries": 4}).ledger_entries == 4
    assert parse_settings({"defaultMaxRestartsPerHour": 1000, "ledgerEntries": 200}).ledger_entries == 200


def test_not_a_mapping() -> None:
    with pytest.raises(SettingsError, match="expected a JSON object"):
        parse_settings([1, 2])
