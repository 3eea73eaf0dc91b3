"""What a test needs from the machine: a pinned tool, a Debian program, a service.

``missing(reason)`` skips the test on a developer's machine and fails it under ``CI=true``, where nothing may skip
silently. The root ``conftest.py`` also turns any other skip into a failure under CI, so a test that forgets to
come through here cannot hide either.
"""

from __future__ import annotations

import os
import shutil
from typing import NoReturn

import pytest


def under_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def missing(reason: str) -> NoReturn:
    """Skip (developer machine) or fail (CI) because ``reason``: say what to install or run."""
    if under_ci():
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    pytest.skip(reason)


def debian_tool(name: str) -> str:
    """Path of a Debian-packaged program (``make debian-deps`` installs them)."""
    path = shutil.which(name)
    if path is None:
        missing(f"{name} is not installed: run make debian-deps (tools/install-debian-deps.sh)")
    return path
