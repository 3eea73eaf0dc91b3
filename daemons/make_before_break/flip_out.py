"""Flip-out: making the room for a workload whose check is Pending, one step per observation.

Plan the room, reserve it (releasing reserved nodes the plan no longer needs), then once every planned node is
observed reserved mark and roll the Deployments in the way, and go Ready when the room is made. A workload that
needs no GPUs is Ready at once; maxHold passed, or nothing to move the replicas to, is a fallback
(:mod:`daemons.make_before_break.fallback`).
"""

from __future__ import annotations

from collections import Counter

from daemons.make_before_break.actions import Fallback, ReserveNode
from daemons.make_before_break.cycle import Cycle, gpu_pod_sets, take
from daemons.make_before_break.fallback import fall_back
from daemons.make_before_break.model import Workload, epoch_for
from daemons.make_before_break.plan import CannotFit, Plan, choose_room


def _duration(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def flip_out(c: Cycle, w: Workload) -> None:
    uid = w.uid
    held = c.held(w)
    mine = c.mine[uid]
    shapes = gpu_pod_sets(w)
    if not shapes:
        c.ready(w, (), None, "the workload needs no GPUs: no room to make", "admitting")
        return
    if c.policy.draining:
        fall_back(c, w, Fallback.DRAINING, "make-before-break is draining: no new room is made")
        return
    if held >= c.policy.max_hold_s:
        fall_back(
            c,
            w,
            Fallback.MAX_HOLD,
            f"maxHold {_duration(c.policy.max_hold_s)} passed before the room was made",
        )
        return
    grace = frozenset(
        name
        for name in mine
        if (n := c.nodes[name]).not_ready_since is not None and c.now - n.not_ready_since < c.policy.node_grace_s
    )
    plan = choose_room(
        shapes,
        tuple(c.nodes.values()),
        c.pods,
        reserved_for=uid,
        leaving=c.leaving(),
        still_counting=grace,
        exclude=frozenset(c.taken),
    )
    if isinstance(plan, CannotFit):
        c.taken.update(mine)
        c.pending(w, f"waiting for room: {plan.reason}", "waiting", held)
        return
    chosen = plan.node_names
    for name in sorted(chosen - mine):
        c.reserves.append(ReserveNode(name, uid, f"room for the gang of {w.ref}"))
    for name in sorted(mine - chosen - grace):
        c.release(name, uid, f"{w.ref} no longer needs it (the room was planned again)")
    c.taken.update(chosen | mine)
    if chosen - mine:
        c.pending(
            w,
            f"reserving {len(chosen)} nodes for the gang ({len(chosen - mine)} still to reserve)",
            "reserving",
            held,
        )
        return
    if plan.moves and not any(uid in d.flips for d in c.deps.values()) and not _can_replace(c, plan):
        fall_back(
            c,
            w,
            Fallback.NO_CAPACITY,
            f"the virtual node offers no GPUs and in-cluster GPUs outside the reservation cannot hold the "
            f"{len(plan.moves)} replicas to move",
        )
        return
    moves = set(plan.moves)
    for key in plan.deployments:
        c.flips[key].add(uid)
        in_the_way = [p for p in c.pods_of[key] if p.key in moves and p.epoch == c.epoch[key]]
        if in_the_way:
            c.epoch[key] = epoch_for(c.flips[key], c.epoch[key])
            c.why[key].append(f"{len(in_the_way)} of its replicas stand on GPUs reserved for {w.ref}")
    blockers = _room_left(c, w, plan)
    if blockers:
        c.pending(w, "making room: " + "; ".join(blockers), "making-room", held)
        return
    moved = sorted(k for k, flips in c.flips.items() if uid in flips)
    c.ready(
        w,
        c.updates(w),
        None,
        f"room made: {len(chosen)} nodes reserved for the gang; {len(moved)} Deployments moved off them first, "
        "their replacements Ready",
        "admitting",
    )


def _can_replace(c: Cycle, plan: Plan) -> bool:
    """Can the replicas to move go anywhere: rented GPUs, or free in-cluster GPUs outside the reservations?"""
    vn = c.virtual_node
    if vn is not None and (vn.gpus is None or vn.gpus > 0):
        return True
    leaving = c.leaving()
    by_key = {p.key: p for p in c.pods}
    need = Counter(by_key[k].gpus for k in plan.moves if k not in leaving)
    room = c.free_room()
    return all(take(room, gpus, count) for gpus, count in sorted(need.items(), reverse=True))


def _room_left(c: Cycle, w: Workload, plan: Plan) -> list[str]:
    """What still stands between the gang and its room (empty: Ready)."""
    out: list[str] = []
    not_ready = sorted(choice.node for choice in plan.nodes if not c.nodes[choice.node].ready)
    if not_ready:
        out.append(f"reserved nodes not Ready: {', '.join(not_ready)}")
    short = 0
    for choice in plan.nodes:
        used = sum(p.gpus for p in c.pods_on[choice.node])
        if c.nodes[choice.node].gpus - used < choice.gang_gpus:
            short += 1
    moved = sorted(k for k, flips in c.flips.items() if w.uid in flips)
    mine = plan.node_names
    left = [p for k in moved for p in c.pods_of[k] if p.node in mine and p.epoch != c.epoch[k] and p.gpus > 0]
    if left or short:
        gpus = sum(p.gpus for p in left)
        terminating = sum(1 for p in left if p.terminating)
        out.append(
            f"{len(left)} replicas ({gpus} GPUs, {terminating} terminating) still on the reserved nodes, "
            f"{short} of {len(plan.nodes)} nodes short of the gang's GPUs"
        )
    below = [
        f"{k[0]}/{k[1]} ({c.deps[k].available} of {c.deps[k].desired} available)"
        for k in moved
        if c.deps[k].available < c.deps[k].desired
    ]
    if below:
        out.append("replacements not yet Ready: " + ", ".join(below))
    return out
