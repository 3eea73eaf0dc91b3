"""The session fixture that brings the local stack up: a missing program skips (fails under CI=true), saying what."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support import local_stack
from tests.support.sim import path_without


def _built(bin_dir: Path, *names: str) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in names:
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)


def test_tools_not_built_skip_naming_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    _built(tmp_path, *local_stack.NEEDED_TOOLS[1:])
    with pytest.raises(pytest.skip.Exception, match=r"\(missing: kwokctl\); run make tools"):
        local_stack.require_programs(tmp_path)


def test_under_ci_a_tool_not_built_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true and pinned tools not built"):
        local_stack.require_programs(tmp_path)


def test_a_debian_program_missing_says_run_make_debian_deps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    _built(tmp_path / "bin", *local_stack.NEEDED_TOOLS)
    monkeypatch.setenv("PATH", path_without(tmp_path, "prometheus"))
    with pytest.raises(pytest.skip.Exception, match="prometheus is not installed: run make debian-deps"):
        local_stack.require_programs(tmp_path / "bin")


def test_every_program_present_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _built(tmp_path / "bin", *local_stack.NEEDED_TOOLS)
    _built(tmp_path / "debian", *local_stack.DEBIAN_PROGRAMS)
    monkeypatch.setenv("PATH", f"{tmp_path / 'debian'}{os.pathsep}{os.environ['PATH']}")
    assert local_stack.require_programs(tmp_path / "bin") is None
