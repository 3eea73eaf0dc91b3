"""StallDetectorSettings: the defaults, every threshold with a value that passes and one refused at its key path, the
rules between fields, and the file round trip."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import pytest

from contract.stall_detector_settings import StallDetectorSettings, parse_settings
from tests.contract.settings_checks import assert_bound_holds, problems_of, read_back

problems = partial(problems_of, StallDetectorSettings)


def test_the_defaults() -> None:
    s = StallDetectorSettings()
    assert (s.enabled, s.namespace, s.replicas, s.lease_name) == (
        True,
        "gpucluster-training",
        2,
        "gpucluster-stall-detector",
    )
    assert (s.stall_after_seconds, s.startup_grace_seconds, s.quiet_max_seconds, s.interval_seconds) == (
        300,
        600,
        1800,
        15,
    )
    assert (s.tensor_floor, s.fabric_floor_bytes, s.straggler_ratio) == (0.05, 1 << 20, 0.8)
    assert (s.transport_errors, s.link_errors, s.repeat_count, s.repeat_window_seconds) == (10, 1, 3, 86400)
    assert (s.max_restarts_per_cycle, s.dry_run, s.workload_namespaces) == (4, False, [])


@pytest.mark.parametrize(
    ("key", "good", "bad", "fragment"),
    [
        ("tensorFloor", 0.99, 1.0, "less than 1"),
        ("tensorFloor", 0.001, 0.0, "greater than 0"),
        ("fabricFloor", "1", "0", "positive"),
        ("fabricFloor", "100Mi", "1m", "fraction of a byte"),
        ("storageFloor", "1", "0", "positive"),
        ("storageFloor", "100Mi", "1m", "fraction of a byte"),
        ("stragglerRatio", 0.95, 1.0, "less than 1"),
        ("transportErrors", 1, 0, "greater than 0"),
        ("linkErrors", 1, 0, "greater than 0"),
        ("repeatCount", 1, 0, "greater than or equal to 1"),
        ("repeatCount", 100, 101, "less than or equal to 100"),
        ("maxRestartsPerCycle", 1, 0, "greater than or equal to 1"),
        ("startupGrace", "1s", "0s", "longer than zero"),
        ("quietMax", "1s", "0s", "longer than zero"),
        ("interval", "1s", "500ms", "shorter than 1s"),
        ("prometheusUrl", "https://prom.example:9090", "prom:9090", "prometheusUrl"),
        ("dcgmScrapeJob", "dcgm-exporter", "dcgm exporter", "dcgmScrapeJob"),
        ("workloadNamespaces", ["team-a"], ["Team A"], "DNS label"),
    ],
)
def test_each_bound_passes_at_its_limit_and_refuses_beyond(key: str, good: Any, bad: Any, fragment: str) -> None:
    assert_bound_holds(StallDetectorSettings, key, good, bad, fragment)


def test_the_interval_must_see_a_stall_within_stall_after_and_the_window_hold_two_stalls() -> None:
    assert parse_settings({"stallAfter": "16s"}).stall_after_seconds == 16
    assert "interval (15s) must be shorter than stallAfter (15s)" in problems({"stallAfter": "15s"})
    assert "stallAfter (24h) must be shorter than repeatWindow (24h)" in problems({"stallAfter": "24h"})
    assert "requestTimeout (15s) must be shorter than interval (15s)" in problems({"requestTimeout": "15s"})


def test_the_file_round_trips(tmp_path: Path) -> None:
    s = parse_settings({"stallAfter": "2m", "workloadNamespaces": ["team-a"], "fabricFloor": "4Mi"})
    assert read_back(s, tmp_path).fabric_floor_bytes == 4 << 20
