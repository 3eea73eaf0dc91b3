"""Helpers shared by the unit and integration tests of the simulated cluster's scripts."""

from __future__ import annotations

import importlib
import os
import subprocess
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def load_sim_module(name: str) -> ModuleType:
    """A module of sim/ (``sim.<name>``): the scripts of the simulated cluster are a package too."""
    return importlib.import_module(f"sim.{name}")


def tools_bin() -> Path:
    """The pinned tools' bin directory (it may not exist yet: make tools)."""
    out = subprocess.run([str(ROOT / "tools" / "bin-dir.sh")], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def path_without(scratch: Path, *programs: str) -> str:
    """A PATH with every program of the current one except ``programs`` (symlinks in ``scratch``/path)."""
    bin_dir = scratch / "path"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for entry in os.environ.get("PATH", os.defpath).split(os.pathsep):
        try:
            found = sorted(Path(entry).iterdir()) if entry and Path(entry).is_dir() else []
        except OSError:
            continue
        for program in found:
            link = bin_dir / program.name
            if program.name in programs or link.is_symlink() or program.is_dir() or not os.access(program, os.X_OK):
                continue
            link.symlink_to(program)
    return str(bin_dir)
