"""What the flip's requests met, read from vegeta's own output: a real capture, and refusals of what is not it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.sim import load_sim_module

load = load_sim_module("load")
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vegeta"


def test_a_real_vegeta_capture_reads_back_request_by_request() -> None:
    """``vegeta-12.13.0-results.csv``, captured by ``capture.py`` beside it: 503 while loading, 200, then gone."""
    requests = load.parse_results((FIXTURES / "vegeta-12.13.0-results.csv").read_text())
    assert len(requests) == 30
    codes = sorted({r.code for r in requests})
    assert codes == [0, 200, 503]
    gone = [r for r in requests if r.code == 0]  # the replica stopped: refused, or reset as it closed
    assert gone
    assert all("connect: connection refused" in r.error or "connection reset" in r.error for r in gone)
    assert all(r.latency > 0 for r in requests)
    assert all(1.7e9 < r.sent < 2.1e9 for r in requests)  # Unix seconds, from nanoseconds
    figures = load.request_figures(requests)
    assert figures.sent == 30
    assert figures.failed == sum(1 for r in requests if r.code != 200)
    assert dict(figures.causes)["503"] == sum(1 for r in requests if r.code == 503)
    assert figures.seconds_with_errors >= 1


def test_the_figures_of_hand_made_requests() -> None:
    t0 = 1_800_000_000.0
    reqs = [load.Request(t0 + i * 0.1, 200, 0.010 + i * 0.001, "") for i in range(100)]
    reqs += [load.Request(t0 + 3.5, 503, 0.002, ""), load.Request(t0 + 7.2, 0, 1.0, "dial tcp: connection refused")]
    f = load.request_figures(reqs)
    assert (f.sent, f.failed, f.seconds_with_errors) == (102, 2, 2)
    assert f.causes == (("503", 1), ("connection refused", 1))
    assert 55 < f.p50_ms < 65
    seconds = load.per_second(reqs, t0)
    assert [s.sent for s in seconds][:3] == [10, 10, 10]
    assert seconds[3].failed == 1


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("1,200,5\n", "line 1: 3 fields, expected 12"),
        ("x,200,5,0,0,,,,0,GET,http://a,\n", "line 1: timestamp, code and latency must be whole numbers"),
        ("1700000000000000000,200,-5,0,0,,,,0,GET,http://a,\n", "line 1: timestamp 1700000000000000000, code 200"),
    ],
)
def test_what_is_not_vegeta_output_is_refused_by_line(text: str, problem: str) -> None:
    with pytest.raises(load.LoadError, match=problem):
        load.parse_results(text)
