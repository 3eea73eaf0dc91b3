"""Flip-back: what was done for a workload that no longer holds quota is undone, and moved Deployments come home.

Its reservations are released and its uid leaves the flips of every Deployment (so are reservations and flips
naming a uid with no live workload). A Deployment left with no flips waits to come home; it starts only while no
workload is making room, the burst taint is on the virtual node (new replicas can land in-cluster only),
in-cluster GPUs on unreserved nodes can hold its replicas on rented GPUs plus its surge, and fewer than
``returnBatch`` returns are in progress. A return ends when its rollout is complete.
"""

from __future__ import annotations

from daemons.make_before_break.cycle import Cycle, DeploymentKey, take
from daemons.make_before_break.model import Phase


def collect(c: Cycle) -> None:
    """Flip-back and garbage collection: whatever names a uid that no longer holds quota goes."""
    for uid in sorted(set(c.mine) - set(c.active)):
        for name in sorted(c.mine[uid]):
            c.release(name, uid, f"reserved for {c.gone(uid)}")
    for key in sorted(c.flips):
        gone = sorted(c.flips[key] - set(c.active))
        if gone:
            c.flips[key] -= set(gone)
            c.why[key].append("moved for " + ", ".join(c.gone(uid) for uid in gone))


def returns(c: Cycle) -> None:
    """Which Deployments waiting to come home start now, and which returns have ended."""
    in_flight: list[DeploymentKey] = []
    for key, d in sorted(c.deps.items()):
        if c.flips[key] or c.epoch[key] is not None or d.phase is not Phase.RETURNING:
            continue
        if d.rolled_out and d.epoch is None:
            c.why[key].append("its rollout is complete: home")
        else:
            in_flight.append(key)
            c.returning.add(key)
    waiting = [key for key in sorted(c.deps) if not c.flips[key] and c.epoch[key] is not None]
    if not waiting:
        return
    names = ", ".join(f"{k[0]}/{k[1]}" for k in waiting)
    if c.making_room:
        refs = ", ".join(w.ref for w in c.making_room)
        c.notes.append(f"{names} wait to come home: {refs} still need in-cluster room")
        return
    vn = c.virtual_node
    if vn is not None and not vn.burst_taint:
        c.notes.append(f"{names} wait to come home: the burst taint is off, replicas could land on {vn.name}")
        return
    room = c.free_room()
    for key in in_flight:
        take(room, c.deps[key].gpus_per_pod, _rented(c, key) + c.deps[key].surge)
    for key in waiting:
        d = c.deps[key]
        if len(in_flight) >= c.policy.max_returning:
            c.notes.append(f"{key[0]}/{key[1]} waits to come home: {len(in_flight)} returns in progress")
            continue
        rented = _rented(c, key)
        if d.gpus_per_pod > 0 and not take(room, d.gpus_per_pod, rented + d.surge):
            c.notes.append(
                f"{key[0]}/{key[1]} waits to come home: no in-cluster room for {rented + d.surge} replicas of "
                f"{d.gpus_per_pod} GPUs"
            )
            continue
        c.epoch[key] = None
        c.returning.add(key)
        in_flight.append(key)
        c.why[key].append(f"in-cluster room for its {rented} replicas on rented GPUs: coming home")


def _rented(c: Cycle, key: DeploymentKey) -> int:
    vn = c.virtual_node
    if vn is None:
        return 0
    return sum(1 for p in c.pods_of[key] if p.node == vn.name and not p.terminating)
