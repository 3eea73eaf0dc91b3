"""Resume from the latest checkpoint, or from the latest verified one: a long job with corrupt checkpoints, side by
side.

First, measured: what a restart that loads the newest checkpoint gets for each corruption class of
``sim/checkpoint_faults.py``. A real checkpoint torch wrote (``tests/fixtures/dcp/``) is saved as a job's save does
(``save_checkpoint``), spoilt by each class, and loaded with torch's own ``dcp.load`` on the CPU without a process
group (``benchmarks/checkpoints/load_dcp.py``, the benchmarks' torch): it fails to load, loads the values saved, or
loads other values. The verifier refuses every class (``bench_checkpoint_verify.py``), so a policy that resumes only
from verified checkpoints never loads one.

Then a model of a long job on a virtual clock, the same draws for both policies. Taken from the prod stack
(``stacks/Pulumi.prod.yaml``): a 512-GPU job (64 nodes), its time between interruptions (the stack's prior for 64
nodes), its checkpoint write time and the Young/Daly interval they give, the restart bound (``training.
maxRestartsPerHour``). Assumed, and swept or stated: the share of checkpoints that are corrupt (no public figure:
1, 5 and 10 %, each class as likely), a restart's cost (pod start, image, NCCL, load: ``--restart-seconds``, 300),
the time until a person resumes a job its restart bound stopped (``--human-seconds``, an hour: a page answered at
night), the time a checkpoint takes to be verified once reported (``--verify-seconds``, 360: hashing 1 TB on this
machine's CPU in ``bench_checkpoint_verify.py``; ``--sizes-verify-seconds``, 30, by sizes alone: the check pod's start,
its reading well under a second there, and a shard whose bytes changed with its length kept goes through). A failure
during a restart, and a corrupt checkpoint's effect on a
run that loads other values, are not modelled (the latter is counted, not priced).

Resume from latest: each restart loads the newest checkpoint; one that fails to load crashes the restart, again and
again, until the restart bound stops the job; the person then resumes it from the newest checkpoint that loads.
Latest verified (hashed, or by sizes alone): each restart loads the newest checkpoint verified before the failure.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import subprocess
import sys
import tempfile
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.torch_env import DEFAULT_VENV, TORCH_VERSION, torch_python  # noqa: E402
from components.config import load_stack_file  # noqa: E402
from contract.storage_settings import checkpoint_interval_seconds  # noqa: E402
from sim.checkpoint_faults import CORRUPTIONS, save_checkpoint  # noqa: E402

LOADER = ROOT / "benchmarks" / "checkpoints" / "load_dcp.py"
STACK = ROOT / "stacks" / "Pulumi.prod.yaml"
JOB_GPUS, JOB_NODES = 512, 64
#: What a restart that loads a checkpoint gets.
FAILS, SAME, OTHER = "fails to load", "loads what was saved", "loads other values"


def measured_outcomes(python: Path) -> dict[str, str]:
    """Each corruption class -> what ``dcp.load`` does with a checkpoint spoilt by it."""
    with tempfile.TemporaryDirectory(prefix="bench-resume-") as tmp:
        good = save_checkpoint(Path(tmp) / "good", 100)
        spoilt = {
            name: save_checkpoint(Path(tmp) / f"c{i}", 100, corruption=name) for i, name in enumerate(CORRUPTIONS)
        }
        proc = subprocess.run(
            [str(python), str(LOADER), str(good), *map(str, spoilt.values())],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise SystemExit(f"loading the checkpoints failed:\n{proc.stderr[-2000:]}")
        results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        shutil.rmtree(tmp, ignore_errors=True)
    reference, *loads = results
    if not reference["loaded"]:
        raise SystemExit(f"the good checkpoint did not load: {reference.get('error')}")
    outcomes = {}
    for name, result in zip(spoilt, loads, strict=True):
        if not result["loaded"]:
            outcomes[name] = FAILS
        else:
            outcomes[name] = SAME if result["digest"] == reference["digest"] else OTHER
    return outcomes


@dataclass(frozen=True)
class Job:
    days: float
    mtbf_s: float
    interval_s: float
    write_s: float
    restart_s: float
    human_s: float
    verify_s: float
    bound_per_hour: int


@dataclass(frozen=True)
class Checkpoint:
    done_at: float
    work: float
    #: The corruption class, None for a good one.
    corruption: str | None


@dataclass
class Result:
    restarts: int = 0
    crash_looped: int = 0
    stopped_s: float = 0.0
    lost_s: float = 0.0
    other_values: int = 0
    work_s: float = 0.0


@dataclass
class Draws:
    """One run's randomness, the same for both policies: the gaps between failures, and each checkpoint's class."""

    rng: random.Random
    corrupt_share: float
    classes: Sequence[str]
    gaps: list[float] = field(default_factory=list)
    kinds: list[str | None] = field(default_factory=list)

    def gap(self, i: int, mtbf_s: float) -> float:
        while len(self.gaps) <= i:
            self.gaps.append(self.rng.expovariate(1 / mtbf_s))
        return self.gaps[i]

    def kind(self, i: int) -> str | None:
        while len(self.kinds) <= i:
            bad = self.rng.random() < self.corrupt_share
            self.kinds.append(self.rng.choice(self.classes) if bad else None)
        return self.kinds[i]


Pick = Callable[[Sequence[Checkpoint], float, Job], Checkpoint | None]


def newest(saved: Sequence[Checkpoint], failed_at: float, _job: Job) -> Checkpoint | None:
    return saved[-1] if saved else None


def newest_verified(verify_s: float, missed: frozenset[str] = frozenset()) -> Pick:
    """The newest checkpoint verified before the failure: ``verify_s`` after its report, and refused when its class
    is one the check catches (every class but ``missed``)."""

    def pick(saved: Sequence[Checkpoint], failed_at: float, _job: Job) -> Checkpoint | None:
        for c in reversed(saved):
            if c.done_at + verify_s <= failed_at and (c.corruption is None or c.corruption in missed):
                return c
        return None

    return pick


def run(job: Job, draws: Draws, pick: Pick, outcomes: dict[str, str]) -> Result:
    """One job of ``job.days`` under one policy."""
    end = job.days * 86400
    t, work, since = 0.0, 0.0, 0.0
    saved: list[Checkpoint] = []
    restarts: deque[float] = deque()
    result = Result()
    failures = 0
    next_fail = draws.gap(0, job.mtbf_s)
    while t < end:
        to_save = job.interval_s - since
        if t + to_save + job.write_s <= min(next_fail, end):
            t += to_save + job.write_s
            work += to_save
            since = 0.0
            saved.append(Checkpoint(t, work, draws.kind(len(saved))))
            continue
        if next_fail >= end:
            work += max(0.0, min(end - t, to_save))
            break
        work += max(0.0, min(next_fail - t, to_save))
        failed_at = t = next_fail
        chosen = pick(saved, failed_at, job)
        while True:
            t += job.restart_s
            result.restarts += 1
            restarts.append(t)
            while restarts and restarts[0] < t - 3600:
                restarts.popleft()
            if chosen is None or chosen.corruption is None or outcomes[chosen.corruption] != FAILS:
                break
            result.crash_looped += 1
            if len(restarts) > job.bound_per_hour:
                # stopped at its bound: a person finds the newest checkpoint that loads
                t += job.human_s
                result.stopped_s += job.human_s
                restarts.clear()
                chosen = next(
                    (c for c in reversed(saved) if c.corruption is None or outcomes[c.corruption] != FAILS), None
                )
        resumed = chosen.work if chosen is not None else 0.0
        if chosen is not None and chosen.corruption is not None and outcomes[chosen.corruption] == OTHER:
            result.other_values += 1
        result.lost_s += work - resumed
        work, since = resumed, 0.0
        failures += 1
        next_fail = t + draws.gap(failures, job.mtbf_s)
    result.work_s = work
    return result


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _p90(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.9 * len(ordered)) - 1)] if ordered else 0.0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--days", type=float, default=30.0)
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--shares", default="0.01,0.05,0.10", help="shares of checkpoints that are corrupt")
    parser.add_argument("--restart-seconds", type=float, default=300.0)
    parser.add_argument("--human-seconds", type=float, default=3600.0)
    parser.add_argument("--verify-seconds", type=float, default=360.0)
    parser.add_argument("--sizes-verify-seconds", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=20261207)
    parser.add_argument("--venv", type=Path, default=DEFAULT_VENV)
    parser.add_argument("--torch-version", default=TORCH_VERSION)
    args = parser.parse_args(argv)
    outcomes = measured_outcomes(torch_python(args.venv, args.torch_version))
    print(f"a restart that loads the newest checkpoint (torch {args.torch_version} dcp.load, no process group):")
    for name, outcome in outcomes.items():
        print(f"  {name:<25} {outcome}")
    cfg = load_stack_file(STACK)
    prior = cfg.storage.checkpointing
    mtbf = prior.job_mtbf_seconds(JOB_NODES)
    job = Job(
        days=args.days,
        mtbf_s=mtbf,
        interval_s=checkpoint_interval_seconds(prior.write_seconds, mtbf),
        write_s=prior.write_seconds,
        restart_s=args.restart_seconds,
        human_s=args.human_seconds,
        verify_s=args.verify_seconds,
        bound_per_hour=cfg.training.max_restarts_per_hour,
    )
    print(
        f"\na {JOB_GPUS}-GPU job ({JOB_NODES} nodes) for {job.days:g} days, {args.runs} runs: an interruption every "
        f"{job.mtbf_s / 3600:.0f} h on average, a checkpoint every {job.interval_s / 60:.0f} min (write "
        f"{job.write_s:g} s), restart {job.restart_s:g} s, restart bound {job.bound_per_hour}/h, a person "
        f"{job.human_s / 60:.0f} min after the job stops, verified {job.verify_s:g} s after its report"
    )
    head = (
        f"{'corrupt':>8} {'policy':<27} {'restarts':>9} {'crash-looped':>13} {'stopped h':>10} "
        f"{'work lost GPU-h':>16} {'p90':>7} {'other values':>13} {'ETTR':>6}"
    )
    print("\nper run, mean (p90 of work lost):")
    print(head)
    policies: list[tuple[str, Pick]] = [
        ("resume from latest", newest),
        ("latest verified, hashed", newest_verified(job.verify_s)),
        ("latest verified, sizes", newest_verified(args.sizes_verify_seconds, frozenset({"hash mismatch"}))),
    ]
    for share in (float(s) for s in args.shares.split(",")):
        per: dict[str, list[Result]] = {name: [] for name, _ in policies}
        for i in range(args.runs):
            draws = Draws(random.Random(args.seed + i), share, sorted(outcomes))
            for name, pick in policies:
                per[name].append(run(job, draws, pick, outcomes))
        for name, _ in policies:
            rs = per[name]
            lost_gpu_h = [r.lost_s / 3600 * JOB_GPUS for r in rs]
            ettr = _mean([r.work_s / (job.days * 86400) for r in rs])
            print(
                f"{share:>8.0%} {name:<27} {_mean([r.restarts for r in rs]):>9.1f} "
                f"{_mean([r.crash_looped for r in rs]):>13.2f} {_mean([r.stopped_s / 3600 for r in rs]):>10.2f} "
                f"{_mean(lost_gpu_h):>16.0f} {_p90(lost_gpu_h):>7.0f} {_mean([r.other_values for r in rs]):>13.2f} "
                f"{ettr:>6.3f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
