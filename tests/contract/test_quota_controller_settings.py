"""The quota controller's settings: defaults, every bound with a value that passes and one that is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from contract.quota_controller_settings import QuotaControllerSettings, SettingsError, parse_settings
from tests.contract.settings_checks import read_back

FLAVORS = [{"name": "h100", "nodeLabels": {"gpu": "h100"}, "declaredGpus": 32}]


def test_defaults() -> None:
    s = QuotaControllerSettings()
    assert s.enabled
    assert (s.interval_seconds, s.not_ready_grace_seconds, s.return_after_seconds) == (1.0, 4.0, 60.0)
    assert s.out_taint_keys == ["gpucluster.io/quarantine", "gpucluster.io/acceptance-failed"]
    assert (s.accepted_label, s.accepted_value) == ("gpucluster.io/accepted", "true")


@pytest.mark.parametrize(("value", "ok"), [("5m", True), ("301s", False)])
def test_not_ready_grace_is_at_most_five_minutes(value: str, ok: bool) -> None:
    if ok:
        assert parse_settings({"notReadyGrace": value}).not_ready_grace == value
    else:
        with pytest.raises(SettingsError, match=r"notReadyGrace: .*longer than 5m"):
            parse_settings({"notReadyGrace": value})


@pytest.mark.parametrize(
    ("data", "ok"),
    [
        ({"minShare": 0.0, "maxShrinkShare": 1.0}, True),
        ({"minShare": 1.0, "maxShrinkShare": 0.01}, True),
        ({"minShare": 1.5}, False),
        ({"minShare": -0.1}, False),
        ({"maxShrinkShare": 0.0}, False),
        ({"maxShrinkShare": 1.01}, False),
    ],
)
def test_the_shrinking_bounds_are_shares(data: dict[str, float], ok: bool) -> None:
    assert (QuotaControllerSettings().min_share, QuotaControllerSettings().max_shrink_share) == (0.5, 0.25)
    if ok:
        s = parse_settings(data)
        assert (s.min_share, s.max_shrink_share) == (data["minShare"], data["maxShrinkShare"])
    else:
        with pytest.raises(SettingsError, match=next(iter(data))):
            parse_settings(data)


@pytest.mark.parametrize(("value", "ok"), [("1s", True), ("500ms", False)])
def test_the_interval_is_at_least_a_second(value: str, ok: bool) -> None:
    if ok:
        assert parse_settings({"interval": value}).interval_seconds == 1.0
    else:
        with pytest.raises(SettingsError, match="interval"):
            parse_settings({"interval": value})


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"flavors": FLAVORS * 2}, "flavors: flavor h100 is listed twice"),
        (
            {"flavors": FLAVORS, "clusterQueues": [{"name": "a", "quota": {"h100": 1}}] * 2},
            "clusterQueues: ClusterQueue a is listed twice",
        ),
        (
            {"flavors": FLAVORS, "clusterQueues": [{"name": "a", "quota": {"h100": 1}, "borrowingLimit": {"l40s": 1}}]},
            r"clusterQueues\[0\].borrowingLimit.l40s: unknown flavor",
        ),
        ({"flavors": [{**FLAVORS[0], "declaredGpus": 0}]}, r"flavors\[0\].declaredGpus"),
        ({"outTaintKeys": ["a.io/x", "a.io/x"]}, "taint keys listed twice"),
        ({"renewDeadline": "20s"}, "renewDeadline"),
        ({"notReadyGrace": 4}, "notReadyGrace"),
        ({"bogus": 1}, "bogus"),
    ],
)
def test_bad_settings_name_the_key(data: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        parse_settings(data)


def test_not_an_object_is_refused() -> None:
    with pytest.raises(SettingsError, match="expected a JSON object"):
        parse_settings(["a"])


def test_the_document_round_trips(tmp_path: Path) -> None:
    read_back(parse_settings({"flavors": FLAVORS, "clusterQueues": [{"name": "a", "quota": {"h100": 24}}]}), tmp_path)
