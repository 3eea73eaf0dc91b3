"""Wall time and CPU of the acceptance pipeline over a simulated fleet against a 2-host run.

Every host is a local-connection node whose GPU/IB/storage tools are the test shims, so the figure
is Ansible's own cost of the pipeline (task dispatch, module runs, verdicts, reports) with the
hardware steps shortened to about a second each: ib_write_bw between partners 1 s per HCA and round,
all_reduce_perf as long as its modelled bandwidth takes over 64M-256M (about 3 s per group). The
baseline is 2 hosts, the smallest run in which the cross-node checks (pairs, collective) have partners.
CPU is that of ansible-playbook and everything it ran: with local
connections the simulated nodes' modules and shims run on this machine too, so it bounds the control
node's share from above. Prints one line per run and the scaling ratio.

Every known fault is seeded on its own node, spread over the fleet, and each run is then verified as
tests/ansible/test_fleet.py verifies its small fleet (harness.fleet_problems): the summary lists exactly
the seeded nodes with the check that caught each, and every host's report has a pass or fail from every
check. Prints that the verification held, or exits non-zero naming what differed.

    .venv/bin/python benchmarks/bench_ansible_fleet.py [--hosts 64] [--forks 16]
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.ansible.harness import FAULTS, build_fleet, fleet_problems, run_dir, run_playbook, spread_faults


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(hosts: int, forks: int, root: Path) -> tuple[float, float, int, int]:
    """Wall time, CPU seconds, exit status and number of nodes seeded to fail of one verified run."""
    tmp = root / f"fleet-{hosts}"
    tmp.mkdir()
    # Seed every known fault once so failing paths are part of the measured work.
    faults = spread_faults(hosts) if hosts > len(FAULTS) else {}
    inventory, expected = build_fleet(tmp, hosts, faults)
    start, cpu0 = time.monotonic(), _children_cpu()
    res = run_playbook("acceptance.yml", inventory, tmp, "--forks", str(forks), timeout=3600)
    wall, cpu = time.monotonic() - start, _children_cpu() - cpu0
    if not (run_dir(tmp) / "summary.json").exists():
        sys.exit(f"run with {hosts} hosts wrote no summary (rc={res.returncode}):\n{res.stdout[-3000:]}")
    problems = fleet_problems(tmp, hosts, expected)
    if (res.returncode != 0) != bool(expected):
        problems.insert(0, f"the play ended rc={res.returncode} with {len(expected)} nodes seeded to fail")
    if problems:
        sys.exit("\n".join([f"verification failed for the run with {hosts} hosts:", *problems]))
    return wall, cpu, res.returncode, len(expected)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=64)
    parser.add_argument("--forks", type=int, default=16)
    args = parser.parse_args()
    if args.hosts < 2 or args.forks < 1:
        parser.error("--hosts must be at least 2 and --forks at least 1")
    with tempfile.TemporaryDirectory(prefix="bench-ansible-fleet-") as d:
        root = Path(d)
        base, base_cpu, rc2, _ = run(2, 2, root)
        print(f"acceptance.yml   2 hosts forks=2   wall {base:7.1f} s  cpu {base_cpu:7.1f} s  rc={rc2}")
        many, cpu, rcn, failing = run(args.hosts, args.forks, root)
        print(
            f"acceptance.yml {args.hosts:3d} hosts forks={args.forks:<3d} wall {many:7.1f} s  cpu {cpu:7.1f} s  "
            f"rc={rcn} ({failing} seeded to fail)"
        )
        print(
            f"verification held at {args.hosts} hosts: the summary lists exactly the {failing} seeded nodes, "
            "each with the checks that caught it, and every host's report has every check pass or fail"
        )
        print(
            f"fleet / 2-host wall ratio {many / base:5.2f}  ({many / args.hosts:.2f} s wall per host; "
            f"cpu {base_cpu / 2:.2f} s per host at 2 hosts, {cpu / args.hosts:.2f} s at {args.hosts})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
