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

Per workload that no longer holds quota (finished, evicted, being deleted, deleted): its reservations are
released and its uid leaves the flips of every Deployment; a Deployment left with no flips waits for room to come
home. Reservations and flips naming a uid with no live workload are collected the same way.

Returns: a Deployment that waits to come home starts only while no workload is making room, the burst taint is
on the virtual node (new replicas can land in-cluster only), in-cluster GPUs on unreserved nodes can hold its
replicas on rented GPUs plus its surge, and fewer than ``returnBatch`` returns are in progress. Its replicas on
the virtual node are marked to go first; a return ends when its rollout is complete.

Unknown input (a list failed) -> no action, and the reason (fail-static).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from daemons.make_before_break.model import (
    EPOCH_ANNOTATION,
    FLIPS_ANNOTATION,
    NO_EVICTION_ANNOTATION,
    NOTE_ANNOTATION,
    PHASE_ANNOTATION,
    RESERVATION_KEY,
    CheckState,
    Deployment,
    Node,
    Observation,
    Phase,
    Pod,
    PodSet,
    VirtualNode,
    Workload,
    epoch_for,
)
from daemons.make_before_break.plan import CannotFit, Plan, PodKey, choose_room

DeploymentKey = tuple[str, str]

#: Longest check message written (Kueue allows far more; people read the start).
MESSAGE_LIMIT = 1024


class Fallback(StrEnum):
    """Why a check went Ready before the room was made (a metric label)."""

    MAX_HOLD = "max-hold"
    NO_CAPACITY = "no-capacity"


@dataclass(frozen=True)
class Policy:
    #: How long a workload may be held; measured from QuotaReserved.
    max_hold_s: float = 600.0
    #: How long a reserved node that is not Ready keeps counting.
    node_grace_s: float = 60.0
    #: Deployments coming home at the same time.
    max_returning: int = 2
    #: The pod-deletion-cost that marks a replica to go first.
    deletion_cost: int = -1000
    reservation_key: str = RESERVATION_KEY

    def __post_init__(self) -> None:
        if not self.max_hold_s > 0:
            raise ValueError(f"max_hold_s must be above 0 (got {self.max_hold_s})")
        if not 0 <= self.node_grace_s < self.max_hold_s:
            raise ValueError(f"node_grace_s ({self.node_grace_s}) must be >= 0 and below max_hold_s")
        if self.max_returning < 1:
            raise ValueError(f"max_returning must be at least 1 (got {self.max_returning})")
        if not self.reservation_key:
            raise ValueError("reservation_key must not be empty")


@dataclass(frozen=True)
class Toleration:
    key: str
    value: str
    operator: str = "Equal"
    effect: str = "NoSchedule"


@dataclass(frozen=True)
class PodSetUpdate:
    """One entry of the check's podSetUpdates."""

    name: str
    node_selector: Mapping[str, str]
    tolerations: tuple[Toleration, ...]


@dataclass(frozen=True)
class ReserveNode:
    """Ensure the node carries the reservation label and NoSchedule taint with value ``uid``."""

    node: str
    uid: str
    reason: str


@dataclass(frozen=True)
class ReleaseNode:
    """Ensure the node carries neither the reservation label nor its taint (now holding ``uid``)."""

    node: str
    uid: str
    reason: str


@dataclass(frozen=True)
class SetDeletionCost:
    """Ensure the pod's deletion-cost annotation is ``cost`` (None: absent)."""

    namespace: str
    pod: str
    cost: int | None
    reason: str


@dataclass(frozen=True)
class SetPlacement:
    """Ensure the Deployment's placement annotations are these (server-side apply of our keys only)."""

    namespace: str
    deployment: str
    #: Workload uids it was moved for, sorted; empty: the annotation goes.
    flips: tuple[str, ...]
    #: The template's placement epoch; None: its own template (a change rolls the Deployment out).
    epoch: str | None
    phase: Phase | None
    note: str
    reason: str

    @property
    def annotations(self) -> dict[str, str]:
        """Our keys in metadata.annotations (keys not listed are removed)."""
        out: dict[str, str] = {}
        if self.flips:
            out[FLIPS_ANNOTATION] = ",".join(self.flips)
        if self.phase is not None:
            out[PHASE_ANNOTATION] = self.phase.value
        if self.note:
            out[NOTE_ANNOTATION] = self.note
        return out

    @property
    def template_annotations(self) -> dict[str, str]:
        """Our keys in spec.template.metadata.annotations (keys not listed are removed)."""
        if self.epoch is None:
            return {}
        return {EPOCH_ANNOTATION: self.epoch, NO_EVICTION_ANNOTATION: "true"}


@dataclass(frozen=True)
class SetCheckPending:
    """Keep the check Pending with this message (the progress people read on the workload)."""

    uid: str
    namespace: str
    workload: str
    message: str

    @property
    def reason(self) -> str:
        return self.message


@dataclass(frozen=True)
class SetCheckReady:
    """Set the check Ready. ``fallback`` set: before the room was made (an Event and a metric)."""

    uid: str
    namespace: str
    workload: str
    message: str
    pod_set_updates: tuple[PodSetUpdate, ...]
    fallback: Fallback | None = None

    @property
    def reason(self) -> str:
        return self.message


Action = ReserveNode | ReleaseNode | SetDeletionCost | SetPlacement | SetCheckPending | SetCheckReady


@dataclass(frozen=True)
class WorkloadReport:
    """Where one workload stands after this decision (for logs and metrics)."""

    uid: str
    ref: str
    #: reserving, making-room, waiting, admitting, fallback, admitted
    phase: str
    #: Seconds since QuotaReserved.
    held_s: float
    reserved_nodes: int
    detail: str


@dataclass(frozen=True)
class Decision:
    actions: tuple[Action, ...]
    workloads: tuple[WorkloadReport, ...] = ()
    #: Sentences for logs: why nothing changed, what waits for what.
    notes: tuple[str, ...] = ()


def _cut(text: str) -> str:
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 1] + "…"


def _duration(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def _gpu_pod_sets(workload: Workload) -> tuple[PodSet, ...]:
    return tuple(ps for ps in workload.pod_sets if ps.count > 0 and ps.gpus_per_pod > 0)


def decide(observation: Observation, policy: Policy, now: float) -> Decision:
    """The actions that move the cluster one step towards the desired state."""
    o = observation
    if o.nodes is None or o.pods is None or o.deployments is None or o.workloads is None:
        unknown = " and ".join(o.unknown())
        return Decision((), (), (f"{unknown} unknown (the list failed): changing nothing",))
    cycle = _Cycle(
        nodes=o.nodes,
        pods=o.pods,
        deployments=o.deployments,
        workloads=o.workloads,
        virtual_node=o.virtual_node,
        policy=policy,
        now=now,
    )
    return cycle.run()


class _Cycle:
    """One decision's working state: the observation indexed, and the desired state as it is worked out."""

    def __init__(
        self,
        *,
        nodes: Sequence[Node],
        pods: Sequence[Pod],
        deployments: Sequence[Deployment],
        workloads: Sequence[Workload],
        virtual_node: VirtualNode | None,
        policy: Policy,
        now: float,
    ) -> None:
        self.policy = policy
        self.now = now
        self.virtual_node = virtual_node
        self.reserves: list[ReserveNode] = []
        self.releases: list[ReleaseNode] = []
        self.checks: list[SetCheckPending | SetCheckReady] = []
        self.reports: list[WorkloadReport] = []
        self.notes: list[str] = []
        self.nodes: dict[str, Node] = {n.name: n for n in nodes}
        self.workloads: dict[str, Workload] = {w.uid: w for w in workloads}
        self.active: dict[str, Workload] = {uid: w for uid, w in self.workloads.items() if w.holds_quota}
        self.deps: dict[DeploymentKey, Deployment] = {d.key: d for d in deployments}
        # A pod whose Deployment is not known cannot be moved: treat it as immovable.
        self.pods: tuple[Pod, ...] = tuple(
            p if p.deployment is None or (p.namespace, p.deployment) in self.deps else replace(p, deployment=None)
            for p in pods
        )
        self.pods_on: dict[str, list[Pod]] = defaultdict(list)
        self.pods_of: dict[DeploymentKey, list[Pod]] = defaultdict(list)
        for pod in self.pods:
            self.pods_on[pod.node].append(pod)
            if pod.deployment is not None:
                self.pods_of[(pod.namespace, pod.deployment)].append(pod)
        self.flips: dict[DeploymentKey, set[str]] = {k: set(d.flips) for k, d in self.deps.items()}
        self.epoch: dict[DeploymentKey, str | None] = {k: d.epoch for k, d in self.deps.items()}
        self.returning: set[DeploymentKey] = set()
        self.why: dict[DeploymentKey, list[str]] = defaultdict(list)
        #: uid -> nodes observed reserved for it.
        self.mine: dict[str, set[str]] = defaultdict(set)
        for node in nodes:
            if node.reserved_for is not None:
                self.mine[node.reserved_for].add(node.name)
        self.released: set[str] = set()
        self.taken: set[str] = set()
        self.making_room: list[Workload] = []

    # ---------------------------------------------------------------- the cycle

    def run(self) -> Decision:
        self._collect()
        for w in sorted(self.active.values(), key=lambda w: (w.quota_reserved_at or 0.0, w.uid)):
            if w.check is CheckState.PENDING:
                self._flip_out(w)
            else:
                self._hold(w)
        self._returns()
        return self._assemble()

    def _collect(self) -> None:
        """Flip-back and garbage collection: whatever names a uid that no longer holds quota goes."""
        for uid in sorted(set(self.mine) - set(self.active)):
            for name in sorted(self.mine[uid]):
                self._release(name, uid, f"reserved for {self._gone(uid)}")
        for key in sorted(self.flips):
            gone = sorted(self.flips[key] - set(self.active))
            if gone:
                self.flips[key] -= set(gone)
                self.why[key].append("moved for " + ", ".join(self._gone(uid) for uid in gone))

    def _held(self, w: Workload) -> float:
        """Seconds since the workload's quota was reserved (0 for a workload without quota)."""
        return 0.0 if w.quota_reserved_at is None else self.now - w.quota_reserved_at

    def _gone(self, uid: str) -> str:
        w = self.workloads.get(uid)
        if w is None:
            return f"workload {uid}, which no longer exists"
        if w.deleting:
            return f"{w.ref}, which is being deleted"
        if w.finished:
            return f"{w.ref}, which has finished"
        if w.evicted:
            return f"{w.ref}, which was evicted"
        return f"{w.ref}, which no longer holds quota"

    # ---------------------------------------------------------------- flip-out

    def _flip_out(self, w: Workload) -> None:
        uid = w.uid
        held = self._held(w)
        mine = self.mine[uid]
        shapes = _gpu_pod_sets(w)
        if not shapes:
            self._ready(w, (), None, "the workload needs no GPUs: no room to make", "admitting")
            return
        if held >= self.policy.max_hold_s:
            self._fall_back(
                w,
                Fallback.MAX_HOLD,
                f"maxHold {_duration(self.policy.max_hold_s)} passed before the room was made",
            )
            return
        grace = frozenset(
            name
            for name in mine
            if (n := self.nodes[name]).not_ready_since is not None
            and self.now - n.not_ready_since < self.policy.node_grace_s
        )
        plan = choose_room(
            shapes,
            tuple(self.nodes.values()),
            self.pods,
            reserved_for=uid,
            leaving=self._leaving(),
            still_counting=grace,
            exclude=frozenset(self.taken),
        )
        if isinstance(plan, CannotFit):
            self.taken.update(mine)
            self._pending(w, f"waiting for room: {plan.reason}", "waiting", held)
            return
        chosen = plan.node_names
        for name in sorted(chosen - mine):
            self.reserves.append(ReserveNode(name, uid, f"room for the gang of {w.ref}"))
        for name in sorted(mine - chosen - grace):
            self._release(name, uid, f"{w.ref} no longer needs it (the room was planned again)")
        self.taken.update(chosen | mine)
        if chosen - mine:
            self._pending(
                w,
                f"reserving {len(chosen)} nodes for the gang ({len(chosen - mine)} still to reserve)",
                "reserving",
                held,
            )
            return
        if plan.moves and not any(uid in d.flips for d in self.deps.values()) and not self._can_replace(plan):
            self._fall_back(
                w,
                Fallback.NO_CAPACITY,
                f"the virtual node offers no GPUs and in-cluster GPUs outside the reservation cannot hold the "
                f"{len(plan.moves)} replicas to move",
            )
            return
        moves = set(plan.moves)
        for key in plan.deployments:
            self.flips[key].add(uid)
            in_the_way = [p for p in self.pods_of[key] if p.key in moves and p.epoch == self.epoch[key]]
            if in_the_way:
                self.epoch[key] = epoch_for(self.flips[key], self.epoch[key])
                self.why[key].append(f"{len(in_the_way)} of its replicas stand on GPUs reserved for {w.ref}")
        blockers = self._room_left(w, plan)
        if blockers:
            self._pending(w, "making room: " + "; ".join(blockers), "making-room", held)
            return
        moved = sorted(k for k, flips in self.flips.items() if uid in flips)
        self._ready(
            w,
            self._updates(w),
            None,
            f"room made: {len(chosen)} nodes reserved for the gang; {len(moved)} Deployments moved off them first, "
            "their replacements Ready",
            "admitting",
        )

    def _leaving(self) -> frozenset[PodKey]:
        """Pods whose Deployment's template (as decided so far) is no longer theirs: the rollout replaces them."""
        return frozenset(
            p.key
            for p in self.pods
            if p.deployment is not None and not p.terminating and p.epoch != self.epoch[(p.namespace, p.deployment)]
        )

    def _can_replace(self, plan: Plan) -> bool:
        """Can the replicas to move go anywhere: rented GPUs, or free in-cluster GPUs outside the reservations?"""
        vn = self.virtual_node
        if vn is not None and (vn.gpus is None or vn.gpus > 0):
            return True
        leaving = self._leaving()
        by_key = {p.key: p for p in self.pods}
        need = Counter(by_key[k].gpus for k in plan.moves if k not in leaving)
        room = self._free_room()
        return all(_take(room, gpus, count) for gpus, count in sorted(need.items(), reverse=True))

    def _room_left(self, w: Workload, plan: Plan) -> list[str]:
        """What still stands between the gang and its room (empty: Ready)."""
        out: list[str] = []
        not_ready = sorted(c.node for c in plan.nodes if not self.nodes[c.node].ready)
        if not_ready:
            out.append(f"reserved nodes not Ready: {', '.join(not_ready)}")
        short = 0
        for choice in plan.nodes:
            used = sum(p.gpus for p in self.pods_on[choice.node])
            if self.nodes[choice.node].gpus - used < choice.gang_gpus:
                short += 1
        moved = sorted(k for k, flips in self.flips.items() if w.uid in flips)
        mine = plan.node_names
        left = [p for k in moved for p in self.pods_of[k] if p.node in mine and p.epoch != self.epoch[k] and p.gpus > 0]
        if left or short:
            gpus = sum(p.gpus for p in left)
            terminating = sum(1 for p in left if p.terminating)
            out.append(
                f"{len(left)} replicas ({gpus} GPUs, {terminating} terminating) still on the reserved nodes, "
                f"{short} of {len(plan.nodes)} nodes short of the gang's GPUs"
            )
        below = [
            f"{k[0]}/{k[1]} ({self.deps[k].available} of {self.deps[k].desired} available)"
            for k in moved
            if self.deps[k].available < self.deps[k].desired
        ]
        if below:
            out.append("replacements not yet Ready: " + ", ".join(below))
        return out

    def _fall_back(self, w: Workload, kind: Fallback, why: str) -> None:
        mine = self.mine[w.uid]
        reverted = self._revert_stuck(w)
        healthy = tuple(self.nodes[name] for name in sorted(mine) if self.nodes[name].healthy)
        fit: Plan | CannotFit = CannotFit("no node is reserved for it", 0, 0)
        if healthy:
            fit = choose_room(_gpu_pod_sets(w), healthy, self.pods, reserved_for=w.uid, leaving=self._leaving())
        if isinstance(fit, Plan):
            self.taken.update(mine)
            left = len(fit.moves)
            message = (
                f"{why}: admitted on the {len(mine)} reserved nodes; the scheduler preempts the {left} inference "
                f"replicas still in the way"
            )
            updates = self._updates(w)
        else:
            for name in sorted(mine):
                self._release(name, w.uid, f"{w.ref} was admitted without a reservation")
            message = f"{why}: admitted without a reservation ({fit.reason})"
            updates = ()
        if reverted:
            message += f"; {reverted} Deployments left where they were"
        self._ready(w, updates, kind, message, "fallback")

    def _revert_stuck(self, w: Workload) -> int:
        """Deployments moved for ``w`` whose replicas still stand on its nodes go back to their previous template."""
        mine = self.mine[w.uid]
        count = 0
        for key in sorted(self.flips):
            if w.uid not in self.flips[key]:
                continue
            stuck = [
                p for p in self.pods_of[key] if p.node in mine and not p.terminating and p.epoch != self.epoch[key]
            ]
            if not stuck:
                continue
            epochs = Counter(p.epoch for p in stuck)
            previous = min(epochs, key=lambda e: (-epochs[e], e or ""))
            self.flips[key].discard(w.uid)
            self.epoch[key] = previous
            self.why[key].append(f"{len(stuck)} of its replicas could not leave the GPUs of {w.ref} in time")
            count += 1
        return count

    def _hold(self, w: Workload) -> None:
        """Admitted (or the check is not ours to drive): keep the room as it is until the workload is done."""
        self.taken.update(self.mine[w.uid])
        self._revert_stuck(w)
        self.reports.append(
            WorkloadReport(
                w.uid,
                w.ref,
                "admitted",
                self._held(w),
                len(self.mine[w.uid]),
                f"check {w.check.value if w.check else 'not listed'}; the reservation stays while it holds quota",
            )
        )

    # ---------------------------------------------------------------- flip-back

    def _returns(self) -> None:
        in_flight: list[DeploymentKey] = []
        for key, d in sorted(self.deps.items()):
            if self.flips[key] or self.epoch[key] is not None or d.phase is not Phase.RETURNING:
                continue
            if d.rolled_out and d.epoch is None:
                self.why[key].append("its rollout is complete: home")
            else:
                in_flight.append(key)
                self.returning.add(key)
        waiting = [key for key in sorted(self.deps) if not self.flips[key] and self.epoch[key] is not None]
        if not waiting:
            return
        names = ", ".join(f"{k[0]}/{k[1]}" for k in waiting)
        if self.making_room:
            refs = ", ".join(w.ref for w in self.making_room)
            self.notes.append(f"{names} wait to come home: {refs} still need in-cluster room")
            return
        vn = self.virtual_node
        if vn is not None and not vn.burst_taint:
            self.notes.append(f"{names} wait to come home: the burst taint is off, replicas could land on {vn.name}")
            return
        room = self._free_room()
        for key in in_flight:
            _take(room, self.deps[key].gpus_per_pod, self._rented(key) + self.deps[key].surge)
        for key in waiting:
            d = self.deps[key]
            if len(in_flight) >= self.policy.max_returning:
                self.notes.append(f"{key[0]}/{key[1]} waits to come home: {len(in_flight)} returns in progress")
                continue
            rented = self._rented(key)
            if d.gpus_per_pod > 0 and not _take(room, d.gpus_per_pod, rented + d.surge):
                self.notes.append(
                    f"{key[0]}/{key[1]} waits to come home: no in-cluster room for {rented + d.surge} replicas of "
                    f"{d.gpus_per_pod} GPUs"
                )
                continue
            self.epoch[key] = None
            self.returning.add(key)
            in_flight.append(key)
            self.why[key].append(f"in-cluster room for its {rented} replicas on rented GPUs: coming home")

    def _rented(self, key: DeploymentKey) -> int:
        vn = self.virtual_node
        if vn is None:
            return 0
        return sum(1 for p in self.pods_of[key] if p.node == vn.name and not p.terminating)

    def _free_room(self) -> dict[str, int]:
        """Free GPUs on healthy in-cluster nodes that nobody has reserved or is about to."""
        room: dict[str, int] = {}
        for name, node in self.nodes.items():
            if not node.healthy or node.reserved_for is not None or name in self.taken:
                continue
            free = node.gpus - sum(p.gpus for p in self.pods_on[name])
            if free > 0:
                room[name] = free
        return room

    # ---------------------------------------------------------------- output

    def _release(self, name: str, uid: str, reason: str) -> None:
        if name not in self.released:
            self.released.add(name)
            self.releases.append(ReleaseNode(name, uid, reason))

    def _updates(self, w: Workload) -> tuple[PodSetUpdate, ...]:
        key = self.policy.reservation_key
        toleration = Toleration(key, w.uid)
        return tuple(PodSetUpdate(ps.name, {key: w.uid}, (toleration,)) for ps in _gpu_pod_sets(w))

    def _ready(
        self,
        w: Workload,
        updates: tuple[PodSetUpdate, ...],
        fallback: Fallback | None,
        message: str,
        phase: str,
    ) -> None:
        message = _cut(message)
        self.checks.append(SetCheckReady(w.uid, w.namespace, w.name, message, updates, fallback))
        held = self._held(w)
        reserved = len(self.mine[w.uid]) if updates else 0
        self.reports.append(WorkloadReport(w.uid, w.ref, phase, held, reserved, message))

    def _pending(self, w: Workload, message: str, phase: str, held: float) -> None:
        message = _cut(message)
        self.making_room.append(w)
        if w.check_message != message:
            self.checks.append(SetCheckPending(w.uid, w.namespace, w.name, message))
        self.reports.append(WorkloadReport(w.uid, w.ref, phase, held, len(self.mine[w.uid]), message))

    def _phase(self, key: DeploymentKey) -> Phase | None:
        if self.flips[key]:
            return Phase.MOVED
        if self.epoch[key] is not None:
            return Phase.AWAITING_RETURN
        if key in self.returning:
            return Phase.RETURNING
        return None

    def _note(self, key: DeploymentKey, phase: Phase | None) -> str:
        if phase is Phase.MOVED:
            refs = ", ".join(sorted(self.active[uid].ref for uid in self.flips[key]))
            return f"moved off GPUs reserved for {refs}; comes home once that training has finished"
        if phase is Phase.AWAITING_RETURN:
            return "the training it moved for has finished; comes home when in-cluster room allows"
        if phase is Phase.RETURNING:
            return "coming home: each replica on a rented GPU leaves once its in-cluster replacement is Ready"
        return ""

    def _want_mark(self, pod: Pod) -> bool:
        if pod.deployment is None:
            return False
        key = (pod.namespace, pod.deployment)
        if pod.epoch == self.epoch[key]:
            return False
        vn = self.virtual_node
        if vn is not None and pod.node == vn.name:
            return key in self.returning
        holder = self.nodes[pod.node].reserved_for if pod.node in self.nodes else None
        return holder in self.active and pod.node not in self.released

    def _assemble(self) -> Decision:
        placements: list[SetPlacement] = []
        for key, d in sorted(self.deps.items()):
            flips = tuple(sorted(self.flips[key]))
            phase = self._phase(key)
            note = self._note(key, phase)
            if (frozenset(flips), self.epoch[key], phase, note) == (d.flips, d.epoch, d.phase, d.note):
                continue
            reason = "; ".join(self.why[key]) or note or "placement annotations repaired"
            placements.append(SetPlacement(key[0], key[1], flips, self.epoch[key], phase, note, reason))
        marks: list[SetDeletionCost] = []
        unmarks: list[SetDeletionCost] = []
        cost = self.policy.deletion_cost
        for pod in sorted(self.pods, key=lambda p: p.key):
            if pod.terminating:
                continue  # on its way out: its annotations no longer matter
            want = self._want_mark(pod)
            if want and pod.deletion_cost != cost:
                rented = self.virtual_node is not None and pod.node == self.virtual_node.name
                why = "on a rented GPU: goes first as it comes home" if rented else "in the way: goes first"
                marks.append(SetDeletionCost(pod.namespace, pod.name, cost, why))
            elif not want and pod.deletion_cost == cost:
                unmarks.append(SetDeletionCost(pod.namespace, pod.name, None, "no longer in the way"))
        actions: Sequence[Action] = (
            *self.reserves,
            *self.releases,
            *marks,
            *placements,
            *self.checks,
            *unmarks,
        )
        return Decision(tuple(actions), tuple(self.reports), tuple(self.notes))


def _take(room: dict[str, int], gpus: int, count: int) -> bool:
    """Take ``count`` slots of ``gpus`` GPUs from ``room`` (fullest nodes first); False, taking nothing, if short."""
    if count <= 0 or gpus <= 0:
        return True
    if sum(free // gpus for free in room.values()) < count:
        return False
    left = count
    for name, free in sorted(room.items(), key=lambda kv: (kv[1], kv[0])):
        slots = min(free // gpus, left)
        if slots:
            room[name] = free - slots * gpus
            left -= slots
        if not left:
            break
    return True
