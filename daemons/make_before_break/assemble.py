"""The desired state worked out in a :class:`~daemons.make_before_break.cycle.Cycle` -> the actions that change it.

Only what differs from the observation is emitted, so the same observation twice gives the same actions and, once
they are applied, none. The order is the order to apply them: reservations, releases, deletion-cost marks,
Deployment placements, check updates, unmarks.
"""

from __future__ import annotations

from collections.abc import Sequence

from daemons.make_before_break.actions import Action, SetDeletionCost, SetPlacement
from daemons.make_before_break.cycle import Cycle, DeploymentKey
from daemons.make_before_break.model import Phase, Pod


def assemble(c: Cycle) -> tuple[Action, ...]:
    placements: list[SetPlacement] = []
    for key, d in sorted(c.deps.items()):
        flips = tuple(sorted(c.flips[key]))
        phase = _phase(c, key)
        note = _note(c, key, phase)
        if (frozenset(flips), c.epoch[key], phase, note) == (d.flips, d.epoch, d.phase, d.note):
            continue
        reason = "; ".join(c.why[key]) or note or "placement annotations repaired"
        placements.append(SetPlacement(key[0], key[1], flips, c.epoch[key], phase, note, reason))
    marks: list[SetDeletionCost] = []
    unmarks: list[SetDeletionCost] = []
    cost = c.policy.deletion_cost
    for pod in sorted(c.pods, key=lambda p: p.key):
        if pod.terminating:
            continue  # on its way out: its annotations no longer matter
        want = _want_mark(c, pod)
        if want and pod.deletion_cost != cost:
            rented = c.virtual_node is not None and pod.node == c.virtual_node.name
            why = "on a rented GPU: goes first as it comes home" if rented else "in the way: goes first"
            marks.append(SetDeletionCost(pod.namespace, pod.name, cost, why))
        elif not want and pod.deletion_cost == cost:
            unmarks.append(SetDeletionCost(pod.namespace, pod.name, None, "no longer in the way"))
    actions: Sequence[Action] = (
        *c.reserves,
        *c.releases,
        *marks,
        *placements,
        *c.checks,
        *unmarks,
    )
    return tuple(actions)


def _phase(c: Cycle, key: DeploymentKey) -> Phase | None:
    if c.flips[key]:
        return Phase.MOVED
    if c.epoch[key] is not None:
        return Phase.AWAITING_RETURN
    if key in c.returning:
        return Phase.RETURNING
    return None


def _note(c: Cycle, key: DeploymentKey, phase: Phase | None) -> str:
    if phase is Phase.MOVED:
        refs = ", ".join(sorted(c.active[uid].ref for uid in c.flips[key]))
        return f"moved off GPUs reserved for {refs}; comes home once that training has finished"
    if phase is Phase.AWAITING_RETURN:
        return "the training it moved for has finished; comes home when in-cluster room allows"
    if phase is Phase.RETURNING:
        return "coming home: each replica on a rented GPU leaves once its in-cluster replacement is Ready"
    return ""


def _want_mark(c: Cycle, pod: Pod) -> bool:
    if pod.deployment is None:
        return False
    key = (pod.namespace, pod.deployment)
    if pod.epoch == c.epoch[key]:
        return False
    vn = c.virtual_node
    if vn is not None and pod.node == vn.name:
        return key in c.returning
    holder = c.nodes[pod.node].reserved_for if pod.node in c.nodes else None
    return holder in c.active and pod.node not in c.released
