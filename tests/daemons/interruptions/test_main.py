"""The command line: help for every flag, exit 2 with one clear message on bad settings, 0 when disabled."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from daemons.interruptions.__main__ import build_parser, main

ROOT = Path(__file__).resolve().parents[3]


def test_help_documents_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--settings", "--kubeconfig", "--listen", "--identity", "--once", "--dry-run", "--log-level"):
        assert flag in out
    assert "max-restarts-per-hour" in out
    for action in build_parser()._actions:
        assert action.help, f"{action.option_strings} has no help"
    assert build_parser().parse_args(["--settings", "s.json"]).listen == ":9112"


def test_bad_settings_exit_2_with_one_clear_message(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text(
        json.dumps({"defaultMaxRestartsPerHour": -1, "checkpointWriteSeconds": "slow", "retryPeriod": "1h"})
    )
    proc = subprocess.run(
        [sys.executable, "-m", "daemons.interruptions", "--settings", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    for key in ("defaultMaxRestartsPerHour", "checkpointWriteSeconds", "retryPeriod"):
        assert key in proc.stderr


def test_disabled_exits_0(tmp_path: Path) -> None:
    path = tmp_path / "settings.yaml"
    path.write_text("enabled: false\n")
    assert main(["--settings", str(path)]) == 0
