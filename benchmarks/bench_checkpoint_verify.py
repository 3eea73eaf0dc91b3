"""Checkpoints you can trust, measured: every corruption class caught on real checkpoints, no good one refused, and
what verifying costs against the checkpoint interval.

Real PyTorch Distributed Checkpoints of several sizes, each written by ``ranks`` processes with torch's own
``dcp.save`` (``benchmarks/checkpoints/write_dcp.py``, with ``benchmarks/torch_env.py``'s PyTorch) and a
manifest of sizes and SHA-256 as a job's save helper writes it, are verified with ``python -m
daemons.checkpoint_verifier.check`` (the command the verifier's pod runs) two ways: by sizes alone (every file DCP's
metadata names, there and long enough) and with the manifest's hashes, on one worker and on every core. Then each
corruption class of ``sim/checkpoint_faults.py`` is done to a copy of each checkpoint and must be refused, as that
class; every checkpoint as written must be taken.

Each checkpoint is also restored two ways: by the restore drill (``python -m daemons.checkpoint_verifier.drill``,
what the drill's pod runs: every record read whole, no torch) and by torch's own no-dist ``dcp.load`` on the CPU
(``benchmarks/checkpoints/load_dcp.py``: what a restart runs).

Printed: the write, verification and restore times per size, the hashing and drill rates, and each extrapolated to
a 512-GPU job's checkpoint (the prod stack's ``storage.checkpointing.sizeTb``, 1 TB written in 30 s: the talk's)
against its Young/Daly interval from that stack's prior (8 h between interruptions of a 256-node run) and, for the
drill, against the default ``restoreDrill.every``; then the corruption table: per class, caught by the check, by
the drill, and refused by torch's ``dcp.load``, out of how many, with the class only a restore sees (a flipped byte
and no manifest, ``sim.checkpoint_faults.SILENT``). Reads come from this machine's disk and page cache, not a
parallel filesystem: the hashing rate is the CPU's, a lower bound on the time a real filesystem's reads add. Exits
non-zero when a corruption the check must catch is missed, the drill passes a checkpoint torch cannot load, or a
good checkpoint is refused.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.torch_env import DEFAULT_VENV, TORCH_VERSION, torch_python  # noqa: E402
from components.config import load_stack_file  # noqa: E402
from contract.checkpoint_verifier_settings import CheckpointVerifierSettings  # noqa: E402
from contract.storage_settings import checkpoint_interval_seconds  # noqa: E402
from sim.checkpoint_faults import CORRUPTIONS, SILENT  # noqa: E402

WRITER = ROOT / "benchmarks" / "checkpoints" / "write_dcp.py"
LOADER = ROOT / "benchmarks" / "checkpoints" / "load_dcp.py"
STACK = ROOT / "stacks" / "Pulumi.prod.yaml"
#: The job the figures are extrapolated to: 512 GPUs, 64 nodes of 8, one shard file per rank.
JOB_GPUS, JOB_NODES = 512, 64
#: Verification may take at most this share of the checkpoint interval (the issue's goal).
BUDGET = 0.05


@dataclass
class Run:
    megabytes: int
    bytes: int
    files: int
    write_s: float
    sizes_s: float
    hashed_s: dict[int, float]
    drill_s: float = 0.0
    torch_load_s: float = 0.0


def check(directory: Path, *extra: str) -> tuple[int, dict[str, object], float]:
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "daemons.checkpoint_verifier.check", str(directory), *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.monotonic() - started
    verdict = json.loads(proc.stdout) if proc.stdout.strip() else {}
    return proc.returncode, verdict, seconds


def drill(directory: Path) -> tuple[int, dict[str, object]]:
    proc = subprocess.run(
        [sys.executable, "-m", "daemons.checkpoint_verifier.drill", str(directory)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip() else {}


def torch_load(python: Path, directory: Path) -> dict[str, object]:
    """torch's own no-dist ``dcp.load`` of ``directory`` (a restart's load), in a process of its own."""
    proc = subprocess.run([str(python), str(LOADER), str(directory)], capture_output=True, text=True, check=False)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"{LOADER} on {directory} failed:\n{proc.stderr[-2000:]}")
    return dict(json.loads(lines[-1]))


def best_drill(times: int, directory: Path) -> float:
    seen = []
    for _ in range(times):
        code, verdict = drill(directory)
        if code != 0:
            raise SystemExit(f"{directory}: a good checkpoint failed its drill: {verdict.get('summary')}")
        seen.append(float(verdict["seconds"]))  # type: ignore[arg-type]
    return min(seen)


def best_of(times: int, directory: Path, *extra: str) -> float:
    """The verdict's own time (the reading and judging, not the interpreter's start), best of ``times``."""
    seen = []
    for _ in range(times):
        code, verdict, _ = check(directory, *extra)
        if code != 0:
            raise SystemExit(f"{directory}: a good checkpoint was refused: {verdict.get('summary')}")
        seen.append(float(verdict["seconds"]))  # type: ignore[arg-type]
    return min(seen)


def write(python: Path, out: Path, megabytes: int, ranks: int, step: int) -> tuple[float, int]:
    proc = subprocess.run(
        [
            *(str(python), str(WRITER), str(out)),
            *("--ranks", str(ranks), "--megabytes", str(megabytes), "--step", str(step), "--manifest"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"writing {out} failed:\n{proc.stderr[-2000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return float(result["seconds"]), int(result["bytes"])


def without_manifest(directory: Path, into: Path) -> Path:
    bare = Path(shutil.copytree(directory, into))
    (bare / "gpucluster-manifest.json").unlink()
    return bare


@dataclass
class Row:
    name: str
    #: Caught by the check as its class; failed by the drill; refused by torch's dcp.load; out of ``tried``.
    checked: int
    drilled: int
    torch_refused: int
    tried: int
    #: The check must catch this class (the silent class is the drill's alone).
    check_must: bool


def corruption_table(checkpoints: Sequence[Path], scratch: Path, python: Path) -> tuple[list[Row], int, int]:
    """Per class, what the check, the drill and torch's own load make of it; and good checkpoints refused by the
    check or the drill, out of how many."""
    rows = []
    classes = [(name, fault, True) for name, fault in CORRUPTIONS.items()]
    classes += [(name, fault, False) for name, fault in SILENT.items()]
    for name, (spoil, problem), check_must in classes:
        row = Row(name, 0, 0, 0, len(checkpoints), check_must)
        for i, good in enumerate(checkpoints):
            copy = Path(shutil.copytree(good, scratch / f"{name.replace(' ', '-')}-{i}" / good.name))
            spoil(copy)
            code, verdict, _ = check(copy)
            found = {f["problem"] for f in verdict.get("findings", [])}  # type: ignore[attr-defined]
            row.checked += code == 1 and problem in found
            row.drilled += drill(copy)[0] == 1
            row.torch_refused += not torch_load(python, copy)["loaded"]
            shutil.rmtree(copy.parent)
        rows.append(row)
    refused = sum(check(good)[0] != 0 or drill(good)[0] != 0 for good in checkpoints)
    return rows, refused, len(checkpoints)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sizes", default="64,256,1024", help="checkpoint sizes to write, in MiB")
    parser.add_argument("--ranks", type=int, default=4, help="processes saving each checkpoint (one shard each)")
    parser.add_argument("--job-tb", type=float, default=None, help="the job's checkpoint in TB (default: the stack's)")
    parser.add_argument("--venv", type=Path, default=DEFAULT_VENV)
    parser.add_argument("--torch-version", default=TORCH_VERSION)
    args = parser.parse_args(argv)
    python = torch_python(args.venv, args.torch_version)
    cores = os.cpu_count() or 1
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench-ckpt-") as tmp:
        scratch = Path(tmp)
        runs: list[Run] = []
        written: list[Path] = []
        for megabytes in sizes:
            directory = scratch / f"{megabytes}mib" / "step-100"
            write_s, size = write(python, directory, megabytes, args.ranks, 100)
            bare = without_manifest(directory, scratch / f"{megabytes}mib-bare" / "step-100")
            hashed = {w: best_of(3, directory, "--workers", str(w)) for w in sorted({1, cores})}
            run = Run(megabytes, size, len(list(directory.iterdir())), write_s, best_of(3, bare), hashed)
            run.drill_s = best_drill(3, bare)
            run.torch_load_s = min(float(torch_load(python, bare)["seconds"]) for _ in range(3))  # type: ignore[arg-type]
            runs.append(run)
            written += [directory, bare]
            print(f"  wrote {megabytes} MiB with {args.ranks} ranks in {write_s:.1f} s", flush=True)
        print(f"\ncheckpoint verification, torch {args.torch_version} dcp.save, {args.ranks} ranks, {cores} cores:")
        head = f"{'size':>9} {'write s':>8} {'sizes-only s':>13} " + " ".join(
            f"{f'hashed s ({w}w)':>15}" for w in sorted(runs[0].hashed_s)
        )
        print(head + f" {'hash GB/s':>10} {'drill s':>8} {'drill GB/s':>11} {'torch load s':>13}")
        rate = drill_rate = 0.0
        for r in runs:
            best = min(r.hashed_s.values())
            rate = max(rate, r.bytes / best / 1e9 if best > 0 else 0.0)
            drill_rate = max(drill_rate, r.bytes / r.drill_s / 1e9 if r.drill_s > 0 else 0.0)
            cells = " ".join(f"{r.hashed_s[w]:>15.3f}" for w in sorted(r.hashed_s))
            print(
                f"{r.megabytes:>5} MiB {r.write_s:>8.2f} {r.sizes_s:>13.4f} {cells} {r.bytes / best / 1e9:>10.2f}"
                f" {r.drill_s:>8.3f} {r.bytes / r.drill_s / 1e9:>11.2f} {r.torch_load_s:>13.3f}"
            )
        prior = load_stack_file(STACK).storage.checkpointing
        job_tb = args.job_tb if args.job_tb is not None else prior.size_tb
        interval = checkpoint_interval_seconds(prior.write_seconds, prior.job_mtbf_seconds(JOB_NODES))
        budget = BUDGET * interval
        largest = runs[-1]
        sizes_only = largest.sizes_s * JOB_GPUS / args.ranks  # one shard file per rank: the work is per file
        job_bytes = job_tb * 1e12
        hash_s = job_bytes / (rate * 1e9)
        per_core = largest.bytes / largest.hashed_s[1] / 1e9
        cores_needed = math.ceil(job_bytes / (per_core * 1e9) / budget)
        print(
            f"\na {JOB_GPUS}-GPU job ({JOB_NODES} nodes, {JOB_GPUS} shard files, {job_tb:g} TB): "
            f"Young/Daly interval {interval:.0f} s (write {prior.write_seconds:g} s, "
            f"the prod stack's prior for {JOB_NODES} nodes); "
            f"{BUDGET:.0%} of it is {budget:.0f} s"
        )
        print(
            f"  sizes only: ~{sizes_only:.2f} s ({'within' if sizes_only <= budget else 'over'} {BUDGET:.0%}); "
            f"hashed at {rate:.2f} GB/s: {hash_s:.0f} s ({'within' if hash_s <= budget else 'over'} {BUDGET:.0%}: "
            f"{cores_needed} cores at {per_core:.2f} GB/s each would fit, and a filesystem that reads as fast)"
        )
        every = CheckpointVerifierSettings().restore_drill.every
        every_s = CheckpointVerifierSettings().restore_drill.every_seconds
        drill_s = job_bytes / (drill_rate * 1e9)
        print(
            f"  restore drill at {drill_rate:.2f} GB/s (one process): {drill_s:.0f} s for {job_tb:g} TB, "
            f"{drill_s / every_s:.1%} of restoreDrill.every ({every}); read from the filesystem at that rate"
        )
        rows, refused, good = corruption_table(written, scratch, python)
        print(
            f"\ncorruption class (on each of the {good} checkpoints, half with a manifest)"
            f"   {'check caught':>12} {'drill caught':>12} {'torch dcp.load refused':>22}"
        )
        for row in rows:
            name = row.name if row.check_must else f"{row.name} (drill only)"
            print(
                f"  {name:<38} {f'{row.checked}/{row.tried}':>12} {f'{row.drilled}/{row.tried}':>12}"
                f" {f'{row.torch_refused}/{row.tried}':>22}"
            )
        print(f"  good checkpoints refused (check or drill)  {refused}/{good}")
        missed = sum(row.tried - row.checked for row in rows if row.check_must)
        # the drill stands for a restart: whatever torch's load refuses, the drill must fail too
        drill_missed = sum(max(0, row.torch_refused - row.drilled) for row in rows)
    return 1 if missed or refused or drill_missed else 0


if __name__ == "__main__":
    sys.exit(main())
