"""Choosing the room for a gang: which GPU nodes to reserve, and which inference replicas must move off them.

Pure: the nodes, the pods bound to them and the gang go in; a :class:`Plan` or a :class:`CannotFit` comes out.

Rules:

1. A node counts only when it is healthy (Ready, schedulable, not quarantined) and not reserved for another
   workload. A node the caller names in ``still_counting`` (reserved for this workload, not Ready for less than
   the grace period) counts as if Ready.
2. A pod needs all its GPUs on one node. On each node, GPUs held by immovable pods (training, system, pods of no
   Deployment) are never freed; GPUs that are free, or held by pods already on their way out (terminating, or
   ``leaving`` because their Deployment is already rolling), cost nothing; the rest are held by movable
   inference pods. A node offers ``(allocatable - immovable) // gpusPerPod`` slots, so 8-GPU pods need whole
   8-GPU nodes and one immovable GPU pod takes such a node out of the count.
3. A Deployment leaves a node as a whole (its rollout replaces every replica, and none can come back onto a
   reserved node). On each node the plan moves the cheapest set of Deployments that frees enough GPUs: fewest
   GPUs moved, then fewest pods, then by name.
4. Nodes are taken cheapest first: nodes already reserved for this workload before any other (their replicas
   are already on the way out, and the choice does not flap from one cycle to the next), then fewest GPUs to
   move, fewest pods, most gang pods hosted (fewer nodes), and name.
5. A pod set Kueue's topology-aware scheduling placed (its admission's ``topologyAssignment``) gets exactly the
   nodes and pod counts Kueue chose, before any other: its pods will be pinned there. When one of them cannot
   take its pods, the result is :class:`CannotFit` naming the node and why.
6. Pod sets of the largest pods are placed first. When the nodes that count cannot hold every pod of the gang,
   the result is :class:`CannotFit` with the reason, nodes by name and what kept each from counting.

Cost: one pass over the pods, then per node a small subset search over the Deployments on it (a node holds at
most as many GPU pods as it has GPUs), then one sort per pod-set shape.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from daemons.make_before_break.model import Node, Pod, PodSet

PodKey = tuple[str, str]
DeploymentKey = tuple[str, str]


@dataclass(frozen=True)
class NodeChoice:
    node: str
    #: Gang pods the plan puts here, and their GPUs.
    gang_pods: int
    gang_gpus: int
    #: Pods that must be gone from this node (namespace, name), sorted; terminating ones are not listed.
    moves: tuple[PodKey, ...]
    move_gpus: int


@dataclass(frozen=True)
class Plan:
    #: The nodes to reserve, by name.
    nodes: tuple[NodeChoice, ...]
    #: The Deployments with replicas that must leave those nodes (namespace, name), sorted: the ones the plan
    #: moves, and the ones already rolling off them.
    deployments: tuple[DeploymentKey, ...]

    @property
    def node_names(self) -> frozenset[str]:
        return frozenset(c.node for c in self.nodes)

    @property
    def moves(self) -> tuple[PodKey, ...]:
        return tuple(sorted(m for c in self.nodes for m in c.moves))

    @property
    def move_gpus(self) -> int:
        return sum(c.move_gpus for c in self.nodes)

    @property
    def gang_gpus(self) -> int:
        return sum(c.gang_gpus for c in self.nodes)


@dataclass(frozen=True)
class CannotFit:
    #: A sentence for people: what the gang needs and why the nodes cannot hold it.
    reason: str
    pods_needed: int
    pods_placed: int


@dataclass
class _Load:
    node: Node
    blocked: int = 0
    going: int = 0
    movable: int = 0

    def __post_init__(self) -> None:
        self.groups: dict[DeploymentKey, list[int]] = {}  # key -> [gpus, pods]

    @property
    def free_now(self) -> int:
        return max(0, self.node.gpus - self.blocked - self.going - self.movable)

    @property
    def costless(self) -> int:
        """GPUs the gang can have here without moving anything: free now, or soon."""
        return self.free_now + self.going

    @property
    def capacity(self) -> int:
        """GPUs the gang can have here at most (everything but the immovable pods)."""
        return min(max(0, self.node.gpus - self.blocked), self.costless + self.movable)


@dataclass(frozen=True)
class _Cost:
    gpus: int
    pods: int
    deployments: tuple[DeploymentKey, ...]


_FREE = _Cost(0, 0, ())


def _cheapest(groups: Mapping[DeploymentKey, list[int]], need: int) -> _Cost:
    """The cheapest set of Deployments whose GPUs on one node add up to at least ``need``."""
    if need <= 0:
        return _FREE
    items = sorted(groups.items())
    total = sum(g for g, _ in groups.values())
    if need >= total:
        return _Cost(total, sum(p for _, p in groups.values()), tuple(k for k, _ in items))
    # Exact sums are few (at most the node's GPUs): keep the cheapest way to reach each.
    best: dict[int, tuple[int, tuple[DeploymentKey, ...]]] = {0: (0, ())}
    for key, (gpus, pods) in items:
        for reached, (p, keys) in list(best.items()):
            candidate = (p + pods, (*keys, key))
            known = best.get(reached + gpus)
            if known is None or candidate < known:
                best[reached + gpus] = candidate
    gpus, (pods, keys) = min(((s, v) for s, v in best.items() if s >= need), key=lambda sv: (sv[0], sv[1]))
    return _Cost(gpus, pods, keys)


def _matches(node: Node, labels: Mapping[str, str]) -> bool:
    return all(node.labels.get(k) == v for k, v in labels.items())


def _label_text(labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or "(any)"


def _shapes(pod_sets: Sequence[PodSet]) -> list[tuple[int, dict[str, str], int]]:
    """Pod sets grouped by (GPUs per pod, node labels): [(gpus, labels, pods)], largest pods first."""
    merged: dict[tuple[int, tuple[tuple[str, str], ...]], int] = defaultdict(int)
    for ps in pod_sets:
        if ps.count < 0 or ps.gpus_per_pod < 0:
            raise ValueError(f"pod set {ps.name!r}: count ({ps.count}) and gpusPerPod ({ps.gpus_per_pod}) must be >= 0")
        if ps.count and ps.gpus_per_pod and not ps.assigned:
            merged[(ps.gpus_per_pod, tuple(sorted(ps.node_labels.items())))] += ps.count
    return [(g, dict(labels), n) for (g, labels), n in sorted(merged.items(), key=lambda kv: (-kv[0][0], kv[0][1]))]


def _why_not(
    nodes: Iterable[Node],
    *,
    loads: Mapping[str, _Load],
    committed: Mapping[str, int],
    gpus: int,
    labels: Mapping[str, str],
    reserved_for: str | None,
    still_counting: frozenset[str],
    exclude: frozenset[str],
) -> str:
    counts: dict[str, int] = defaultdict(int)
    matching = 0
    for node in nodes:
        if not _matches(node, labels):
            continue
        matching += 1
        if node.name in exclude:
            counts["taken by workloads ahead in the queue"] += 1
        elif node.reserved_for not in (None, reserved_for):
            counts["reserved for other workloads"] += 1
        elif not node.ready and node.name not in still_counting:
            counts["not Ready"] += 1
        elif not node.schedulable:
            counts["cordoned"] += 1
        elif node.quarantined:
            counts["quarantined"] += 1
        elif node.gpus < gpus:
            counts[f"with fewer than {gpus} GPUs"] += 1
        elif committed.get(node.name, 0):
            counts["holding the gang's other pods"] += 1
        elif loads[node.name].capacity // gpus == 0:
            counts["with immovable GPU pods in the way"] += 1
    if not matching:
        return f"no GPU node has the labels {_label_text(labels)}"
    why = ", ".join(f"{n} {what}" for what, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    return f"{matching} nodes have the labels {_label_text(labels)}" + (f" ({why})" if why else "")


def _why_not_assigned(
    name: str, nodes: Iterable[Node], room: int, *, reserved_for: str | None, exclude: frozenset[str]
) -> str:
    node = next((n for n in nodes if n.name == name), None)
    if node is None:
        return "does not exist"
    if name in exclude:
        return "is taken by a workload ahead in the queue"
    if node.reserved_for not in (None, reserved_for):
        return "is reserved for another workload"
    if node.quarantined:
        return "is quarantined"
    if not node.schedulable:
        return "is cordoned"
    if not node.ready:
        return "is not Ready"
    return f"has room for {room} (immovable GPU pods in the way)"


def choose_room(
    pod_sets: Sequence[PodSet],
    nodes: Sequence[Node],
    pods: Iterable[Pod],
    *,
    reserved_for: str | None = None,
    leaving: frozenset[PodKey] = frozenset(),
    still_counting: frozenset[str] = frozenset(),
    exclude: frozenset[str] = frozenset(),
) -> Plan | CannotFit:
    """Choose the nodes to reserve for a gang, and the replicas to move off them.

    ``reserved_for`` is the workload's uid: nodes already reserved for it are preferred, nodes reserved for any
    other uid never count. ``leaving`` names pods already on their way out (their Deployment is rolling),
    ``still_counting`` nodes that count although not Ready, ``exclude`` nodes that do not count at all.
    """
    shapes = _shapes(pod_sets)
    placed_by_kueue = [ps for ps in pod_sets if ps.assigned and ps.count and ps.gpus_per_pod]
    if not shapes and not placed_by_kueue:
        return Plan((), ())
    loads: dict[str, _Load] = {}
    for node in nodes:
        counts = node.name not in exclude and node.reserved_for in (None, reserved_for)
        ok = node.healthy or (node.name in still_counting and node.schedulable and not node.quarantined)
        if counts and ok:
            loads[node.name] = _Load(node)
    on_node: dict[str, list[Pod]] = defaultdict(list)
    for pod in pods:
        load = loads.get(pod.node)
        if load is None or pod.gpus <= 0:
            continue
        on_node[pod.node].append(pod)
        if pod.terminating or pod.key in leaving:
            load.going += pod.gpus
        elif pod.deployment is None:
            load.blocked += pod.gpus
        else:
            load.movable += pod.gpus
            group = load.groups.setdefault((pod.namespace, pod.deployment), [0, 0])
            group[0] += pod.gpus
            group[1] += 1

    committed: dict[str, int] = defaultdict(int)
    gang_pods: dict[str, int] = defaultdict(int)
    # Kueue's topology-aware scheduling placed these: the room is exactly its nodes, taken first.
    for ps in placed_by_kueue:
        for name, count in sorted(ps.assigned.items()):
            gpus = ps.gpus_per_pod
            load = loads.get(name)
            room = 0 if load is None else (load.capacity - committed[name]) // gpus
            if room < count:
                why = _why_not_assigned(name, nodes, room, reserved_for=reserved_for, exclude=exclude)
                total = sum(ps.assigned.values())
                return CannotFit(
                    f"Kueue's topology assignment puts {count} pods of {gpus} GPUs on {name}, which {why}",
                    total,
                    total - count,
                )
            committed[name] += count * gpus
            gang_pods[name] += count
    for gpus, labels, count in shapes:
        remaining = count
        candidates: list[tuple[tuple[int, int, int, int, str], str, int]] = []
        for name, load in loads.items():
            if not _matches(load.node, labels):
                continue
            slots = (load.capacity - committed[name]) // gpus
            if slots <= 0:
                continue
            hosted = min(slots, count)
            cost = _cheapest(load.groups, committed[name] + hosted * gpus - load.costless)
            preferred = 0 if reserved_for is not None and load.node.reserved_for == reserved_for else 1
            candidates.append(((preferred, cost.gpus, cost.pods, -hosted, name), name, slots))
        candidates.sort()
        for _, name, slots in candidates:
            if remaining == 0:
                break
            take = min(slots, remaining)
            committed[name] += take * gpus
            gang_pods[name] += take
            remaining -= take
        if remaining:
            why = _why_not(
                nodes,
                loads=loads,
                committed=committed,
                gpus=gpus,
                labels=labels,
                reserved_for=reserved_for,
                still_counting=still_counting,
                exclude=exclude,
            )
            placed = count - remaining
            return CannotFit(
                f"the gang needs {count} pods of {gpus} GPUs; there is room for {placed}: {why}", count, placed
            )

    chosen = sorted(name for name, used in committed.items() if used)
    designated: set[DeploymentKey] = set()
    for name in chosen:
        load = loads[name]
        designated.update(_cheapest(load.groups, committed[name] - load.costless).deployments)
    involved = set(designated)
    choices: list[NodeChoice] = []
    for name in chosen:
        moves: list[PodKey] = []
        move_gpus = 0
        for pod in on_node.get(name, ()):
            if pod.terminating or pod.deployment is None:
                continue
            if pod.key in leaving or (pod.namespace, pod.deployment) in designated:
                moves.append(pod.key)
                move_gpus += pod.gpus
                involved.add((pod.namespace, pod.deployment))
        choices.append(NodeChoice(name, gang_pods[name], committed[name], tuple(sorted(moves)), move_gpus))
    return Plan(tuple(choices), tuple(sorted(involved)))
