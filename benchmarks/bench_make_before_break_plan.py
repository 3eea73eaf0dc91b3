"""How long the make-before-break controller takes to decide, at production scale.

Two clusters of 8-GPU nodes:

- 96 nodes, 4 inference services with 64 replicas in all, and a gang of 64 whole-node pods;
- 512 nodes, 16 services with 2,048 replicas of 1 or 2 GPUs, a few immovable training pods, and a gang of
  256 whole-node pods.

For each it times ``choose_room`` alone and two full ``decide`` cycles: the first (nothing reserved yet: plan and
reserve) and the one after the reservation is in place (plan again, mark the replicas, roll the Deployments).
Prints the median and the slowest of N runs. Nothing is asserted: these are measurements.

Usage: python benchmarks/bench_make_before_break_plan.py [--runs N]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from daemons.make_before_break.actions import ReserveNode  # noqa: E402
from daemons.make_before_break.decide import decide  # noqa: E402 (run as a script)
from daemons.make_before_break.model import (  # noqa: E402
    CheckState,
    Deployment,
    Node,
    Observation,
    Pod,
    PodSet,
    VirtualNode,
    Workload,
)
from daemons.make_before_break.plan import Plan, choose_room  # noqa: E402
from daemons.make_before_break.policy import Policy  # noqa: E402

FLAVOR = {"gpu": "h100"}


def cluster(nodes: int, services: int, replicas: int, gang: int, seed: int = 1) -> tuple[Observation, Workload]:
    rng = random.Random(seed)
    node_list = [Node(f"gpu-{i:03d}", FLAVOR, 8) for i in range(nodes)]
    free = {n.name: 8 for n in node_list}
    pods: list[Pod] = []
    deployments: list[Deployment] = []
    per_service = replicas // services
    for s in range(services):
        gpus = 1 if s % 2 else 2
        name = f"svc-{s:02d}"
        deployments.append(Deployment("inference", name, per_service, per_service, per_service, per_service, gpus))
        for r in range(per_service):
            fits = [n for n, f in free.items() if f >= gpus]
            where = rng.choice(fits)
            free[where] -= gpus
            pods.append(Pod("inference", f"{name}-{r:04d}", where, gpus, name))
    for t in range(nodes // 64):  # a few immovable training pods
        where = f"gpu-{rng.randrange(nodes):03d}"
        if free[where]:
            free[where] -= 1
            pods.append(Pod("research", f"trainer-{t}", where, 1))
    workload = Workload("uid-0", "team-a", "llm", (PodSet("workers", gang, 8, FLAVOR),), 0.0, CheckState.PENDING)
    virtual = VirtualNode("gpu-burst", 4096, burst_taint=False)
    return Observation(tuple(node_list), tuple(pods), tuple(deployments), (workload,), virtual), workload


def timed(fn: Callable[[], object], runs: int) -> tuple[float, float]:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples), max(samples)


def measure(nodes: int, services: int, replicas: int, gang: int, runs: int) -> bool:
    policy = Policy()
    obs, workload = cluster(nodes, services, replicas, gang)
    node_list, pods = obs.nodes or (), obs.pods or ()
    plan = choose_room(workload.pod_sets, node_list, pods, reserved_for=workload.uid)
    if not isinstance(plan, Plan):
        print(f"{nodes} nodes: the gang does not fit: {plan.reason}")
        return False
    first = decide(obs, policy, 1.0)
    reserved = {a.node for a in first.actions if isinstance(a, ReserveNode)}
    after = replace(
        obs, nodes=tuple(replace(n, reserved_for=workload.uid) if n.name in reserved else n for n in node_list)
    )
    second = decide(after, policy, 2.0)
    print(
        f"\n{nodes} nodes x 8 GPUs, {len(pods)} GPU pods of {services} services, gang of {gang} x 8 GPUs: "
        f"{len(plan.nodes)} nodes chosen, {len(plan.moves)} replicas ({plan.move_gpus} GPUs) of "
        f"{len(plan.deployments)} Deployments to move"
    )
    for label, fn in (
        ("choose_room", lambda: choose_room(workload.pod_sets, node_list, pods)),
        (f"decide, first cycle ({len(first.actions)} actions)", lambda: decide(obs, policy, 1.0)),
        (f"decide, reservation in place ({len(second.actions)} actions)", lambda: decide(after, policy, 2.0)),
    ):
        median, slowest = timed(fn, runs)
        print(f"  {label:<48} {median * 1000:8.1f} ms  / {slowest * 1000:8.1f} ms")
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    print(f"make-before-break decision time (median / slowest of {args.runs} runs)")
    ok = all(measure(*scale, args.runs) for scale in ((96, 4, 64, 64), (512, 16, 2048, 256)))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
