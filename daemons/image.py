"""What the daemon image needs, read from the project itself (``make images`` and its entry-point test use these).

``python -m daemons.image requirements pyproject.toml`` prints the pinned runtime dependencies the daemons
import (not the Pulumi/IaC stack), so the image and the tests use the same versions.
``python -m daemons.image check-imports`` imports every module a daemon loads, the provider adapters included
(the registry imports them lazily, so a missing dependency would otherwise show only when a stack first uses that
provider kind), and exits non-zero naming the first module that does not import.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path

from contract.registry import CONTROLLERS

#: The daemons' runtime dependencies, by their names in pyproject.toml.
RUNTIME_DEPENDENCIES = ("pydantic", "PyYAML", "prometheus-client", "nvidia-ml-py", "kubernetes")

#: Every module a daemon may load, and the third-party modules they rest on.
DAEMON_MODULES = (
    "daemons.fabric_exporter.__main__",
    "daemons.burst_provider.__main__",
    *(f"{spec.module}.__main__" for spec in CONTROLLERS),
    "daemons.checkpoint_verifier.check",
    "daemons.burst_provider.providers.fake",
    "daemons.burst_provider.providers.runpod",
    "daemons.burst_provider.providers.kubernetes.provider",
    "daemons.burst_provider.kube",
    "pydantic",
    "yaml",
    "prometheus_client",
    "pynvml",
    "kubernetes",
    "requests",
)


class ImageError(RuntimeError):
    """The project cannot give the image what it needs; the message says what and where."""


def pinned_requirements(pyproject: Path, wanted: Sequence[str] = RUNTIME_DEPENDENCIES) -> list[str]:
    """``name==version`` for each wanted dependency, as pyproject.toml pins it."""
    try:
        deps = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["dependencies"]
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, KeyError, TypeError) as exc:
        raise ImageError(f"{pyproject}: cannot read project.dependencies ({type(exc).__name__})") from None
    pinned = {str(d).split("==")[0]: str(d) for d in deps if "==" in str(d)}
    missing = [w for w in wanted if w not in pinned]
    if missing:
        raise ImageError(f"{pyproject} pins no version of {', '.join(missing)}: the daemon image needs them")
    return [pinned[w] for w in wanted]


def check_imports(modules: Sequence[str] = DAEMON_MODULES) -> None:
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:
            raise ImageError(f"{name} does not import: {type(exc).__name__}: {str(exc)[:200]}") from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m daemons.image", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    req = sub.add_parser("requirements", help="print the pinned runtime dependencies of the daemons")
    req.add_argument("pyproject", type=Path, help="the project's pyproject.toml")
    sub.add_parser("check-imports", help="import every module a daemon loads")
    args = parser.parse_args(argv)
    try:
        if args.command == "requirements":
            print("\n".join(pinned_requirements(args.pyproject)))
        else:
            check_imports()
    except ImageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
