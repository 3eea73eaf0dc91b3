"""How tightly gangs sit on the fabric with Kueue's topology-aware scheduling and without it, on the simulated
cluster that ``make up`` runs (``benchmarks/scale_flip.py`` runs it per scale, after the flip cycles).

The cluster's first flavor must be placed by a topology of the stack (its nodes carry the level labels,
``sim/nodes.py``). Beside the stack's own queues, the benchmark creates two ClusterQueues of its own over the same
nodes, with no admission check (make-before-break stays out of it), each with quota for every GPU of the flavor:

* ``topology``: a ResourceFlavor naming the stack's topology. Gangs get the pod-set annotation a job spec gets
  (preferred at the topology's default level, or required at the level given), and Kueue's assignment pins them.
* ``scheduler``: a ResourceFlavor with the same node labels and no topology. Kueue admits by quota alone and
  kube-scheduler places the pods, as it did before topologies were declared.

One gang at a time, each mode in turn: an Indexed Job of whole-node pods, held by the run-for annotation of
``sim/kwok-stages.yaml`` until measured; once every pod is bound, the blocks, leaves and nodes it spans are read
from the nodes' labels, and the Job is deleted (and its pods gone) before the next. What runs on the nodes at the
time (the inference replicas) stays, as it would in production; the scheduler preempts what a gang needs.

What it does not model: a real fabric's irregular leaves (the simulated layout is regular), other training gangs
fragmenting the nodes (each gang is measured alone on an otherwise idle training side).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from components.config import StackConfig
from contract.constants import HOSTNAME_LABEL, PODSET_PREFERRED_TOPOLOGY, PODSET_REQUIRED_TOPOLOGY

NAMESPACE = "bench-placement"
TOPOLOGY_MODE = "topology"
SCHEDULER_MODE = "scheduler"
MODES = (SCHEDULER_MODE, TOPOLOGY_MODE)
#: The label the benchmark's objects carry, so that a run cleans up what an earlier one left.
BENCH_LABEL = "gpucluster.io/bench"
#: What keeps a simulated pod running until the benchmark deletes it (sim/kwok-stages.yaml).
RUN_FOR_ANNOTATION = "sim.gpucluster.io/run-for"

Kubectl = Callable[..., str]


@dataclass(frozen=True)
class Span:
    """The domains one gang's pods sit in: per level label (widest first), how many distinct values."""

    mode: str
    nodes_asked: int
    per_level: tuple[tuple[str, int], ...]
    seconds: float

    def of(self, label: str) -> int:
        return dict(self.per_level)[label]


def span_of(nodes: Sequence[str], labels: Mapping[str, Mapping[str, str]], levels: Sequence[str]) -> list[int]:
    """Distinct values of each level over ``nodes`` (a node without a level's label counts as its own domain)."""
    out = []
    for level in levels:
        out.append(len({labels.get(n, {}).get(level, f"<none:{n}>") for n in nodes}))
    return out


def bench_objects(stack: StackConfig) -> list[dict[str, Any]]:
    """The namespace, two ResourceFlavors, two ClusterQueues and two LocalQueues the benchmark places through."""
    flavor = stack.flavors[0]
    topology = stack.topology_of(flavor)
    if topology is None:
        raise ValueError(f"flavor {flavor.name!r} names no topology: nothing to compare")
    meta_labels = {BENCH_LABEL: "placement"}
    gpus = flavor.capacity
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE, "labels": meta_labels}}
    ]
    for mode in MODES:
        spec: dict[str, Any] = {"nodeLabels": flavor.selector_labels}
        if mode == TOPOLOGY_MODE:
            spec["topologyName"] = topology.name
        name = f"bench-{mode}"
        objects += [
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ResourceFlavor",
                "metadata": {"name": name, "labels": meta_labels},
                "spec": spec,
            },
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ClusterQueue",
                "metadata": {"name": name, "labels": meta_labels},
                "spec": {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}},
                    "resourceGroups": [
                        {
                            "coveredResources": [flavor.gpu_resource],
                            "flavors": [
                                {"name": name, "resources": [{"name": flavor.gpu_resource, "nominalQuota": gpus}]}
                            ],
                        }
                    ],
                },
            },
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "LocalQueue",
                "metadata": {"name": mode, "namespace": NAMESPACE, "labels": meta_labels},
                "spec": {"clusterQueue": name},
            },
        ]
    return objects


def gang_job(
    stack: StackConfig, name: str, mode: str, nodes: int, annotation: tuple[str, str] | None
) -> dict[str, Any]:
    """An Indexed Job of ``nodes`` whole-node pods on the mode's LocalQueue, at the training PriorityClass."""
    flavor = stack.flavors[0]
    annotations = {RUN_FOR_ANNOTATION: "1000h"}
    if annotation is not None:
        annotations[annotation[0]] = annotation[1]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {"kueue.x-k8s.io/queue-name": mode, BENCH_LABEL: "placement"},
        },
        "spec": {
            "parallelism": nodes,
            "completions": nodes,
            "completionMode": "Indexed",
            "suspend": True,
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": annotations, "labels": {BENCH_LABEL: "placement"}},
                "spec": {
                    "restartPolicy": "Never",
                    "priorityClassName": stack.priorities.pod.training.name,
                    "tolerations": [t.to_k8s() for t in flavor.tolerations],
                    "containers": [
                        {
                            "name": "trainer",
                            "image": "registry.invalid/pretrain:sim",
                            "resources": {"limits": {flavor.gpu_resource: str(flavor.gpus_per_node)}},
                        }
                    ],
                },
            },
        },
    }


def annotation_for(stack: StackConfig, mode: str, level: str | None, required: bool) -> tuple[str, str] | None:
    """The pod-set annotation of a gang in ``mode``: none for the scheduler; the topology's ``level`` (default:
    its default level) otherwise, required or preferred."""
    if mode != TOPOLOGY_MODE:
        return None
    topology = stack.topology_of(stack.flavors[0])
    if topology is None:
        raise ValueError("the first flavor names no topology")
    label = topology.label_of(level or topology.default)
    if label is None:
        raise ValueError(f"no level {level!r} in topology {topology.name!r}")
    return (PODSET_REQUIRED_TOPOLOGY if required else PODSET_PREFERRED_TOPOLOGY, label)


def measure(
    stack: StackConfig,
    kubectl: Kubectl,
    sizes: Sequence[int],
    *,
    level: str | None = None,
    required: bool = False,
    timeout: float = 600.0,
    say: Callable[[str], None] = print,
) -> list[Span]:
    """Place one gang of each size in each mode, one at a time; the spans, in (size, mode) order."""
    flavor = stack.flavors[0]
    topology = stack.topology_of(flavor)
    if topology is None:
        raise ValueError(f"flavor {flavor.name!r} names no topology: nothing to compare")
    levels = topology.node_labels
    cleanup(kubectl)
    kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": bench_objects(stack)}))
    spans: list[Span] = []
    try:
        for size in sizes:
            for mode in MODES:
                name = f"gang-{mode}-{size}"
                job = gang_job(stack, name, mode, size, annotation_for(stack, mode, level, required))
                t0 = time.monotonic()
                kubectl("apply", "-f", "-", input=json.dumps(job))
                bound = _wait_bound(kubectl, name, size, timeout)
                node_labels = {
                    n["metadata"]["name"]: n["metadata"].get("labels") or {}
                    for n in _items(kubectl, "nodes", "-l", f"{HOSTNAME_LABEL}")
                }
                counts = span_of(bound, node_labels, levels)
                spans.append(Span(mode, size, tuple(zip(levels, counts, strict=True)), time.monotonic() - t0))
                say(
                    f"  {mode:9} gang of {size:3} nodes: "
                    + ", ".join(f"{c} {lv}" for lv, c in zip(levels, counts, strict=True))
                )
                kubectl("delete", "job", name, "-n", NAMESPACE, "--wait=true", "--timeout=300s", "--cascade=foreground")
                _wait_gone(kubectl, name, timeout)
    finally:
        cleanup(kubectl)
    return spans


def cleanup(kubectl: Kubectl) -> None:
    """Remove what this benchmark (or an earlier run of it) created."""
    selector = f"{BENCH_LABEL}=placement"
    kubectl("delete", "jobs", "-n", NAMESPACE, "-l", selector, "--ignore-not-found", "--wait=true", check=False)
    for kind in ("localqueues.kueue.x-k8s.io", "clusterqueues.kueue.x-k8s.io", "resourceflavors.kueue.x-k8s.io"):
        kubectl(
            "delete", kind, "-A", "-l", selector, "--ignore-not-found", "--wait=true", "--timeout=120s", check=False
        )


def _items(kubectl: Kubectl, *args: str) -> list[dict[str, Any]]:
    data = json.loads(kubectl("get", *args, "-o", "json"))
    items = data.get("items") or []
    assert isinstance(items, list)
    return items


def _wait_bound(kubectl: Kubectl, job: str, size: int, timeout: float) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        pods = _items(kubectl, "pods", "-n", NAMESPACE, "-l", f"job-name={job}")
        nodes = [
            p["spec"]["nodeName"]
            for p in pods
            if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")
        ]
        if len(nodes) >= size:
            return nodes[:size]
        if time.monotonic() > deadline:
            raise TimeoutError(f"job {job}: {len(nodes)} of {size} pods bound after {timeout:.0f} s")
        time.sleep(1)


def _wait_gone(kubectl: Kubectl, job: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while _items(kubectl, "pods", "-n", NAMESPACE, "-l", f"job-name={job}"):
        if time.monotonic() > deadline:
            raise TimeoutError(f"job {job}: its pods still there after {timeout:.0f} s")
        time.sleep(1)


def table(spans: Sequence[Span], levels: Sequence[str]) -> list[str]:
    """One row per gang size: the domains of each level it spans, scheduler | topology, side by side."""
    short = [lv.rsplit("/", 1)[-1] for lv in levels]
    header = ["gang nodes", *[f"{s} ({SCHEDULER_MODE} | {TOPOLOGY_MODE})" for s in short]]
    rows = [header]
    for size in sorted({s.nodes_asked for s in spans}):
        by_mode = {s.mode: s for s in spans if s.nodes_asked == size}
        cells = [str(size)]
        for lv in levels:
            cells.append(" | ".join(str(by_mode[m].of(lv)) if m in by_mode else "-" for m in MODES))
        rows.append(cells)
    widths = [max(len(r[c]) for r in rows) for c in range(len(header))]
    return ["  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip() for r in rows]


def main(argv: Sequence[str] | None = None) -> int:
    import argparse  # noqa: PLC0415 (only as a script)

    from sim import processes as sim_daemons  # noqa: PLC0415 (sim sits on top: only as a script)

    p = argparse.ArgumentParser(prog="benchmarks/scale_placement.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="2", help="comma-separated gang sizes in whole nodes (default: %(default)s)")
    p.add_argument("--level", default=None, help="a level of the topology (default: its default level)")
    p.add_argument("--required", action="store_true", help="required at the level instead of preferred")
    a = p.parse_args(argv)
    stack = sim_daemons.stack_config()
    topology = stack.topology_of(stack.flavors[0])
    if topology is None:
        print(f"scale_placement: the stack's flavor {stack.flavors[0].name} names no topology", file=sys.stderr)
        return 2
    sizes = [int(x) for x in a.sizes.split(",") if x]
    spans = measure(stack, sim_daemons.kubectl, sizes, level=a.level, required=a.required)
    print("\n".join(table(spans, topology.node_labels)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
