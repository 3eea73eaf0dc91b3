"""Quota correction at production scale: 96 simulated nodes x 8 GPUs, 4 ClusterQueues, 10 nodes lost at once.

``.venv/bin/python benchmarks/scale_capacity.py`` (``make bench-scale-capacity``). Not part of ``make bench``: it
replaces the running cluster. ``make down``, then ``make up`` with ``benchmarks/stacks/Pulumi.capacity96.yaml``
(its two quota controllers run as their Deployment's pods on the real node, as on the local stack), then, with
the ClusterQueues at the stack's numbers:

1. 10 nodes deleted in one call: seconds until every ClusterQueue's quota is right (the stack's shares of 688 of
   768 GPUs); the 10 nodes back, seconds until the stack's numbers again;
2. 10 nodes NotReady at once: seconds until right (``notReadyGrace`` included), and back once Ready again
   (``returnAfter`` included);

and the controller's slowest decision and cycle in that time, from its metrics. Then ``make down`` and the local
cluster back (``make up``) unless ``--no-restore``. Kueue alone never corrects: the numbers stay the stack's.
About 10 minutes on the 2-core development machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from contract.registry import QUOTA_CONTROLLER

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

STACK = "capacity96"
STACK_FILE = ROOT / "benchmarks" / "stacks" / f"Pulumi.{STACK}.yaml"
ENV = {"GPUCLUSTER_STACK": STACK, "GPUCLUSTER_SIM_STACK": str(STACK_FILE), "GPUCLUSTER_SIM_READY_TIMEOUT": "300"}
LOST = 10

from benchmarks import bench_capacity, scale_flip  # noqa: E402 (the repository first on the path)
from sim import deployed as sim_deployed  # noqa: E402
from sim import node_faults  # noqa: E402
from sim import processes as sim_daemons  # noqa: E402


def controller_seconds() -> dict[str, float]:
    """The leader's decide and cycle durations so far: count and sum of each histogram, summed over its pods (each
    read at its pod address)."""
    out: dict[str, float] = {}
    for url in sim_deployed.controller(sim_daemons.stack_config(), "quota-controller").metrics_urls():
        try:
            with urllib.request.urlopen(url, timeout=5) as reply:
                text = reply.read().decode()
        except OSError:
            continue
        for line in text.splitlines():
            for name in ("decide_seconds", "cycle_seconds"):
                for part in ("count", "sum"):
                    prefix = f"gpucluster_quota_controller_{name}_{part} "
                    if line.startswith(prefix):
                        out[f"{name}_{part}"] = out.get(f"{name}_{part}", 0.0) + float(line.split()[1])
    return out


def timed(what: str, want: dict[str, int], timeout: float) -> str:
    t = bench_capacity.until(lambda: bench_capacity.quotas() == want, timeout)
    return f"not within {timeout:.0f} s (now {bench_capacity.quotas()})" if t is None else f"{t:.1f} s"


def measure() -> list[tuple[str, str]]:
    cfg = sim_daemons.stack_config()
    flavor = cfg.flavors[0]
    nodes = [f"{flavor.name}-node-{i}" for i in range(flavor.node_count - LOST, flavor.node_count)]
    full = bench_capacity.expected(0)
    lost = bench_capacity.expected(LOST * flavor.gpus_per_node)
    rows = [("ClusterQueues (quota at full capacity)", ", ".join(f"{q} {n}" for q, n in full.items()))]
    rows.append(
        (f"after {LOST} nodes lost (stack's shares of the rest)", ", ".join(f"{q} {n}" for q, n in lost.items()))
    )
    bench_capacity.until(lambda: bench_capacity.quotas() == full, 120.0)
    before = controller_seconds()

    sim_daemons.kubectl("delete", "node", *nodes, "--wait=false")
    rows.append((f"{LOST} nodes deleted at once: every quota right", timed("deleted", lost, 60.0)))
    for node in nodes:
        node_faults.recreate(node, STACK_FILE)
    rows.append((f"the {LOST} nodes back: the stack's numbers again", timed("back", full, 120.0)))

    for node in nodes:
        node_faults.not_ready(node)
    rows.append((f"{LOST} nodes NotReady at once: every quota right", timed("not ready", lost, 60.0)))
    for node in nodes:
        node_faults.ready(node)
    grace = cfg.controller(QUOTA_CONTROLLER).return_after
    rows.append((f"Ready again: the stack's numbers (returnAfter {grace})", timed("ready", full, 180.0)))

    after = controller_seconds()
    for name in ("decide_seconds", "cycle_seconds"):
        count = after.get(f"{name}_count", 0.0) - before.get(f"{name}_count", 0.0)
        total = after.get(f"{name}_sum", 0.0) - before.get(f"{name}_sum", 0.0)
        if count > 0:
            rows.append((f"controller {name.split('_')[0]}, mean over {count:.0f}", f"{1000 * total / count:.1f} ms"))
    rows.append(("Kueue alone (no controller)", "never: the numbers stay the stack's"))
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/scale_capacity.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-restore", action="store_true", help="leave the cluster down at the end (no make up)")
    args = parser.parse_args(argv)
    status = 0
    print("scale_capacity: make down (the running cluster) ...", flush=True)
    scale_flip.make("down", {}, scale_flip.DOWN_TIMEOUT)
    print(f"scale_capacity: {STACK}: make up ...", flush=True)
    up = scale_flip.make("up", ENV, 2400.0)
    if not up.ok:
        print(f"scale_capacity: make up failed after {up.seconds:.0f} s:\n{up.tail}", file=sys.stderr)
        status = 1
    else:
        os.environ.update(ENV)
        with scale_flip.Monitor() as monitor:
            rows = measure()
        width = max(len(r) for r, _ in rows) + 2
        print(f"\n== {STACK}: 96 nodes x 8 GPUs (768 GPUs), 4 ClusterQueues; make up {up.seconds:.0f} s")
        for row, value in rows:
            print(row.ljust(width) + value)
        print(f"machine: lowest MemAvailable {monitor.min_mem:.0f} MiB, highest 1-min load {monitor.max_load:.1f}")
    print(f"scale_capacity: {STACK}: make down ...", flush=True)
    scale_flip.make("down", ENV, scale_flip.DOWN_TIMEOUT)
    for key in ENV:  # the local cluster, not the scale stack, comes back
        os.environ.pop(key, None)
    if not args.no_restore:
        print("scale_capacity: bringing the local cluster back (make up) ...", flush=True)
        if not scale_flip.make("up", {}, scale_flip.RESTORE_TIMEOUT).ok:
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
