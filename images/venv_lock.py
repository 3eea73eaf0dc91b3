"""The build venv's lock: every distribution ``make venv`` installs, pinned to one file by its sha256.

``make venv`` (and so ``make images`` in the release workflow) installs ``venv.lock`` with
``pip install --require-hashes --no-deps``: a file whose hash differs from the lock's, or a package the lock does not
name, stops the install. The project itself is then installed editable without build isolation, so its build backend
(setuptools) comes from the lock too, and ``pip check`` confirms the set is complete.

``python -m images lock-venv`` writes the lock for this interpreter (CPython 3.11 on x86_64 Linux, as the release
container runs): pyproject.toml's dependencies, its ``dev`` extra, its build-system requirements and pip. The
versions the current lock gives packages that pyproject.toml does not pin are kept as constraints, so re-locking
after one pin moved changes only what that pin drags along.
"""

from __future__ import annotations

import sys
import tempfile
import tomllib
from pathlib import Path

from images.steps import NAME, BuildError, canonical, hashed_pins, read_lock, run

VENV_LOCK = Path(__file__).resolve().parent.parent / "venv.lock"
BUILD_TOOLS = ("pip",)
_HEADER = (
    "# The build venv (make venv): each distribution, one file, its sha256; for CPython 3.11 on x86_64 Linux.\n"
    "# Written by `python -m images lock-venv` (make venv-lock) from pyproject.toml; do not edit by hand.\n"
)


def venv_requirements(pyproject: Path) -> list[str]:
    """What the venv must hold: dependencies, the ``dev`` extra, the build backend, pip (as pyproject.toml says)."""
    try:
        doc = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        reqs = [
            *doc["project"]["dependencies"],
            *doc["project"]["optional-dependencies"]["dev"],
            *doc["build-system"]["requires"],
        ]
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, KeyError, TypeError) as exc:
        what = "the dependencies, the dev extra or build-system.requires"
        raise BuildError(f"{pyproject}: cannot read {what} ({type(exc).__name__}: {exc})") from None
    return [*(str(r) for r in reqs), *BUILD_TOOLS]


def exact_pins(requirements: list[str]) -> dict[str, str]:
    """Canonical name -> version for each ``name==version`` requirement (markers and extras dropped)."""
    out = {}
    for req in requirements:
        name, sep, rest = req.split(";", 1)[0].partition("==")
        if sep:
            out[canonical(name.split("[", 1)[0].strip())] = rest.strip()
    return out


def check_venv_lock(lock: Path = VENV_LOCK, pyproject: Path | None = None) -> None:
    """The lock names every package pyproject.toml needs, at the version it pins: otherwise ``make venv`` would
    refuse to install, or install what the pins no longer say."""
    pyproject = pyproject or lock.parent / "pyproject.toml"
    if not lock.is_file():
        raise BuildError(f"{lock} is missing: run make venv-lock")
    locked = read_lock(lock)
    reqs = venv_requirements(pyproject)
    problems = []
    for req in reqs:
        m = NAME.match(req.strip())
        if m is None or canonical(m.group(0)) not in locked:
            problems.append(f"{req} is not in the lock")
    for name, version in exact_pins(reqs).items():
        if name in locked and locked[name][0] != version:
            problems.append(f"{name}: pyproject.toml pins {version}, the lock has {locked[name][0]}")
    if problems:
        raise BuildError(f"{lock} is out of date with {pyproject}: {'; '.join(problems)} (run make venv-lock)")


def lock_venv(pyproject: Path, out: Path = VENV_LOCK) -> list[str]:
    """Resolve :func:`venv_requirements` for this interpreter and write each file pip chose, with its hash."""
    reqs = venv_requirements(pyproject)
    pinned = exact_pins(reqs)
    kept = {}
    if out.is_file():
        kept = {n: v for n, (v, _) in read_lock(out).items() if n not in pinned}
    with tempfile.TemporaryDirectory(prefix="gpucluster-venv-lock-") as tmp:
        constraints = Path(tmp) / "constraints.txt"
        constraints.write_text("".join(f"{n}=={v}\n" for n, v in sorted(kept.items())), encoding="utf-8")
        files = Path(tmp) / "files"
        run(
            "lock-venv (pip download)",
            [sys.executable, "-m", "pip", "download", "-q", "-d", str(files), "-c", str(constraints), *reqs],
        )
        lines = hashed_pins(files)
    out.write_text(_HEADER + "\n".join(lines) + "\n", encoding="utf-8")
    return lines
