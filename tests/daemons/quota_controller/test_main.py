"""The command line: help for every flag, exit 2 with one clear message on bad settings."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from daemons.quota_controller.__main__ import build_parser, main

ROOT = Path(__file__).resolve().parents[3]


def test_help_documents_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--settings", "--kubeconfig", "--listen", "--identity", "--once", "--dry-run", "--log-level"):
        assert flag in out
    for action in build_parser()._actions:
        assert action.help, f"{action.option_strings} has no help"
    assert build_parser().parse_args(["--settings", "s.json"]).listen == ":9106"


def test_bad_settings_exit_2_with_one_clear_message(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"notReadyGrace": "10m", "flavors": [{"name": "h100"}]}))
    proc = subprocess.run(
        [sys.executable, "-m", "daemons.quota_controller", "--settings", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "notReadyGrace" in proc.stderr
    assert "flavors[0]" in proc.stderr
