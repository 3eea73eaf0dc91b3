"""The evidence queries evaluated by Prometheus' own engine (promtool) over series shaped as dcgm-exporter's: as
its releases write them (the node as ``Hostname``), as its next release will (``hostname``), and a cluster half way
through that upgrade."""

from __future__ import annotations

from pathlib import Path

import pytest

from contract.dcgm import HOST_LABELS
from daemons.stall_detector import queries
from tests.support.promtool import expr_report

JOB = "dcgm-exporter"
#: Which host label each node's exporter writes: one spelling everywhere, or the nodes b and d upgraded.
EXPORTERS = {
    **{label: dict.fromkeys("abcde", label) for label in HOST_LABELS},
    "half-upgraded": {n: HOST_LABELS[n in "bd"] for n in "abcde"},
}
exporters = pytest.mark.parametrize("host", list(EXPORTERS.values()), ids=list(EXPORTERS))


def _gpu(metric: str, node: str, gpu: int, host: dict[str, str], job: str = JOB) -> str:
    return f'{metric}{{{host[node]}="{node}",gpu="{gpu}",UUID="GPU-{node}-{gpu}",job="{job}"}}'


def _promtool(tmp_path: Path, series: list[tuple[str, str]], expr: str, expected: dict[str, float]) -> str:
    """promtool's report ("" when ``expr`` at 10m returns exactly ``expected``, node -> value)."""
    samples = [{"labels": f'{{node="{n}"}}', "value": v} for n, v in sorted(expected.items())]
    return expr_report(tmp_path, [{"series": s, "values": v} for s, v in series], expr, "10m", samples)


@exporters
def test_hardware_xids_count_the_cards_codes_new_in_the_window_and_not_the_programs(
    tmp_path: Path, host: dict[str, str]
) -> None:
    x = queries.XID_METRIC
    series = [
        (_gpu(x, "a", 0, host), "0 0 0 0 0 0 0 13 13 13 13"),  # the program's: never evidence
        (_gpu(x, "a", 1, host), "0 0 0 0 0 0 0 0 43 43 43"),
        (_gpu(x, "b", 0, host), "0 0 0 0 0 0 0 79 79 79 79"),  # fallen off the bus, 3 minutes ago
        (_gpu(x, "b", 1, host), "0 0 0 0 0 0 0 0 0 94 94"),
        (_gpu(x, "c", 0, host), "48 48 48 48 48 48 48 48 48 48 48"),  # an old one, before the window
        (_gpu(x, "d", 0, host, job="kubernetes-pods"), "0 0 0 0 0 0 0 79 79 79 79"),  # someone else's look-alike
    ]
    expr = queries.hardware_xids(JOB, 300)
    assert _promtool(tmp_path, series, expr, {"b": 2}) == ""
    assert _promtool(tmp_path, series, expr, {"a": 2, "b": 2}) != ""


@exporters
def test_throttled_is_the_share_of_the_window_the_nodes_worst_gpu_was_slowed_for_heat_or_power(
    tmp_path: Path, host: dict[str, str]
) -> None:
    c = queries.CLOCK_EVENTS_METRIC
    series = [
        (_gpu(c, "a", 0, host), "64x10"),  # HW_THERMAL (0x40) all along
        (_gpu(c, "a", 1, host), "0x10"),
        (_gpu(c, "b", 0, host), "4x10"),  # SW_POWER_CAP (0x4): at its power limit under load, as designed
        (_gpu(c, "b", 1, host), "1x10"),  # GPU_IDLE (0x1)
        (_gpu(c, "e", 0, host), "0 0 0 0 0 0 0 0 136 136 136"),  # HW_SLOWDOWN|HW_POWER_BRAKE (0x88) from minute 8
    ]
    expr = queries.throttled(JOB, 300)
    # The 300 s window at 30 s steps: 11 points (5:00 to 10:00), 5 of them from minute 8 on.
    assert _promtool(tmp_path, series, expr, {"a": 1, "b": 0, "e": 5 / 11}) == ""
    assert _promtool(tmp_path, series, expr, {"a": 1, "b": 1, "e": 5 / 11}) != ""
