"""The simulated cluster for the benchmarks that run on it: ``make up`` first (idempotent: it reuses a running
cluster and its daemons, and deploys the working tree as it is)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def make_up(bench: str) -> bool:
    """Run ``make up``; False, with the tail of its output and ``<bench>: make up failed`` on stderr, if it failed."""
    up = subprocess.run(["make", "--no-print-directory", "up"], cwd=ROOT, capture_output=True, text=True, check=False)
    if up.returncode != 0:
        print(up.stdout[-3000:], up.stderr[-3000:], f"{bench}: make up failed", sep="\n", file=sys.stderr)
        return False
    return True
