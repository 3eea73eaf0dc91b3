"""QuarantineSettings: the defaults, every bound with a value that passes and one refused at its key path, the rules
between fields, the file round trip, and the reason words of the alerts."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from contract.quarantine_settings import (
    DEFAULT_SIGNAL_QUERY,
    QuarantineSettings,
    load_settings,
    parse_settings,
    reason_of,
)
from tests.contract.settings_checks import assert_bound_holds, problems_of, read_back

FLAVORS = [{"name": "h100", "nodeLabels": {"gpu.example/type": "h100"}}]

problems = partial(problems_of, QuarantineSettings)


def test_the_defaults() -> None:
    s = QuarantineSettings()
    assert (s.enabled, s.namespace, s.replicas, s.lease_name) == (
        True,
        "gpucluster-capacity",
        2,
        "gpucluster-quarantine",
    )
    firing = 'ALERTS{alertstate="firing",gpucluster_signal="gpu-quarantine"}'
    assert s.signal_query == DEFAULT_SIGNAL_QUERY == f"{firing} and (time() - timestamp({firing}) < 150)"
    assert (s.interval_seconds, s.max_share, s.breaker_window_seconds, s.release_grace_seconds) == (15, 0.1, 3600, 1800)
    assert (s.ledger_retention_seconds, s.warning_event_interval_seconds, s.request_timeout_seconds) == (
        30 * 24 * 3600,
        300,
        5,
    )
    assert (s.dry_run, s.flavors) == (False, [])


@pytest.mark.parametrize(
    ("key", "good", "bad", "fragment"),
    [
        ("maxShare", 1.0, 1.5, "less than or equal to 1"),
        ("maxShare", 0.01, 0.0, "greater than 0"),
        ("breakerWindow", "168h", "169h", "longer than a week"),
        ("releaseGrace", "1s", "0s", "longer than zero"),
        ("ledgerRetention", "8784h", "8785h", "longer than a year"),
        ("ledgerRetention", "2h", "0s", "longer than zero"),
        ("interval", "1s", "500ms", "shorter than 1s"),
        ("replicas", 3, 4, "less than or equal to 3"),
        ("signalQuery", "up", "", "empty"),
        ("namespace", "capacity", "Capacity", "DNS label"),
        ("prometheusUrl", "https://prom.example:9090", "prom:9090", "prometheusUrl"),
    ],
)
def test_each_bound_passes_at_its_limit_and_refuses_beyond(key: str, good: Any, bad: Any, fragment: str) -> None:
    assert_bound_holds(QuarantineSettings, key, good, bad, fragment)


def test_the_request_timeout_must_fit_the_interval() -> None:
    assert parse_settings({"interval": "6s", "requestTimeout": "5s"}).request_timeout_seconds == 5
    assert "requestTimeout (5s) must be shorter than interval (5s)" in problems({"interval": "5s"})


def test_the_grace_and_the_window_must_fit_the_retention() -> None:
    assert parse_settings({"ledgerRetention": "2h"}) is not None
    text = problems({"ledgerRetention": "1h"})
    assert "breakerWindow (1h) must be shorter than ledgerRetention (1h)" in text
    assert "releaseGrace" not in text
    assert "releaseGrace (30m) must be shorter than ledgerRetention (20m)" in problems(
        {"ledgerRetention": "20m", "breakerWindow": "10m"}
    )


def test_lease_timings_follow_the_common_rules() -> None:
    assert "renewDeadline (15s) must be shorter than leaseDuration (15s)" in problems({"renewDeadline": "15s"})


def test_flavors_are_checked_with_their_key_paths() -> None:
    ok = parse_settings({"flavors": FLAVORS})
    assert ok.flavors[0].node_labels == {"gpu.example/type": "h100"}
    text = problems({"flavors": [*FLAVORS, FLAVORS[0], {"name": "L40S", "nodeLabels": {"bad key!": "x"}}]})
    assert "flavors[2].name" in text
    assert "flavors[2].nodeLabels" in text
    assert "flavors listed twice: h100" in problems({"flavors": [FLAVORS[0], FLAVORS[0]]})
    assert "flavors[0].nodeLabels" in problems({"flavors": [{"name": "h100", "nodeLabels": {}}]})


def test_unknown_keys_and_a_non_object_are_refused() -> None:
    assert "maxShares" in problems({"maxShares": 0.2})
    assert "expected a JSON object" in problems(["maxShare"])


def test_the_file_round_trips(tmp_path: Path) -> None:
    s = read_back(parse_settings({"flavors": FLAVORS, "maxShare": 0.25}), tmp_path)
    assert json.loads(s.to_json())["breakerWindow"] == "1h"
    (tmp_path / "s.yaml").write_text("maxShare: 0.2\n")
    assert load_settings(tmp_path / "s.yaml").max_share == 0.2


@pytest.mark.parametrize(
    ("alert", "reason"),
    [
        ("GpuTemperatureHigh", "gpu-temperature"),
        ("GpuXidError", "xid"),
        ("NvlinkErrorsIncreasing", "nvlink-errors"),
        ("InfinibandLinkErrorsIncreasing", "infiniband-errors"),
        ("FabricDevicesMissing", "fabric-devices-missing"),
        ("x" * 80, "x" * 63),
        ("!!!", "alert"),
    ],
)
def test_reason_words_are_label_values(alert: str, reason: str) -> None:
    assert reason_of(alert) == reason
