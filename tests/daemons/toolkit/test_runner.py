"""Every registered controller's command line, as the kit's runner makes it from the spec: every flag documented,
the spec's port the default listen address, bad settings refused with one message naming each problem (exit 2, no
traceback), a missing settings file named, a bad listen address a usage error, disabled settings exit 0 without
touching a cluster. Run as the Deployment runs it: ``python3 -m daemons.<name>``."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from contract.registry import CONTROLLERS
from daemons.toolkit import runner
from daemons.toolkit.serve import EXIT_BAD_SETTINGS

ROOT = Path(__file__).resolve().parents[3]
FLAGS = ("--settings", "--kubeconfig", "--listen", "--identity", "--once", "--dry-run", "--log-level")

pytestmark = pytest.mark.parametrize("spec", CONTROLLERS, ids=lambda s: s.name)


def main_of(spec: Any) -> Callable[[Sequence[str] | None], int]:
    main: Callable[[Sequence[str] | None], int] = importlib.import_module(f"{spec.module}.__main__").main
    return main


def test_help_documents_every_flag_and_listens_on_the_specs_port(spec: Any, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main_of(spec)(["--help"])
    assert info.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert all(flag in out for flag in FLAGS)
    assert out.startswith(f"usage: {spec.app} ")
    parser = runner.build_parser(spec)
    assert all(action.help for action in parser._actions), "a flag without help"
    assert parser.parse_args(["--settings", "s.json"]).listen == f":{spec.metrics_port}"


def test_bad_settings_exit_2_naming_every_problem(spec: Any, tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"replicas": 0, "interval": "soon", "bogusKey": 1}))
    proc = subprocess.run(
        [sys.executable, "-m", spec.module, "--settings", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == EXIT_BAD_SETTINGS
    assert "Traceback" not in proc.stderr
    for key in ("replicas", "interval", "bogusKey"):
        assert key in proc.stderr, key


def test_a_missing_settings_file_is_named(spec: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main_of(spec)(["--settings", str(tmp_path / "absent.json")]) == EXIT_BAD_SETTINGS
    assert "absent.json" in capsys.readouterr().err


def test_a_bad_listen_address_is_a_usage_error(spec: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main_of(spec)(["--settings", str(tmp_path / "s.json"), "--listen", "nowhere"])
    assert info.value.code == 2
    assert "--listen: 'nowhere' is not [HOST]:PORT" in capsys.readouterr().err


def test_disabled_exits_0_without_touching_a_cluster(spec: Any, tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"enabled": False}))
    assert main_of(spec)(["--settings", str(path), "--kubeconfig", str(tmp_path / "absent")]) == 0
