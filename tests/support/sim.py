"""Helpers shared by the unit and integration tests of the simulated cluster's scripts."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def load_sim_module(name: str) -> ModuleType:
    """A script under sim/ imported as a module (sim/ is not a package)."""
    spec = importlib.util.spec_from_file_location(f"sim_{name}", ROOT / "sim" / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def tools_bin() -> Path:
    """The pinned tools' bin directory (it may not exist yet: make tools)."""
    out = subprocess.run([str(ROOT / "tools" / "bin-dir.sh")], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())
