"""The exporter as a process: flags, /metrics, JSON logs, SIGTERM, and bad input turned into clear errors."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.error
from pathlib import Path

import pytest

from daemons.fabric_exporter.__main__ import build_parser
from tests.support.telemetry import NVML_FIXTURE, ROOT, start_exporter


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "daemons.fabric_exporter", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_help_documents_every_flag() -> None:
    out = run_cli("--help")
    assert out.returncode == 0
    flags = [a.option_strings[-1] for a in build_parser()._actions if a.option_strings]
    assert len(flags) >= 7
    for flag in flags:
        assert flag in out.stdout, flag
    for action in build_parser()._actions:
        assert action.help, f"{action.option_strings} has no help text"


def test_serves_metrics_logs_json_and_stops_on_sigterm(sysfs_copy: Path) -> None:
    exp = start_exporter(f"--sysfs-root={sysfs_copy}", f"--nvml-fixture={NVML_FIXTURE}", "--node-name=n1")
    try:
        body = exp.get("/metrics")
        assert 'gpucluster_fabric_collector_success{collector="nvlink",node="n1"} 1\n' in body
        assert 'gpucluster_fabric_collector_success{collector="infiniband",node="n1"} 0\n' in body  # malformed files
        exp.get("/metrics")
        assert exp.get("/healthz") == "ok\n"
        with pytest.raises(urllib.error.HTTPError, match="404"):
            exp.get("/nope")
    finally:
        code, logs = exp.stop()
    assert code == 0
    msgs = [entry["msg"] for entry in logs]
    assert msgs.count("serving") == 1
    assert msgs[-2:] == ["shutting down", "stopped"]
    assert all({"ts", "level", "logger", "msg"} <= set(e) for e in logs)
    malformed = [e for e in logs if e["level"] == "error" and "port_rcv_errors" in e["msg"]]
    assert len(malformed) == 1  # two scrapes, logged once
    assert malformed[0]["collector"] == "infiniband"


def test_without_nvml_library_the_infiniband_series_are_still_served(sysfs_copy: Path) -> None:
    # On this machine there is no NVIDIA driver: the real pynvml path fails to load libnvidia-ml.
    exp = start_exporter(f"--sysfs-root={sysfs_copy}", "--node-name=n1")
    try:
        body = exp.get("/metrics")
    finally:
        code, logs = exp.stop()
    assert 'gpucluster_fabric_collector_success{collector="nvlink",node="n1"} 0\n' in body
    assert "gpucluster_fabric_infiniband_port_errors_total{" in body
    assert code == 0
    assert any(e.get("collector") == "nvlink" and e["level"] == "error" for e in logs)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--collectors=infiniband,gpfs"], "--collectors: unknown or empty ['gpfs']"),
        (["--port=70000"], "--port: 70000 is not a TCP port"),
        (["--port=abc"], "argument --port: invalid int value: 'abc'"),
        (["--nvml-fixture=/nonexistent.json"], "--nvml-fixture: NVML fixture /nonexistent.json: FileNotFoundError"),
        (["--expected-hcas=-1"], "--expected-hcas: -1 is not a device count (0-4096)"),
        (["--expected-gpus=99999"], "--expected-gpus: 99999 is not a device count (0-4096)"),
        (["--expected-hcas=two"], "argument --expected-hcas: invalid int value: 'two'"),
    ],
)
def test_bad_flags_are_clear_errors_not_tracebacks(args: list[str], message: str) -> None:
    out = run_cli(*args)
    assert out.returncode == 2
    assert message in out.stderr
    assert "Traceback" not in out.stderr


def test_malformed_nvml_fixture_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "nvml.json"
    bad.write_text(json.dumps({"gpus": [{"links": []}]}))
    out = run_cli(f"--nvml-fixture={bad}")
    assert out.returncode == 2
    assert f"NVML fixture {bad}: KeyError: 'uuid'" in out.stderr
    assert "Traceback" not in out.stderr


def test_port_in_use_is_a_logged_error(sysfs_copy: Path) -> None:
    exp = start_exporter(f"--sysfs-root={sysfs_copy}", f"--nvml-fixture={NVML_FIXTURE}")
    try:
        out = run_cli("--listen-address=127.0.0.1", f"--port={exp.port}", f"--sysfs-root={sysfs_copy}")
    finally:
        exp.stop()
    assert out.returncode == 1
    (entry,) = [json.loads(line) for line in out.stderr.splitlines() if line.startswith("{")]
    assert entry["msg"] == "cannot listen"
    assert entry["port"] == exp.port
    assert "Traceback" not in out.stderr


def test_a_node_missing_its_hcas_is_not_a_healthy_scrape(tmp_path: Path, sysfs_copy: Path) -> None:
    empty = start_exporter(f"--sysfs-root={tmp_path / 'no-sys'}", "--collectors=infiniband", "--expected-hcas=8")
    try:
        body = empty.get("/metrics")
    finally:
        empty.stop()
    assert re.search(r'gpucluster_fabric_collector_success\{collector="infiniband",node="[^"]*"\} 0\n', body)
    assert re.search(r'gpucluster_fabric_devices_expected\{collector="infiniband",node="[^"]*"\} 8\n', body)
    assert re.search(r'gpucluster_fabric_devices\{collector="infiniband",node="[^"]*"\} 0\n', body)
    full = start_exporter(f"--sysfs-root={sysfs_copy}", "--collectors=infiniband", "--expected-hcas=4", "--node-name=n")
    try:
        body = full.get("/metrics")
    finally:
        full.stop()
    assert 'gpucluster_fabric_devices{collector="infiniband",node="n"} 4\n' in body
    missing = 'gpucluster_fabric_collector_errors_total{collector="infiniband",kind="devices_missing",node="n"}'
    assert f"{missing} 0\n" in body
