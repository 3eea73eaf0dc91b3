"""venv.lock: the build venv's distributions, each pinned to one file by its hash (``make venv`` installs only it)."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from images.steps import BuildError, canonical, read_lock
from images.venv_lock import VENV_LOCK, check_venv_lock

PYPROJECT = VENV_LOCK.parent / "pyproject.toml"


def test_the_committed_lock_holds_every_pin_of_pyproject_with_a_hash() -> None:
    check_venv_lock(VENV_LOCK, PYPROJECT)
    locked = read_lock(VENV_LOCK)
    assert {"pulumi", "pytest", "setuptools", "pip"} <= set(locked)
    assert all(len(hashes) == 1 for _, hashes in locked.values()), "one file per distribution"


def test_the_venv_these_tests_run_in_is_the_lock() -> None:
    """make venv installed exactly the lock's versions (a venv built some other way fails here)."""
    installed = {canonical(d.metadata["Name"]): d.version for d in metadata.distributions()}
    differ = {n: (v, installed.get(n)) for n, (v, _) in read_lock(VENV_LOCK).items() if installed.get(n) != v}
    assert not differ, f"locked vs installed: {differ}"


def test_a_lock_behind_a_moved_pin_is_refused(tmp_path: Path) -> None:
    version = read_lock(VENV_LOCK)["pydantic"][0]
    stale = tmp_path / "venv.lock"
    stale.write_text(VENV_LOCK.read_text(encoding="utf-8").replace(f"pydantic=={version} ", "pydantic==0.0.1 "))
    said = rf"pydantic: pyproject.toml pins {version}, the lock has 0\.0\.1.*make venv-lock"
    with pytest.raises(BuildError, match=said):
        check_venv_lock(stale, PYPROJECT)


def test_a_missing_package_an_unhashed_line_and_a_twice_locked_one_are_refused(tmp_path: Path) -> None:
    text = VENV_LOCK.read_text(encoding="utf-8")
    lock = tmp_path / "venv.lock"
    lock.write_text("".join(line + "\n" for line in text.splitlines() if not line.startswith("pytest==")))
    with pytest.raises(BuildError, match=r"pytest==[0-9.]+ is not in the lock"):
        check_venv_lock(lock, PYPROJECT)

    lines = text.splitlines()
    n, first = next((i, line) for i, line in enumerate(lines) if not line.startswith("#"))
    lock.write_text("\n".join([*lines[:n], first.split()[0], *lines[n + 1 :]]) + "\n")
    with pytest.raises(BuildError, match=rf"venv.lock:{n + 1}: .* needs one or more --hash=sha256"):
        read_lock(lock)

    lock.write_text(text + first + "\n")
    with pytest.raises(BuildError, match="is locked twice"):
        read_lock(lock)
    with pytest.raises(BuildError, match="is missing: run make venv-lock"):
        check_venv_lock(tmp_path / "absent.lock", PYPROJECT)


def _pip_fetch(lock: Path, into: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--require-hashes", "-d", str(into)]
    return subprocess.run([*argv, "-r", str(lock)], capture_output=True, text=True, timeout=300, check=False)


def test_pip_takes_the_locked_file_and_refuses_one_whose_hash_differs(tmp_path: Path) -> None:
    """The mechanism make venv relies on, with the lock's own line for one small wheel (pip's cache serves it)."""
    line = next(line for line in VENV_LOCK.read_text(encoding="utf-8").splitlines() if line.startswith("installer=="))
    good = tmp_path / "good.lock"
    good.write_text(line + "\n")
    ok = _pip_fetch(good, tmp_path / "good")
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert [p.name.split("-")[0] for p in (tmp_path / "good").iterdir()] == ["installer"]

    digest = line.rsplit(":", 1)[1]
    bad = tmp_path / "bad.lock"
    bad.write_text(line.replace(digest, "0" * 64) + "\n")
    refused = _pip_fetch(bad, tmp_path / "bad")
    assert refused.returncode != 0
    assert "DO NOT MATCH THE HASHES" in refused.stderr, refused.stderr[-2000:]
