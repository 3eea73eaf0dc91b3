"""``python -m daemons.checkpoint_verifier.check DIR``: verify one checkpoint directory, as the verifier's pod does.

Reads ``DIR`` (read-only: nothing is written, so a check killed half-way loses nothing and is simply run again),
prints the verdict as one JSON object on stdout (``ok``, ``step``, ``size``, ``hashed``, ``findings`` as
``{"problem", "detail"}``, ``summary``, ``seconds``) and exits 0 when the checkpoint counts, 1 when it does not, 2
when ``DIR`` cannot be read at all (named on stderr, no trace).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from daemons.checkpoint_verifier.files import read_listing
from daemons.checkpoint_verifier.verify import Verdict, judge
from daemons.toolkit.cli import daemon_parser


def verdict_json(verdict: Verdict, seconds: float) -> dict[str, object]:
    return {
        "directory": verdict.directory,
        "ok": verdict.ok,
        "step": verdict.step,
        "size": verdict.size,
        "hashed": verdict.hashed,
        "findings": [{"problem": str(f.problem), "detail": f.detail} for f in verdict.findings],
        "summary": verdict.summary(),
        "seconds": round(seconds, 3),
    }


def _step(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a step number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a step number")
    return value


def _workers(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of workers") from None
    if not 1 <= value <= 256:
        raise argparse.ArgumentTypeError(f"{value} workers: 1 to 256")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = daemon_parser("checkpoint-verifier-check", __doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("directory", type=Path, help="the checkpoint's directory (step-<N> under the job's own)")
    parser.add_argument(
        "--last-verified-step", type=_step, default=None, help="the job's last verified step: this one must be newer"
    )
    parser.add_argument(
        "--workers", type=_workers, default=1, help="files the manifest names hashed at once (one core each)"
    )
    args = parser.parse_args(argv)
    root: Path = args.directory
    if not root.is_dir():
        print(f"checkpoint-verifier-check: {root} is not a directory this pod can read", file=sys.stderr)
        return 2
    started = time.monotonic()
    try:
        listing = read_listing(root, workers=args.workers)
    except OSError as e:
        print(f"checkpoint-verifier-check: cannot read {root}: {e.strerror or e}", file=sys.stderr)
        return 2
    verdict = judge(listing, args.last_verified_step)
    json.dump(verdict_json(verdict, time.monotonic() - started), sys.stdout)
    sys.stdout.write("\n")
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    sys.exit(main())
