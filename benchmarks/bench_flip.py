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
  changes and flaps.

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

from sim import flip, timeline  # noqa: E402 (run as a script: the repository first on the path)
from sim import processes as sim_daemons  # noqa: E402
from sim.daemon_runtime import DaemonError  # noqa: E402
from sim.load import LoadError  # noqa: E402


def main() -> int:
    bin_dir = Path(
        subprocess.run([str(ROOT / "tools" / "bin-dir.sh")], capture_output=True, text=True, check=True).stdout.strip()
    )
    needed = ("kwokctl", "kube-apiserver", "pulumi", "gpucluster-virtual-node", "kube-state-metrics", "vegeta")
    missing = [t for t in needed if not (bin_dir / t).exists()]
    if missing or not Path("/usr/bin/prometheus").exists():
        print(f"bench_flip: skipped: not built or installed: {missing or ['prometheus']} (make tools debian-deps)")
        return 0
    up = subprocess.run(["make", "--no-print-directory", "up"], cwd=ROOT, capture_output=True, text=True, check=False)
    if up.returncode != 0:
        print(up.stdout[-3000:], up.stderr[-3000:], sep="\n", file=sys.stderr)
        print("bench_flip: make up failed", file=sys.stderr)
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
    load = sim_daemons.model_load_seconds(sim_daemons.stack_config())
    print(
        f"\nflip on the simulated cluster (8 x 1-GPU replicas, fake provider boot {boot:.0f} s, model load {load:g} s "
        f"in the cluster and rented, {flip.LOAD_RATE} requests a second through the Service)"
    )
    print(timeline.side_by_side(results))
    print(f"timelines and charts: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
