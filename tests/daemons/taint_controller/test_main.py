"""Its listen flag and /metrics: the exposition text and the endpoints (the kit's command line is held for every
controller in tests/daemons/toolkit)."""

from __future__ import annotations

import logging
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from daemons.taint_controller.__main__ import main
from daemons.taint_controller.metrics import Metrics
from daemons.toolkit.http import HttpService
from daemons.toolkit.listen import parse_listen
from daemons.toolkit.runner import routes

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("text", "parsed"), [(":9102", ("0.0.0.0", 9102)), ("127.0.0.1:0", ("127.0.0.1", 0)), ("[::1]:80", ("::1", 80))]
)
def test_listen(text: str, parsed: tuple[str, int]) -> None:
    assert parse_listen(text, default_host="0.0.0.0") == parsed


@pytest.mark.parametrize("text", ["9102", ":http", ":70000"])
def test_bad_listen_is_a_usage_error_naming_the_flag(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--settings", "unused.json", "--listen", text])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"--listen: {text!r} is not [HOST]:PORT" in err
    assert "Traceback" not in err


def test_metrics_exposition_names_and_initial_values() -> None:
    text = Metrics(wall_clock=lambda: 100.0).render().decode()
    for line in (
        'gpucluster_taint_controller_decisions_total{action="add"} 0.0',
        'gpucluster_taint_controller_decisions_total{action="remove"} 0.0',
        'gpucluster_taint_controller_decisions_total{action="hold"} 0.0',
        'gpucluster_taint_controller_query_errors_total{reason="empty"} 0.0',
        'gpucluster_taint_controller_query_errors_total{reason="unreachable"} 0.0',
        "gpucluster_taint_controller_headroom_gpus NaN",
        "gpucluster_taint_controller_pending_inference_pods NaN",
        "gpucluster_taint_controller_taint_present 0.0",
        "gpucluster_taint_controller_is_leader 0.0",
        "gpucluster_taint_controller_flaps_total 0.0",
        "gpucluster_taint_controller_last_transition_timestamp_seconds 0.0",
        "gpucluster_taint_controller_seconds_since_last_change NaN",
    ):
        assert line in text.splitlines(), line
    assert "# TYPE gpucluster_taint_controller_decisions_total counter" in text
    assert "process_" not in text  # a registry of its own


def test_metrics_after_a_transition() -> None:
    m = Metrics(wall_clock=lambda: 1000.0)
    m.mark_transition(940.0)
    m.flaps.inc()
    text = m.render().decode().splitlines()
    assert "gpucluster_taint_controller_seconds_since_last_change 60.0" in text
    assert "gpucluster_taint_controller_last_transition_timestamp_seconds 940.0" in text
    assert "gpucluster_taint_controller_flaps_total 1.0" in text


def test_http_endpoints() -> None:
    metrics = Metrics()
    metrics.headroom.set(7)
    server = HttpService("127.0.0.1", 0, routes(metrics), log=logging.getLogger("t")).start()
    base = server.url
    try:
        with urllib.request.urlopen(f"{base}/metrics", timeout=5) as r:
            assert r.headers["Content-Type"].startswith("text/plain")
            assert "gpucluster_taint_controller_headroom_gpus 7.0" in r.read().decode()
        with urllib.request.urlopen(f"{base}/healthz", timeout=5) as r:
            assert r.read() == b"ok\n"
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(f"{base}/nope", timeout=5)
        assert info.value.code == 404
    finally:
        assert server.stop()
