"""``python -m images``: build the project's images offline, lock their wheels, pin a stack to their digests.

  build [NAME ...] [--pin STACK]   every image (or those named) into .state/images; --pin writes the digests into
                                   stacks/Pulumi.<STACK>.yaml (or a stack file path)
  pin STACK                        write the digests of the last build into a stack
  lock                             resolve the daemons' wheels from pyproject.toml's pins into images/daemons.lock
  lock-venv                        resolve the build venv (dependencies, dev extra, build backend, pip) into venv.lock

Exit codes: 0 done, 1 a build, lock or pin failed (the message says which step and why), 2 a usage error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from components.config import StackConfigError, load_stack_file
from daemons.image import ImageError, pinned_requirements
from images.build import DEFAULT_CACHE, DEFAULT_OUT, LOCK, ROOT, Built, build_all, read_digests
from images.definitions import DEFINITIONS
from images.oci import OciError
from images.pin import PinError, pin_stack
from images.steps import BuildError, lock_wheels
from images.venv_lock import VENV_LOCK, lock_venv


def stack_path(stack: str) -> Path:
    """A stack name (``prod``) or a stack file path."""
    path = Path(stack)
    return path if path.suffix in (".yaml", ".yml") else ROOT / "stacks" / f"Pulumi.{stack}.yaml"


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def summary(built: Sequence[Built]) -> str:
    rows = [("image", "digest", "size", "layers", "seconds")]
    for b in built:
        rows.append(
            (
                b.reference.split("@")[0],
                b.image.digest,
                _mib(b.image.size),
                " + ".join(_mib(len(layer.data)) for layer in b.image.layers),
                f"{b.seconds:.1f}",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def _pin(stack: str, digests: dict[str, str]) -> None:
    path = stack_path(stack)
    pin_stack(path, digests)
    print(
        f"pinned {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: "
        + ", ".join(f"{n}@{d}" for n, d in digests.items())
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m images", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the images into OCI archives")
    b.add_argument("names", nargs="*", metavar="NAME", help=f"images to build (default all: {', '.join(DEFINITIONS)})")
    b.add_argument(
        "--stack",
        help="take the registry and version from this stack's gpucluster:images (default: the scheme's defaults)",
    )
    b.add_argument("--pin", metavar="STACK", help="write the digests into this stack (name or file) after the build")
    b.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"where the archives go (default {DEFAULT_OUT})")
    b.add_argument(
        "--cache", type=Path, default=DEFAULT_CACHE, help=f"the base and wheel cache (default {DEFAULT_CACHE})"
    )
    b.add_argument(
        "--source", help="the org.opencontainers.image.source label (default: pyproject's project.urls.Source)"
    )
    b.add_argument("--refresh-base", action="store_true", help="build the Debian base again (security updates)")
    p = sub.add_parser("pin", help="write the last build's digests into a stack")
    p.add_argument("stack", help="stack name (prod) or stack file")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"where the last build went (default {DEFAULT_OUT})")
    sub.add_parser("lock", help=f"resolve the daemons' wheels into {LOCK.relative_to(ROOT)}")
    sub.add_parser("lock-venv", help=f"resolve the build venv's distributions into {VENV_LOCK.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    try:
        if args.command == "lock-venv":
            lines = lock_venv(ROOT / "pyproject.toml", VENV_LOCK)
            print(f"{VENV_LOCK.relative_to(ROOT)}: {len(lines)} distributions")
            return 0
        if args.command == "lock":
            lines = lock_wheels(pinned_requirements(ROOT / "pyproject.toml"), LOCK)
            print(f"{LOCK.relative_to(ROOT)}: {len(lines)} wheels")
            return 0
        if args.command == "pin":
            records = read_digests(args.out)
            _pin(args.stack, {n: str(r["digest"]) for n, r in records.items() if n in DEFINITIONS})
            return 0
        scheme = load_stack_file(stack_path(args.stack)).images if args.stack else None
        built = build_all(
            args.names,
            scheme=scheme,
            out=args.out,
            cache=args.cache,
            source=args.source,
            refresh_base=args.refresh_base,
        )
        print(summary(built))
        if args.pin:
            _pin(args.pin, {b.definition.name: b.image.digest for b in built})
        return 0
    except (BuildError, OciError, PinError, ImageError, StackConfigError) as exc:
        print(f"images: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(
            "images: interrupted; the archives already written are whole, the one being written is not", file=sys.stderr
        )
        return 130


if __name__ == "__main__":
    sys.exit(main())
