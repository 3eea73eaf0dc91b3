"""``python -m daemons.checkpoint_verifier.check DIR``: verify one checkpoint directory, as the verifier's pod does.

Reads ``DIR`` (read-only: nothing is written, so a check killed half-way loses nothing and is simply run again),
prints the verdict as one JSON object on stdout (``ok``, ``step``, ``size``, ``hashed``, ``findings`` as
``{"problem", "detail"}``, ``summary``, ``seconds``) and exits 0 when the checkpoint counts, 1 when it does not, 2
when ``DIR`` cannot be read at all (named on stderr, no trace).

``--newest-under JOBDIR`` (what the verifier's check Job runs) checks the newest checkpoint under a job's directory:
the subdirectory whose name says the highest step (``contract.checkpoints.step_of``); none at all is a verdict, not
an error (``no-checkpoint``: the job reported a checkpoint that is not there). ``--termination-log PATH`` also
writes a short form of the verdict there (:func:`termination_message`, under the kubelet's 4096 bytes), which the
controller reads from the pod's status.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from contract.checkpoints import step_of
from daemons.checkpoint_verifier.files import read_listing
from daemons.checkpoint_verifier.verify import Finding, Problem, Verdict, judge
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


#: The kubelet keeps at most this many bytes of a termination message.
TERMINATION_MESSAGE_BYTES = 4096
_SUMMARY_CHARS = 1500


def termination_message(verdict: Verdict, seconds: float) -> str:
    """The verdict in under :data:`TERMINATION_MESSAGE_BYTES`: ok, step, directory, size, the problems' names and
    a summary cut to fit (the full verdict is in the pod's log)."""
    summary = verdict.summary()
    if len(summary) > _SUMMARY_CHARS:
        summary = summary[: _SUMMARY_CHARS - 1] + "…"
    return json.dumps(
        {
            "ok": verdict.ok,
            "step": verdict.step,
            "directory": verdict.directory[:253],
            "size": verdict.size,
            "hashed": verdict.hashed,
            "problems": sorted({str(f.problem) for f in verdict.findings}),
            "summary": summary,
            "seconds": round(seconds, 3),
        },
        ensure_ascii=False,
    )


def newest_checkpoint(job_dir: Path) -> Path | None:
    """The subdirectory of ``job_dir`` whose name says the highest step; None when none does. A hidden one (a
    saver's staging directory) is never a checkpoint."""
    best: tuple[int, str] | None = None
    for entry in job_dir.iterdir():
        step = step_of(entry.name)
        if step is None or entry.name.startswith(".") or not entry.is_dir():
            continue
        if best is None or (step, entry.name) > best:
            best = (step, entry.name)
    return None if best is None else job_dir / best[1]


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
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "directory", type=Path, nargs="?", help="the checkpoint's directory (step-<N> under the job's own)"
    )
    which.add_argument(
        "--newest-under", type=Path, metavar="JOBDIR", help="check the newest step directory under the job's own"
    )
    parser.add_argument(
        "--last-verified-step", type=_step, default=None, help="the job's last verified step: this one must be newer"
    )
    parser.add_argument(
        "--workers", type=_workers, default=1, help="files the manifest names hashed at once (one core each)"
    )
    parser.add_argument(
        "--termination-log", type=Path, default=None, help="also write a short verdict here (the pod's termination log)"
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    root: Path = args.newest_under or args.directory
    if not root.is_dir():
        print(f"checkpoint-verifier-check: {root} is not a directory this pod can read", file=sys.stderr)
        return 2
    try:
        verdict = _verdict(root, args)
    except OSError as e:
        print(f"checkpoint-verifier-check: cannot read {root}: {e.strerror or e}", file=sys.stderr)
        return 2
    seconds = time.monotonic() - started
    return report(
        "checkpoint-verifier-check",
        verdict_json(verdict, seconds),
        termination_message(verdict, seconds),
        args.termination_log,
        ok=verdict.ok,
    )


def report(prog: str, full: dict[str, object], short: str, termination_log: Path | None, *, ok: bool) -> int:
    """Print the full verdict on stdout, write the short one to the termination log when asked; the exit code: 0
    when ``ok``, 1 when not, 2 when the log cannot be written (named on stderr)."""
    json.dump(full, sys.stdout)
    sys.stdout.write("\n")
    if termination_log is not None:
        try:
            termination_log.write_text(short, encoding="utf-8")
        except OSError as e:
            print(f"{prog}: cannot write {termination_log}: {e.strerror or e}", file=sys.stderr)
            return 2
    return 0 if ok else 1


def _verdict(root: Path, args: argparse.Namespace) -> Verdict:
    if args.newest_under is None:
        return judge(read_listing(root, workers=args.workers), args.last_verified_step)
    newest = newest_checkpoint(root)
    if newest is None:
        finding = Finding(Problem.NO_CHECKPOINT, f"no directory under {root} names a step")
        return Verdict(directory=str(root), step=None, findings=(finding,), size=0)
    return judge(read_listing(newest, workers=args.workers), args.last_verified_step)


if __name__ == "__main__":
    sys.exit(main())
