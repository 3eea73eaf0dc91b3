"""Which pytest-xdist worker runs this test process: for tests that pick addresses of their own, so that two
workers never pick the same one."""

from __future__ import annotations

import os


def worker_index() -> int:
    """0 for ``gw0`` or a run without workers, 1 for ``gw1``, and so on."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    digits = name.removeprefix("gw")
    return int(digits) if digits.isdigit() else 0
