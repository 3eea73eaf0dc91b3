"""The PyTorch the benchmarks run with: its own virtual environment, installed from PyPI on first use.

``torch_python`` returns that environment's python with ``torch==version`` (and numpy, which gloo's object
collectives need), installing what is missing: about 5 GB the first time, into
``~/.cache/gpucluster/torch-<version>`` by default.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

TORCH_VERSION = "2.15.0"
DEFAULT_VENV = Path.home() / ".cache" / "gpucluster" / f"torch-{TORCH_VERSION}"


def torch_python(venv: Path, version: str) -> Path:
    """The venv's python with ``torch==version`` and numpy, installing them from PyPI when missing (about 5 GB)."""
    python = venv / "bin" / "python"
    probe = [str(python), "-c", "import numpy, torch; print(torch.__version__)"]
    if python.exists():
        seen = subprocess.run(probe, capture_output=True, text=True, check=False).stdout.strip()
        if seen.split("+")[0] == version:
            return python
    print(f"installing torch=={version} and numpy into {venv} (first run; about 5 GB from PyPI) ...", flush=True)
    started = time.monotonic()
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", f"torch=={version}", "numpy"], check=True)
    print(f"installed in {time.monotonic() - started:.0f} s", flush=True)
    return python
