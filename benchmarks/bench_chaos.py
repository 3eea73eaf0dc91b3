"""The flip under faults, measured on the simulated cluster: ``sim/chaos.py`` in a shorter run than ``make chaos``.

Runs ``make up`` (idempotent: it reuses a running cluster and its daemons), then ``CYCLES`` make-before-break
cycles with ``KILLS`` SIGKILLs spread over them (the virtual node, the provider service, the taint controller's and
the make-before-break controllers' leaders, the descheduler: every target is hit once before any is hit twice), the
fake cloud refusing 20 % of creates and killing instances at 5 % a minute, and Prometheus stopped for 20 s in the
first cycle. It prints chaos' report: cycles converged, what was killed and how long each took to serve again, what
the fake cloud did, the minimum Ready replicas of each cycle and of each return, training's wait for admission and
the cycle durations. Every cycle must converge (its exit status says whether); the figures are measurements.
Timelines and ``report.json`` land in ``.state/bench-chaos/``.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.sim_cluster import make_up  # noqa: E402 (run as a script: the repository first on the path)
from sim import chaos  # noqa: E402 (run as a script: the repository first on the path)

#: Cycles and kills: enough that every target is killed at least once (five of them where the stack runs
#: make-before-break), in about a third of ``make chaos``'s time.
CYCLES = 2
KILLS = 6


def main() -> int:
    if not make_up("bench_chaos"):
        return 1
    out = ROOT / ".state" / "bench-chaos"
    print(f"bench_chaos: {CYCLES} make-before-break cycles, {KILLS} SIGKILLs, a Prometheus outage ...", flush=True)
    rc = chaos.run(["--kills", str(KILLS), "--cycles", str(CYCLES), "--prometheus-outage", "--out", str(out)])
    print(f"timelines and report: {out}")
    if rc != 0:
        print("bench_chaos: a cycle did not converge (see FAILURE above)", file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
