"""Hangs, measured on the simulated cluster: the stall detector against today's path, side by side in one run.

Two one-node training jobs of the same work run at once on the simulated cluster (``make up``, idempotent), each a
JobSet from ``components/training`` played by ``sim/fake_trainer.py``, which puts the program's load on the GPUs its
pods hold (the fake dcgm-exporter's pod mapping) and on its node's InfiniBand counters, and writes the progress
report. Hangs are injected into both at the same seeded times (one per ``--mtbf`` seconds of the gang making
progress, exponential): a rank stops inside a collective, every pod stays Running, the GPUs stay busy with idle tensor
cores, the fabric goes quiet, the step stops.

- ``detected``: the stack's stallAfter (30 s on the local stack): the stall detector restarts the gang in place;
- ``today``: stallAfter 144h, the detector left off for this job, as before it existed: the job waits for a person
  (``TrainingCheckpointStale`` fires two intervals and five minutes after the last checkpoint; nobody restarts).

For each: the hangs, the mean time from a hang to the gang running again (the detector's window, its startup grace
on the new attempt, Prometheus' scrape lag, JobSet's recreation and kwok's scheduling), the GPU-seconds spent hung,
and ETTR (work done over wall time from the gang's first start). The run ends when the detected job has done its
work or at ``--timeout``. Nothing is asserted. Figures also go to ``.state/bench-hangs/figures.json``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from contract.registry import STALL_DETECTOR

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_let_it_crash import (  # noqa: E402
    Run,
    api_client,
    clean,
    columns,
    parse_run_arguments,
    play,
)
from components.config import load_stack_file  # noqa: E402
from contract.storage_settings import checkpoint_interval_seconds  # noqa: E402

STACK = ROOT / "stacks" / "Pulumi.local.yaml"
OUT = ROOT / ".state" / "bench-hangs"
GPUS = 8


def measure(args: argparse.Namespace) -> dict[str, Any]:
    api = api_client()
    mtbf, write, work = args.mtbf, args.write, args.work
    interval = max(1, round(checkpoint_interval_seconds(write, mtbf)))
    runs = [
        Run("hang-detected", interval, False, random.Random(args.seed), mtbf, hangs=True),
        Run("hang-today", interval, False, random.Random(args.seed), mtbf, hangs=True, stall_after="144h"),
    ]
    detected = runs[0]
    trainer = play(
        api, runs, work=work, write=write, timeout=args.timeout, until=lambda: detected.finished_at is not None
    )
    ended = time.time()
    out: dict[str, Any] = {"mtbf_s": mtbf, "write_s": write, "work_s": work, "interval_s": interval, "jobs": {}}
    for run in runs:
        progress = trainer.jobs.get(run.name)
        again = list(progress.running_again_at) if progress else []
        recovered = []
        hung_s = 0.0
        for t in run.hung_at:
            back = next((a for a in again if a >= t), None)
            recovered.append(None if back is None else back - t)
            hung_s += (back if back is not None else ended) - t
        started = progress.started_at if progress and progress.started_at is not None else run.submitted_at
        finished = run.finished_at
        done = progress.saved + progress.since_save if progress else 0.0
        wall = (finished or ended) - started
        out["jobs"][run.name] = {
            "hangs": len(run.hung_at),
            "recovered": sum(1 for r in recovered if r is not None),
            "mean_hang_to_running_s": (
                round(
                    sum(r for r in recovered if r is not None) / max(1, sum(1 for r in recovered if r is not None)), 1
                )
                if any(r is not None for r in recovered)
                else None
            ),
            "gpu_seconds_hung": round(hung_s * GPUS),
            "work_done_s": round(min(done, work), 1),
            "wall_s": round(wall, 1),
            "ettr": round((work if finished is not None else done) / wall, 3) if wall > 0 else None,
            "finished": finished is not None,
        }
    clean(api, [r.name for r in runs])
    return out


def table(out: dict[str, Any], stall_after: str) -> str:
    head = ("job", "hangs", "hang -> running again", "GPU-seconds hung", "work done", "ETTR")
    rows = [head]
    for name, j in out["jobs"].items():
        back = (
            f"{j['mean_hang_to_running_s']:.0f} s (mean of {j['recovered']})"
            if j["mean_hang_to_running_s"] is not None
            else "never"
        )
        label = f"detected (stallAfter {stall_after})" if name == "hang-detected" else "today (no detector)"
        done = f"{j['work_done_s']:.0f} of {out['work_s']:.0f} s" + (
            "" if j["finished"] else f" in {j['wall_s']:.0f} s"
        )
        rows.append((label, str(j["hangs"]), back, str(j["gpu_seconds_hung"]), done, f"{j['ettr'] * 100:.1f} %"))
    return columns(rows)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_run_arguments(__doc__, "hang", argv)
    stall_after = load_stack_file(STACK).controller(STALL_DETECTOR).stall_after
    out = measure(args)
    print(
        f"One-node jobs of {args.work:.0f} s of work, a hang every {args.mtbf:.0f} s of progress (exponential, seed "
        f"{args.seed}), a checkpoint every {out['interval_s']} s:\n"
    )
    print(table(out, stall_after))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "figures.json").write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
