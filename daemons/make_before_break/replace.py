"""Let it crash: an admitted gang whose reserved node goes bad gets a healthy node in its place.

The gang's pods are pinned to its reservation (podSetUpdates select the reservation label). When one of its nodes
is quarantined, cordoned, NotReady for longer than ``nodeGrace``, or lost, the JobSet restarts the whole gang
(the node's fault: not counted against its restart bound), and its pods can only land on the nodes reserved for
it. So, one for one, a healthy unreserved node is reserved in its place (the one with the fewest GPUs in use
first: cheapest to empty) and the bad node is released; the restarted pods schedule there, and the scheduler
preempts the inference pods they need room from (training wins: the gang is down while it waits). With no
healthy node free, the bad node stays reserved and the reason is noted: the gang's pods stay Pending until one is.
A node NotReady for less than ``nodeGrace`` changes nothing, so a node that blinks keeps its gang.

A gang Kueue placed by topology is re-placed by Kueue itself (failed-node replacement): its room follows the
assignment instead of choosing a node of its own, which the pods, pinned to Kueue's nodes, could not use.
"""

from __future__ import annotations

import math

from daemons.make_before_break.actions import ReserveNode
from daemons.make_before_break.cycle import Cycle, gpu_pod_sets
from daemons.make_before_break.model import Node, Workload


def why_bad(c: Cycle, node: Node) -> str | None:
    """Why a reserved node can no longer hold its gang; None while it can (or blinks within nodeGrace)."""
    if node.quarantined:
        return "quarantined"
    if not node.schedulable:
        return "cordoned"
    if node.not_ready_since is not None and c.now - node.not_ready_since >= c.policy.node_grace_s:
        return "NotReady"
    return None


def follow_assignment(c: Cycle, w: Workload, assigned: set[str]) -> None:
    """Kueue placed the gang by topology, and re-places it when a node fails (its failed-node replacement): the
    room follows, reserving the nodes it now names and releasing the ones it dropped once those are reserved."""
    mine = c.mine[w.uid]
    missing: list[str] = []
    for name in sorted(assigned - mine):
        node = c.nodes.get(name)
        if node is None or node.reserved_for not in (None, w.uid) or name in c.taken:
            missing.append(name)
            continue
        c.reserves.append(ReserveNode(name, w.uid, f"Kueue's topology assignment moved the gang of {w.ref} here"))
        c.taken.add(name)
    if missing:
        c.notes.append(f"{w.ref}: Kueue assigned {', '.join(missing)}, which cannot be reserved for it now")
        return
    for name in sorted(mine - assigned):
        c.release(name, w.uid, f"no longer in the topology assignment of {w.ref}")


def replace_bad_nodes(c: Cycle, w: Workload) -> None:
    """Reserve a healthy node for each of ``w``'s reserved nodes that went bad or was lost; release the bad ones.
    A gang Kueue placed by topology keeps exactly the nodes of its assignment instead (:func:`follow_assignment`)."""
    mine = c.mine[w.uid]
    if not mine:
        return  # admitted without a reservation (a fallback): the scheduler places the gang anywhere
    shapes = gpu_pod_sets(w)
    assigned = {name for ps in shapes for name in ps.assigned}
    if assigned:
        follow_assignment(c, w, assigned)
        return
    per_node = max(c.nodes[name].gpus for name in mine)
    if not shapes or per_node <= 0:
        return
    bad = {name: why for name in sorted(mine) if (why := why_bad(c, c.nodes[name])) is not None}
    needed = math.ceil(sum(ps.count * ps.gpus_per_pod for ps in shapes) / per_node)
    short = needed - (len(mine) - len(bad))
    if short <= 0:
        return
    used = {name: sum(p.gpus for p in c.pods_on[name]) for name in c.nodes}
    candidates = sorted(
        (
            n
            for n in c.nodes.values()
            if n.healthy and n.reserved_for is None and n.name not in c.taken and n.gpus >= per_node
        ),
        key=lambda n: (used[n.name], n.name),
    )
    chosen = candidates[:short]
    lost = short - len(bad)  # nodes reserved for the gang that no longer exist
    what = ", ".join(f"{name} ({why})" for name, why in bad.items())
    if lost > 0:
        what = f"{what}, {lost} lost" if what else f"{lost} lost"
    for n in chosen:
        c.reserves.append(ReserveNode(n.name, w.uid, f"in place of {what} for the gang of {w.ref}: it restarts here"))
        c.taken.add(n.name)
    # Release a bad node only once its replacement is reserved: the gang's pods must have somewhere to go.
    replaced = list(bad)[: max(0, len(chosen) - max(lost, 0))]
    for name in replaced:
        c.release(name, w.uid, f"{bad[name]}: the gang of {w.ref} restarts on a healthy node in its place")
    if len(chosen) < short:
        c.notes.append(
            f"{w.ref}: {short - len(chosen)} of its reserved nodes ({what}) have no healthy replacement free; "
            "its pods wait for one"
        )
