"""The evidence queries evaluated by Prometheus' own engine (promtool) over series shaped as dcgm-exporter's."""

from __future__ import annotations

from pathlib import Path

from daemons.stall_detector import queries
from tests.support.promtool import expr_report

JOB = "dcgm-exporter"


def _gpu(metric: str, node: str, gpu: int, job: str = JOB) -> str:
    return f'{metric}{{Hostname="{node}",gpu="{gpu}",UUID="GPU-{node}-{gpu}",job="{job}"}}'


def _promtool(tmp_path: Path, series: list[tuple[str, str]], expr: str, expected: dict[str, float]) -> str:
    """promtool's report ("" when ``expr`` at 10m returns exactly ``expected``, node -> value)."""
    samples = [{"labels": f'{{node="{n}"}}', "value": v} for n, v in sorted(expected.items())]
    return expr_report(tmp_path, [{"series": s, "values": v} for s, v in series], expr, "10m", samples)


def test_hardware_xids_count_the_cards_codes_new_in_the_window_and_not_the_programs(tmp_path: Path) -> None:
    x = queries.XID_METRIC
    series = [
        (_gpu(x, "a", 0), "0 0 0 0 0 0 0 13 13 13 13"),  # the program's: never evidence
        (_gpu(x, "a", 1), "0 0 0 0 0 0 0 0 43 43 43"),
        (_gpu(x, "b", 0), "0 0 0 0 0 0 0 79 79 79 79"),  # fallen off the bus, 3 minutes ago
        (_gpu(x, "b", 1), "0 0 0 0 0 0 0 0 0 94 94"),
        (_gpu(x, "c", 0), "48 48 48 48 48 48 48 48 48 48 48"),  # an old one, before the window
        (_gpu(x, "d", 0, job="kubernetes-pods"), "0 0 0 0 0 0 0 79 79 79 79"),  # someone else's look-alike
    ]
    expr = queries.hardware_xids(JOB, 300)
    assert _promtool(tmp_path, series, expr, {"b": 2}) == ""
    assert _promtool(tmp_path, series, expr, {"a": 2, "b": 2}) != ""


def test_throttled_is_the_share_of_the_window_the_nodes_worst_gpu_was_slowed_for_heat_or_power(
    tmp_path: Path,
) -> None:
    c = queries.CLOCK_EVENTS_METRIC
    series = [
        (_gpu(c, "a", 0), "64x10"),  # HW_THERMAL (0x40) all along
        (_gpu(c, "a", 1), "0x10"),
        (_gpu(c, "b", 0), "4x10"),  # SW_POWER_CAP (0x4): at its power limit under load, as designed
        (_gpu(c, "b", 1), "1x10"),  # GPU_IDLE (0x1)
        (_gpu(c, "e", 0), "0 0 0 0 0 0 0 0 136 136 136"),  # HW_SLOWDOWN|HW_POWER_BRAKE (0x88) from minute 8
    ]
    expr = queries.throttled(JOB, 300)
    # The 300 s window at 30 s steps: 11 points (5:00 to 10:00), 5 of them from minute 8 on.
    assert _promtool(tmp_path, series, expr, {"a": 1, "b": 0, "e": 5 / 11}) == ""
    assert _promtool(tmp_path, series, expr, {"a": 1, "b": 1, "e": 5 / 11}) != ""
