"""The make-before-break state machine: from one observation of the cluster, the next actions.

Pure: no I/O and no clock of its own. The caller passes ``now`` (Unix seconds, the scale of the API's timestamps)
with each observation. Nothing is remembered between calls: every state lives in the API objects (node labels
and taints, Deployment annotations, pod annotations, the check's state), so a restarted controller decides the
same from the same objects.

Actions describe desired state ("node X reserved for uid U") and are emitted only where the observation differs,
so the same observation twice gives the same actions and, once they are applied, none. They are listed in the
order to apply them: reservations, deletion-cost marks, Deployment placements, check updates, unmarks. Each one
whose prerequisite is a write (rolling a Deployment needs the whole reservation in place) waits until that write
is observed, so a failed or lost write delays a step but never skips one.

Per workload holding quota whose check is Pending, in order of quota reservation (earlier first; nodes taken by
one are not offered to the next):

1. ``maxHold`` since QuotaReserved has passed -> fall back: Ready anyway. Deployments whose replicas are still
   on the reserved nodes go back to their previous placement (nothing is left half-moved); the reservation is
   kept, and passed on in podSetUpdates, only if its healthy nodes can hold the gang once the scheduler has
   preempted what is left on them; otherwise it is released and the gang is admitted without one.
2. Plan (:func:`daemons.make_before_break.plan.choose_room`). The gang cannot fit on the healthy nodes -> wait
   (keeping what is reserved); the message says why.
3. Reserve the planned nodes; release reserved nodes the plan no longer needs. A reserved node that is not Ready
   keeps counting for ``nodeGrace``, so a node that blinks changes nothing.
4. Once every planned node is observed reserved: if nothing has moved yet for this workload, the virtual node
   offers no GPUs and in-cluster GPUs outside the reservation cannot hold the replicas to move -> fall back now
   (no-capacity) instead of waiting for maxHold.
5. Mark the replicas on the reserved nodes (deletion cost) and roll their Deployments out (the flips annotation
   gains the uid; the epoch changes whenever a replica that must leave is of the current template).
6. Ready when every planned node is Ready with the gang's GPUs free, no replica of a Deployment moved for this
   workload is left on its nodes (terminating ones count: they still hold GPUs), and each of those Deployments
   has every desired replica available. podSetUpdates: nodeSelector and toleration for the reservation.

Per admitted workload: its reservation stays while it holds quota; a reserved node quarantined, cordoned, NotReady
past ``nodeGrace`` or lost is replaced one for one by a healthy unreserved node (the gang restarts there:
:mod:`daemons.make_before_break.replace`).

Per workload that no longer holds quota (finished, evicted, being deleted, deleted): its reservations are
released and its uid leaves the flips of every Deployment; a Deployment left with no flips waits for room to come
home. Reservations and flips naming a uid with no live workload are collected the same way.

Returns: a Deployment that waits to come home starts only while no workload is making room, the burst taint is
on the virtual node (new replicas can land in-cluster only), in-cluster GPUs on unreserved nodes can hold its
replicas on rented GPUs plus its surge, and fewer than ``returnBatch`` returns are in progress. Its replicas on
the virtual node are marked to go first; a return ends when its rollout is complete.

Unknown input (a list failed) -> no action, and the reason (fail-static).

Steps 2 to 6 are ``flip_out``; the fallbacks (1 and 4) and an admitted workload keeping its room are
``fallback`` (with ``replace``); workloads that no longer hold quota, and the returns, are ``flip_back``;
``assemble`` lists the actions. They share one :class:`~daemons.make_before_break.cycle.Cycle`, the working state
of this call.
"""

from __future__ import annotations

from dataclasses import dataclass

from daemons.make_before_break.actions import Action, WorkloadReport
from daemons.make_before_break.assemble import assemble
from daemons.make_before_break.cycle import Cycle
from daemons.make_before_break.fallback import hold
from daemons.make_before_break.flip_back import collect, returns
from daemons.make_before_break.flip_out import flip_out
from daemons.make_before_break.model import CheckState, Observation
from daemons.make_before_break.policy import Policy


@dataclass(frozen=True)
class Decision:
    actions: tuple[Action, ...]
    workloads: tuple[WorkloadReport, ...] = ()
    #: Sentences for logs: why nothing changed, what waits for what.
    notes: tuple[str, ...] = ()


def decide(observation: Observation, policy: Policy, now: float) -> Decision:
    """The actions that move the cluster one step towards the desired state."""
    o = observation
    if o.nodes is None or o.pods is None or o.deployments is None or o.workloads is None:
        unknown = " and ".join(o.unknown())
        return Decision((), (), (f"{unknown} unknown (the list failed): changing nothing",))
    cycle = Cycle(
        nodes=o.nodes,
        pods=o.pods,
        deployments=o.deployments,
        workloads=o.workloads,
        virtual_node=o.virtual_node,
        policy=policy,
        now=now,
    )
    collect(cycle)
    for w in sorted(cycle.active.values(), key=lambda w: (w.quota_reserved_at or 0.0, w.uid)):
        if w.check is CheckState.PENDING:
            flip_out(cycle, w)
        else:
            hold(cycle, w)
    returns(cycle)
    return Decision(assemble(cycle), tuple(cycle.reports), tuple(cycle.notes))
