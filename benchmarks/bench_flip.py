"""Figures of the flip on the simulated cluster, three ways in one run, printed as columns.

Runs ``make up`` (idempotent: it reuses a running cluster and its daemons), then one full cycle of
``sim/flip.py`` on each path: ``make-before-break`` (the AdmissionCheck moves serving before training takes its
GPUs, and brings it home the same way), ``preempt-then-burst`` (the check answered at once: training preempts,
the taint controller bursts, the descheduler brings replicas home, NoSchedule) and the ``NoExecute`` baseline.
Rows:

- the minimum number of Ready inference replicas over the whole cycle and during the return, the time spent
  below the desired count, inference pods the scheduler preempted;
- training delay: quota reserved -> admitted, and -> every training pod Running;
- flip-out: quota reserved -> room made (make-before-break) or first preemption -> every displaced replica Ready
  on the virtual node, and the same minus the fake provider's boot time (our own overhead);
- flip-back duration, external GPU-seconds over the whole cycle and after in-cluster capacity returned, taint
  changes and flaps;
- the requests sent through the Service at a constant rate over the whole cycle: sent, failed, p50/p99 latency,
  seconds with any failure.

Then a fourth cycle, make-before-break with a load step (``STEP_RATE`` more requests a second for
``STEP_SECONDS`` once training runs, every replica rented): how the HPA answered (replicas asked for, seconds to
raise the count and to have every new replica Ready on rented GPUs, seconds back to minReplicas once the load fell)
and what the requests met, in a table of its own (its training runs longer, so its other rows compare with nothing
above).

Timelines, charts and figures land in ``.state/bench-flip/``. Nothing is asserted: these are measurements.
Environment: GPUCLUSTER_FAKE_BOOT_SECONDS (the fake cloud's boot time, default 5) applies when make up starts
the fake cloud.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.sim_cluster import make_up  # noqa: E402 (run as a script: the repository first on the path)
from sim import flip, timeline  # noqa: E402 (run as a script: the repository first on the path)
from sim import outside as sim_outside  # noqa: E402
from sim import processes as sim_daemons  # noqa: E402
from sim.daemon_runtime import DaemonError  # noqa: E402
from sim.load import LoadError  # noqa: E402

#: The load step: requests a second added once training runs, and for how long; the training run around it.
STEP_RATE = 24
STEP_SECONDS = 40.0
STEP_TRAIN_FOR = "60s"


def main() -> int:
    bin_dir = Path(
        subprocess.run([str(ROOT / "tools" / "bin-dir.sh")], capture_output=True, text=True, check=True).stdout.strip()
    )
    needed = ("kwokctl", "kube-apiserver", "pulumi", "gpucluster-virtual-node", "kube-state-metrics", "vegeta")
    missing = [t for t in needed if not (bin_dir / t).exists()]
    if missing or not Path("/usr/bin/prometheus").exists():
        print(f"bench_flip: skipped: not built or installed: {missing or ['prometheus']} (make tools debian-deps)")
        return 0
    if not make_up("bench_flip"):
        return 1
    out = ROOT / ".state" / "bench-flip"
    boot = float(os.environ.get("GPUCLUSTER_FAKE_BOOT_SECONDS", "5"))
    results = []
    for path in flip.PATHS:
        print(f"bench_flip: one cycle, {path} ...", flush=True)
        try:
            opts = flip.Options(path=path, boot_seconds=boot, quiet=True, out=out, load_rate=flip.LOAD_RATE)
            tl, figures = flip.run_cycle(opts)
        except (flip.ScenarioError, DaemonError, LoadError) as e:
            print(f"bench_flip: the {path} cycle failed: {e}", file=sys.stderr)
            return 1
        flip.write_outputs(tl, figures, out, f"One flip: {path}")
        results.append(figures)
    load = sim_outside.model_load_seconds(sim_daemons.stack_config())
    print(
        f"\nflip on the simulated cluster (8 x 1-GPU replicas, fake provider boot {boot:.0f} s, model load {load:g} s "
        f"in the cluster and rented, {flip.LOAD_RATE} requests a second through the Service)"
    )
    print(timeline.side_by_side(results))
    print(f"timelines and charts: {out}")
    print(f"bench_flip: one cycle, make-before-break with a load step (+{STEP_RATE}/s for {STEP_SECONDS:g} s) ...")
    step_out = out / "load-step"
    try:
        opts = flip.Options(
            path=flip.MAKE_BEFORE_BREAK,
            train_for=STEP_TRAIN_FOR,
            boot_seconds=boot,
            quiet=True,
            out=step_out,
            load_rate=flip.LOAD_RATE,
            load_step=flip.LoadStep(STEP_RATE, STEP_SECONDS),
        )
        tl, figures = flip.run_cycle(opts)
    except (flip.ScenarioError, DaemonError, LoadError) as e:
        print(f"bench_flip: the load-step cycle failed: {e}", file=sys.stderr)
        return 1
    flip.write_outputs(tl, figures, step_out, "Make-before-break with a load step")
    wanted = [label for label, _ in figures.rows() if label.startswith(("HPA:", "request", "seconds with"))]
    rows = dict(figures.rows())
    print(f"\nthe HPA during the flip ({flip.LOAD_RATE} requests a second, training {STEP_TRAIN_FOR})")
    width = max(len(label) for label in wanted)
    for label in wanted:
        print(f"{label.ljust(width)}  {rows[label]}")
    print(f"timeline and chart: {step_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
