"""``python -m daemons.checkpoint_verifier.drill DIR``: a restore drill of one checkpoint, as the drill's pod runs it.

Reads the checkpoint in ``DIR`` whole as a restart would (``restore.restore``: every record of every shard, every
CRC-32, every tensor's pickle against the metadata), read-only, and prints one JSON object on stdout (``ok``,
``step``, ``records``, ``read``, ``bytes``, ``seconds``, ``paced``, ``findings``, ``summary``).
``--max-read-mbps N`` reads no faster than N MB/s on average (``paced``: the seconds it waited for that). Exits 0
when it restored whole, 1 when it did not, 2 when ``DIR`` cannot be read at all (named on stderr, no trace).
``--termination-log PATH`` also writes the short form the controller reads from the pod's status
(``contract.checkpoint_record.read_drill_verdict``), under the kubelet's 4096 bytes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from daemons.checkpoint_verifier.check import report
from daemons.checkpoint_verifier.restore import Reads, Restored, restore
from daemons.toolkit.cli import daemon_parser

#: The summary's share of the 4096 bytes the kubelet keeps of a termination message (the directory's name takes at
#: most 1012, the rest under 200).
_SUMMARY_BYTES = 2048
PROG = "checkpoint-verifier-drill"


def drill_json(restored: Restored, seconds: float, paced: float = 0.0) -> dict[str, object]:
    return {
        "paced": round(paced, 3),
        "directory": restored.directory,
        "ok": restored.ok,
        "step": restored.step,
        "records": restored.records,
        "read": restored.read,
        "bytes": restored.bytes_read,
        "findings": [{"problem": str(f.problem), "detail": f.detail} for f in restored.findings],
        "summary": restored.summary(),
        "seconds": round(seconds, 3),
    }


def termination_message(restored: Restored, seconds: float) -> str:
    """The drill's verdict in under the 4096 bytes the kubelet keeps (the full one is in the pod's log)."""
    summary = restored.summary()
    if len(summary.encode()) > _SUMMARY_BYTES:
        summary = summary.encode()[: _SUMMARY_BYTES - 3].decode(errors="ignore") + "…"
    return json.dumps(
        {
            "ok": restored.ok,
            "step": restored.step,
            "directory": restored.directory.rstrip("/").rsplit("/", 1)[-1][:253],
            "bytes": restored.bytes_read,
            "seconds": round(seconds, 3),
            "problems": sorted({str(f.problem) for f in restored.findings}),
            "summary": summary,
        },
        ensure_ascii=False,
    )


def _rate(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of MB/s") from None
    if not 1 <= value <= 1_000_000:
        raise argparse.ArgumentTypeError(f"{value} MB/s: 1 to 1000000")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = daemon_parser(PROG, __doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("directory", type=Path, help="the checkpoint's directory (step-<N> under the job's own)")
    parser.add_argument(
        "--termination-log", type=Path, default=None, help="also write a short verdict here (the pod's termination log)"
    )
    parser.add_argument(
        "--max-read-mbps", type=_rate, default=None, help="read no faster than this many MB/s on average"
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    root: Path = args.directory
    if not root.is_dir():
        print(f"{PROG}: {root} is not a directory this pod can read", file=sys.stderr)
        return 2
    try:
        reads = Reads(None if args.max_read_mbps is None else args.max_read_mbps * 1e6)
        restored = restore(root, reads)
    except OSError as e:
        print(f"{PROG}: cannot read {root}: {e.strerror or e}", file=sys.stderr)
        return 2
    seconds = time.monotonic() - started
    return report(
        PROG,
        drill_json(restored, seconds),
        termination_message(restored, seconds),
        args.termination_log,
        ok=restored.ok,
    )


if __name__ == "__main__":
    sys.exit(main())
