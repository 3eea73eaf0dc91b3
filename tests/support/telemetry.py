"""Shared helpers for the telemetry tests: golden files, fixture trees, the exporter as a process, Debian tools.

Regenerate golden files with ``pytest tests/daemons/fabric_exporter --update-golden`` or ``UPDATE_GOLDEN=1``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from components.charts import go_module_dir

ROOT = Path(__file__).resolve().parents[2]
SYSFS_FIXTURE = ROOT / "tests" / "fixtures" / "sysfs"
#: Real Lustre client llite stats files (their source is in the directory's README).
LUSTRE_FIXTURE = ROOT / "tests" / "fixtures" / "filesystems" / "lustre_exporter"
#: The procfs release whose captured mountstats is read from the Go module cache.
PROCFS_MODULE = ("github.com/prometheus/procfs", "v0.19.2")
NVML_FIXTURE = ROOT / "tests" / "fixtures" / "telemetry_nvml" / "hgx-2gpu.json"
GOLDEN = ROOT / "tests" / "daemons" / "fabric_exporter" / "golden"


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden")) or os.environ.get("UPDATE_GOLDEN") == "1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def sysfs_copy(tmp_path: Path) -> Path:
    dst = tmp_path / "sys"
    shutil.copytree(SYSFS_FIXTURE, dst)
    return dst


@dataclass
class ExporterProcess:
    proc: subprocess.Popen[str]
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str = "/metrics") -> str:
        with urllib.request.urlopen(self.url + path, timeout=10) as resp:
            return str(resp.read().decode())

    def stop(self) -> tuple[int, list[dict[str, object]]]:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            _, err = self.proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        logs = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
        return self.proc.returncode, logs


def start_exporter(*args: str) -> ExporterProcess:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "daemons.fabric_exporter", "--listen-address=127.0.0.1", f"--port={port}", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    exp = ExporterProcess(proc, port)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            _, err = proc.communicate()
            raise RuntimeError(f"exporter exited {proc.returncode}: {err}")
        try:
            exp.get("/healthz")
            return exp
        except OSError:
            time.sleep(0.1)
    exp.stop()
    raise RuntimeError("exporter did not come up within 20s")


@pytest.fixture
def exporter_factory() -> Iterator[list[ExporterProcess]]:
    started: list[ExporterProcess] = []
    yield started
    for e in started:
        e.stop()


def ttar_file(archive: Path, path: str) -> str:
    """One file of a ttar archive (procfs's fixture format): ``Path: <p>``, ``Lines: <n>``, then the n lines."""
    lines = archive.read_text(encoding="utf-8", errors="replace").splitlines()
    start = lines.index(f"Path: {path}")
    count = int(lines[start + 1].removeprefix("Lines: "))
    return "\n".join(lines[start + 2 : start + 2 + count]) + "\n"


def procfs_mountstats() -> str:
    """procfs's captured ``/proc/<pid>/mountstats`` (an NFSv4 mount among local ones), from the Go module cache."""
    archive = go_module_dir(*PROCFS_MODULE) / "testdata" / "fixtures.ttar"
    return ttar_file(archive, "fixtures/proc/26231/mountstats")


def llite_dirs(root: Path) -> Path:
    """``root/llite/<instance>/stats`` for each captured Lustre stats file; returns the llite directory."""
    llite = root / "llite"
    for stats in sorted(LUSTRE_FIXTURE.glob("*.stats")):
        (llite / stats.stem).mkdir(parents=True, exist_ok=True)
        shutil.copy(stats, llite / stats.stem / "stats")
    return llite
