"""The daemon's command line: --help, bad settings (exit 2, no traceback), SIGTERM (exit 0)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from daemons.burst_provider.__main__ import build_parser, main
from daemons.burst_provider.providers.base import AdapterContext, Provider, ProviderSettingsLike
from daemons.burst_provider.registry import ProviderBuildError, build_providers
from daemons.burst_provider.secrets import SecretMissingError, SecretStore
from tests.daemons.burst_provider.support import make_settings, provider_entry

ROOT = Path(__file__).resolve().parents[3]


def test_help_documents_every_flag() -> None:
    text = build_parser().format_help()
    for flag in (
        "--settings",
        "--node-name",
        "--listen",
        "--listen-metrics",
        "--kubeconfig",
        "--secrets-dir",
        "--startup-grace",
        "--log-level",
    ):
        assert flag in text


def test_bad_settings_exit_2_with_every_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "s.json"
    f.write_text(
        json.dumps({"virtualNode": {"nodeImage": "x:1", "providerImage": "y:1"}, "providers": [{"name": "A"}]})
    )
    assert main(["--settings", str(f), "--no-source-cluster"]) == 2
    err = capsys.readouterr().err
    assert "providers[0].name" in err
    assert "providers[0].maxGpus: required key is missing" in err
    assert "Traceback" not in err


def test_a_bad_metrics_address_exits_2_naming_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "s.json"
    entry = provider_entry("fake-a")
    f.write_text(json.dumps({"virtualNode": {"nodeImage": "x:1", "providerImage": "y:1"}, "providers": [entry]}))
    assert main(["--settings", str(f), "--no-source-cluster", "--listen-metrics", "127.0.0.1:99999"]) == 2
    err = capsys.readouterr().err
    assert "--listen-metrics" in err
    assert "Traceback" not in err


def test_unknown_adapter_is_a_clean_error(tmp_path: Path) -> None:
    settings = make_settings(provider_entry("a"))
    with pytest.raises(ProviderBuildError, match="providers a"):
        build_providers(settings, AdapterContext(SecretStore.from_values({})), factories={"fake": _refuse})


def _refuse(settings: ProviderSettingsLike, context: AdapterContext) -> Provider:
    raise ValueError("no url")


def test_secret_store_reads_files_and_hides_values(tmp_path: Path) -> None:
    (tmp_path / "runpodApiKey").write_text("sk-very-secret\n")
    store = SecretStore(tmp_path)
    assert store.get("runpodApiKey") == "sk-very-secret"
    assert "sk-very-secret" not in repr(store)
    assert not store.has("other")
    with pytest.raises(SecretMissingError, match="other"):
        store.get("other")
    with pytest.raises(SecretMissingError):
        store.get("../etc/passwd")
    mem = SecretStore.from_values({"k": "v"})
    assert mem.get("k") == "v"
    assert "v'" not in repr(mem)


def test_process_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    settings = tmp_path / "s.json"
    entry = provider_entry("fake-a")
    entry["fake"] = {"url": "http://127.0.0.1:9"}  # nothing listens: listings fail, the service stays not ready
    settings.write_text(
        json.dumps(
            {
                "virtualNode": {"nodeImage": "x/node:1.0", "providerImage": "x/daemons:1.0"},
                "providers": [entry],
            }
        )
    )
    port_file = tmp_path / "port"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "daemons.burst_provider",
            "--settings",
            str(settings),
            "--listen",
            "127.0.0.1:0",
            "--listen-metrics",
            "127.0.0.1:0",
            "--no-source-cluster",
            "--log-level",
            "info",
        ],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stderr is not None
        port = metrics_port = 0
        deadline = time.monotonic() + 30
        while not port and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            entry_log = json.loads(line)
            if entry_log.get("msg") == "serving":
                port = int(entry_log["address"].rsplit(":", 1)[1])
            if entry_log.get("msg") == "serving metrics":
                metrics_port = int(entry_log["address"].rsplit(":", 1)[1])
        assert port, "the daemon never logged its address"
        assert metrics_port, "the daemon never logged its metrics address"
        port_file.write_text(str(port))
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/capacity", timeout=10) as resp:
            assert json.loads(resp.read())["nvidia.com/gpu"] == "16"
        # The metrics listener serves /metrics and /healthz (503: the listings fail), never the API.
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as resp:
            assert b"gpucluster_burst_decisions" in resp.read()
        for path, status in (("/healthz", 503), ("/v1/capacity", 404)):
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}{path}", timeout=10)
            assert refused.value.code == status
        # Alive all the same, while the listings fail: the kubelet's liveness probe leaves it running.
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/livez", timeout=10) as resp:
            assert resp.status == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
