"""The make-before-break state machine, rule by rule, each one both ways.

The cluster of most tests: node a holds 2 replicas of llm (2 GPUs each), b 6 of chat (1 GPU), c an immovable
1-GPU trainer, d is empty unless a test fills it. The gang is one 8-GPU pod, so a or d are the nodes it can have.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from contract.controllers.make_before_break import (
    EPOCH_ANNOTATION,
    FLIPS_ANNOTATION,
    NO_EVICTION_ANNOTATION,
    PHASE_ANNOTATION,
)
from daemons.make_before_break.actions import (
    Fallback,
    PodSetUpdate,
    ReleaseNode,
    ReserveNode,
    SetCheckPending,
    SetCheckReady,
    SetDeletionCost,
    SetPlacement,
    Toleration,
)
from daemons.make_before_break.cycle import MESSAGE_LIMIT
from daemons.make_before_break.decide import Decision, Policy, decide
from daemons.make_before_break.left_behind import LeftBehind, left_behind
from daemons.make_before_break.model import (
    RESERVATION_KEY,
    CheckState,
    Observation,
    Phase,
    Pod,
    VirtualNode,
    Workload,
    epoch_for,
)
from tests.daemons.make_before_break.builders import VIRTUAL, apply, dep, gang, node, observe, of, pod

U = "uid-1"
POLICY = Policy(max_hold_s=600.0, node_grace_s=60.0, max_returning=2)
E1 = epoch_for({U}, None)
NO_ROOM = VirtualNode(VIRTUAL, 0, burst_taint=False)


def cluster(*, d_full: bool = False, workloads: tuple[Workload, ...] | None = None, **kw: Any) -> Observation:
    nodes = [node("a"), node("b"), node("c"), node("d")]
    pods = [
        pod("llm-0", "a", 2, "llm"),
        pod("llm-1", "a", 2, "llm"),
        *(pod(f"chat-{i}", "b", 1, "chat") for i in range(6)),
        pod("trainer", "c", 1, namespace="research"),
    ]
    if d_full:
        pods += [pod(f"big-{i}", "d", 4, "big") for i in range(2)]
    deps = [dep("llm", 2, 2), dep("chat", 6, 1), *([dep("big", 2, 4)] if d_full else [])]
    return observe(nodes, pods, deps, (gang(U, 1, 8),) if workloads is None else workloads, **kw)


def reserved(obs: Observation, *names: str, uid: str = U) -> Observation:
    nodes = tuple(replace(n, reserved_for=uid) if n.name in names else n for n in obs.nodes or ())
    return replace(obs, nodes=nodes)


def with_pods(obs: Observation, *pods: Pod, drop: tuple[str, ...] = ()) -> Observation:
    kept = tuple(p for p in obs.pods or () if p.name not in drop)
    return replace(obs, pods=kept + pods)


def with_dep(obs: Observation, name: str, **kw: Any) -> Observation:
    return replace(obs, deployments=tuple(replace(d, **kw) if d.name == name else d for d in obs.deployments or ()))


def with_workload(obs: Observation, **kw: Any) -> Observation:
    return replace(obs, workloads=tuple(replace(w, **kw) for w in obs.workloads or ()))


def flipped(obs: Observation) -> Observation:
    """llm rolled out for U: its old pods still on a (reserved), two new ones on the virtual node, Ready."""
    obs = with_dep(reserved(obs, "a"), "llm", flips=frozenset({U}), epoch=E1, phase=Phase.MOVED, note=MOVED_NOTE)
    old = (pod(f"llm-{i}", "a", 2, "llm", deletion_cost=-1000) for i in (0, 1))
    new = (pod(f"llm-{i}", VIRTUAL, 2, "llm", epoch=E1) for i in (2, 3))
    return with_pods(obs, *old, *new, drop=("llm-0", "llm-1"))


MOVED_NOTE = "moved off GPUs reserved for team-a/job-uid-1; comes home once that training has finished"


def room_made(obs: Observation) -> Observation:
    """... and the old pods gone from a."""
    return with_pods(flipped(obs), drop=("llm-0", "llm-1"))


def kinds(d: Decision) -> list[str]:
    return [type(a).__name__ for a in d.actions]


def ready(d: Decision) -> SetCheckReady:
    (check,) = of(d.actions, SetCheckReady)
    return check


# ---------------------------------------------------------------- fail-static


@pytest.mark.parametrize("missing", ["nodes", "pods", "deployments", "workloads"])
def test_an_unknown_list_changes_nothing_and_says_which(missing: str) -> None:
    obs = replace(flipped(cluster()), **{missing: None})
    decision = decide(obs, POLICY, 10_000.0)  # even past maxHold: nothing is known well enough to act on
    assert decision.actions == ()
    assert decision.notes == (f"{missing} unknown (the list failed): changing nothing",)


def test_no_virtual_node_is_not_an_unknown_list() -> None:
    assert of(decide(cluster(virtual=None), POLICY, 10.0).actions, ReserveNode)


# ---------------------------------------------------------------- flip-out, step by step


def test_the_first_step_reserves_the_cheapest_node_and_moves_nothing_yet() -> None:
    decision = decide(cluster(d_full=True), POLICY, 10.0)
    assert [(a.node, a.uid) for a in of(decision.actions, ReserveNode)] == [("a", U)]
    assert kinds(decision) == ["ReserveNode", "SetCheckPending"]
    (pending,) = of(decision.actions, SetCheckPending)
    assert pending.message == "reserving 1 nodes for the gang (1 still to reserve)"
    assert decision.workloads[0].phase == "reserving"


def test_an_empty_node_is_cheaper_than_any_move() -> None:
    decision = decide(cluster(), POLICY, 10.0)
    assert [a.node for a in of(decision.actions, ReserveNode)] == ["d"]


def test_once_reserved_the_replicas_are_marked_then_their_deployment_rolls() -> None:
    decision = decide(reserved(cluster(d_full=True), "a"), POLICY, 10.0)
    assert kinds(decision) == ["SetDeletionCost", "SetDeletionCost", "SetPlacement", "SetCheckPending"]
    assert [(a.pod, a.cost) for a in of(decision.actions, SetDeletionCost)] == [("llm-0", -1000), ("llm-1", -1000)]
    (placement,) = of(decision.actions, SetPlacement)
    assert (placement.deployment, placement.flips, placement.epoch, placement.phase) == ("llm", (U,), E1, Phase.MOVED)
    assert placement.annotations[FLIPS_ANNOTATION] == U
    assert placement.annotations[PHASE_ANNOTATION] == "moved"
    assert placement.template_annotations == {EPOCH_ANNOTATION: E1, NO_EVICTION_ANNOTATION: "true"}
    assert "2 of its replicas stand on GPUs reserved for team-a/job-uid-1" in placement.reason
    assert "team-a/job-uid-1" in placement.note
    assert decision.workloads[0].phase == "making-room"


def test_nothing_rolls_until_every_planned_node_is_reserved() -> None:
    two = replace(cluster(d_full=True), workloads=(gang(U, 2, 8),))
    decision = decide(reserved(two, "a"), POLICY, 10.0)
    assert [a.node for a in of(decision.actions, ReserveNode)] == ["b"]
    assert not of(decision.actions, SetPlacement)
    assert not of(decision.actions, SetDeletionCost)
    assert of(decide(reserved(two, "a", "b"), POLICY, 10.0).actions, SetPlacement)


def test_the_same_observation_twice_gives_the_same_decision_and_once_applied_none() -> None:
    obs = reserved(cluster(d_full=True), "a")
    first = decide(obs, POLICY, 10.0)
    assert decide(obs, POLICY, 10.0) == first
    assert decide(apply(obs, first.actions), POLICY, 11.0).actions == ()
    start = cluster(d_full=True)
    assert decide(apply(start, decide(start, POLICY, 10.0).actions), POLICY, 11.0).actions != ()  # next step


def test_ready_when_the_room_is_made_with_the_reservation_in_pod_set_updates() -> None:
    decision = decide(room_made(cluster(d_full=True)), POLICY, 100.0)
    check = ready(decision)
    assert check.fallback is None
    toleration = Toleration(RESERVATION_KEY, U, "Equal", "NoSchedule")
    assert check.pod_set_updates == (PodSetUpdate("workers", {RESERVATION_KEY: U}, (toleration,)),)
    assert check.message.startswith("room made: 1 nodes reserved for the gang; 1 Deployments moved off them first")
    assert decision.workloads[0].phase == "admitting"


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda o: with_pods(o, pod("llm-0", "a", 2, "llm", terminating=True)), "1 terminating"),
        (lambda o: with_pods(o, pod("llm-0", "a", 2, "llm")), "1 replicas (2 GPUs, 0 terminating)"),
        (lambda o: with_dep(o, "llm", available=1), "replacements not yet Ready: inference/llm (1 of 2 available)"),
        (lambda o: reserved(replace(o, nodes=(*o.nodes[1:], node("a", not_ready_since=90.0))), "a"), "not Ready"),
    ],
    ids=["terminating-replica", "replica-still-there", "replacement-not-ready", "node-not-ready"],
)
def test_not_ready_while_anything_stands_between_the_gang_and_its_room(change: Any, says: str) -> None:
    decision = decide(change(room_made(cluster(d_full=True))), POLICY, 100.0)
    assert not of(decision.actions, SetCheckReady)
    (pending,) = of(decision.actions, SetCheckPending)
    assert pending.message.startswith("making room: ")
    assert says in pending.message


def test_a_gang_that_fits_in_free_gpus_is_ready_as_soon_as_they_are_reserved() -> None:
    assert kinds(decide(cluster(), POLICY, 10.0)) == ["ReserveNode", "SetCheckPending"]
    decision = decide(reserved(cluster(), "d"), POLICY, 11.0)
    assert kinds(decision) == ["SetCheckReady"]
    assert ready(decision).pod_set_updates[0].node_selector == {RESERVATION_KEY: U}


def test_a_workload_without_gpus_is_ready_at_once_without_a_reservation() -> None:
    obs = cluster(workloads=(gang(U, 4, 0),))
    check = ready(decide(obs, POLICY, 10.0))
    assert (check.pod_set_updates, check.fallback) == ((), None)
    assert "needs no GPUs" in check.message


def test_a_replica_of_the_current_template_on_a_reserved_node_rolls_its_deployment_again() -> None:
    obs = flipped(cluster(d_full=True))
    obs = with_pods(obs, pod("llm-1", "a", 2, "llm", epoch=E1), drop=("llm-1",))  # landed before the reservation
    (placement,) = of(decide(obs, POLICY, 50.0).actions, SetPlacement)
    assert placement.epoch == epoch_for({U}, E1)
    assert placement.flips == (U,)
    # Replicas of an older template are already leaving: no second rollout for them.
    assert not of(decide(flipped(cluster(d_full=True)), POLICY, 50.0).actions, SetPlacement)


def test_a_pod_of_an_unknown_deployment_is_immovable() -> None:
    obs = with_pods(cluster(d_full=True), pod("ghost-0", "a", 1, "ghost"))
    decision = decide(obs, POLICY, 10.0)
    assert [a.node for a in of(decision.actions, ReserveNode)] == ["b"]  # a is blocked; b costs 6 GPUs, d 8


def test_an_unchanged_progress_message_is_not_written_again() -> None:
    obs = reserved(cluster(d_full=True), "a")
    message = (
        "making room: 2 replicas (4 GPUs, 0 terminating) still on the reserved nodes, "
        "1 of 1 nodes short of the gang's GPUs"
    )
    assert of(decide(obs, POLICY, 10.0).actions, SetCheckPending)[0].message == message
    assert not of(decide(with_workload(obs, check_message=message), POLICY, 10.0).actions, SetCheckPending)


def test_messages_are_cut_to_the_limit() -> None:
    labels = {"gpu": "h100", "zone": "z" * 2000}  # no node has them: the reason names them
    sets = (replace(gang(U).pod_sets[0], node_labels=labels),)
    obs = cluster(workloads=(replace(gang(U), pod_sets=sets),))
    (pending,) = of(decide(obs, POLICY, 10.0).actions, SetCheckPending)
    assert len(pending.message) == MESSAGE_LIMIT
    assert pending.message.endswith("…")
    assert pending.message.startswith("waiting for room: the gang needs 2 pods of 8 GPUs")


# ---------------------------------------------------------------- maxHold


def test_just_before_max_hold_the_check_stays_pending() -> None:
    decision = decide(flipped(cluster(d_full=True)), POLICY, 599.0)
    assert not of(decision.actions, SetCheckReady)
    assert not of(decision.actions, SetPlacement)


def test_at_max_hold_ready_anyway_and_a_deployment_still_in_the_way_goes_back() -> None:
    decision = decide(flipped(cluster(d_full=True)), POLICY, 600.0)
    check = ready(decision)
    assert check.fallback is Fallback.MAX_HOLD
    assert check.pod_set_updates[0].node_selector == {RESERVATION_KEY: U}
    assert check.message.startswith("maxHold 10m00s passed before the room was made: admitted on the 1 reserved nodes")
    assert "preempts the 2 inference replicas still in the way" in check.message
    assert "1 Deployments left where they were" in check.message
    (placement,) = of(decision.actions, SetPlacement)
    assert (placement.flips, placement.epoch, placement.phase, placement.note) == ((), None, None, "")
    assert kinds(decision).index("SetPlacement") < kinds(decision).index("SetCheckReady")
    assert decision.workloads[0].phase == "fallback"


def test_at_max_hold_a_deployment_that_has_moved_stays_moved() -> None:
    obs = with_dep(room_made(cluster(d_full=True)), "llm", available=1)  # out of the way, replacement not Ready
    decision = decide(obs, POLICY, 600.0)
    assert ready(decision).fallback is Fallback.MAX_HOLD
    assert not of(decision.actions, SetPlacement)


def test_at_max_hold_without_room_for_the_gang_it_is_admitted_without_a_reservation() -> None:
    obs = cluster(workloads=(gang(U, 3, 8),))  # a, d and b are the only nodes free of immovable pods
    obs = replace(obs, nodes=(*(n for n in obs.nodes or () if n.name != "b"), node("b", quarantined=True)))
    waiting = decide(obs, POLICY, 599.0)
    (pending,) = of(waiting.actions, SetCheckPending)
    assert pending.message.startswith("waiting for room: the gang needs 3 pods of 8 GPUs; there is room for 2")
    assert "1 quarantined" in pending.message
    assert "1 with immovable GPU pods in the way" in pending.message
    assert not of(waiting.actions, ReserveNode)
    check = ready(decide(obs, POLICY, 600.0))
    assert (check.fallback, check.pod_set_updates) == (Fallback.MAX_HOLD, ())
    assert "admitted without a reservation" in check.message


def test_at_max_hold_a_reservation_that_cannot_hold_the_gang_is_released() -> None:
    obs = reserved(cluster(workloads=(gang(U, 2, 8),)), "a", "d")
    obs = replace(obs, nodes=tuple(replace(n, quarantined=True) if n.name == "d" else n for n in obs.nodes or ()))
    decision = decide(obs, POLICY, 600.0)
    assert ready(decision).pod_set_updates == ()
    assert sorted(a.node for a in of(decision.actions, ReleaseNode)) == ["a", "d"]


# ---------------------------------------------------------------- the provider cannot supply the replacements


def full(obs: Observation) -> Observation:
    """No in-cluster room outside node a: b and c filled up."""
    more = [pod(f"chat-{i}", "b", 1, "chat") for i in (6, 7)] + [pod(f"t{i}", "c", 1) for i in range(7)]
    return with_dep(with_pods(obs, *more), "chat", desired=8, updated=8, available=8, replicas=8)


@pytest.mark.parametrize(
    ("virtual", "gives_up"),
    [
        (NO_ROOM, True),
        (None, True),
        (VirtualNode(VIRTUAL, None, burst_taint=False), False),
        (VirtualNode(VIRTUAL, 2, burst_taint=True), False),
    ],
    ids=["zero-gpus", "no-virtual-node", "capacity-unknown", "some-capacity"],
)
def test_no_capacity_and_no_in_cluster_room_admits_at_once(virtual: VirtualNode | None, gives_up: bool) -> None:
    obs = replace(reserved(full(cluster(d_full=True)), "a"), virtual_node=virtual)
    decision = decide(obs, POLICY, 10.0)
    if gives_up:
        check = ready(decision)
        assert check.fallback is Fallback.NO_CAPACITY
        assert check.message.startswith("the virtual node offers no GPUs and in-cluster GPUs outside the reservation")
        assert check.pod_set_updates[0].node_selector == {RESERVATION_KEY: U}
        assert not of(decision.actions, SetPlacement)
    else:
        assert not of(decision.actions, SetCheckReady)
        assert of(decision.actions, SetPlacement)


def test_zero_capacity_with_in_cluster_room_moves_in_cluster() -> None:
    obs = replace(reserved(cluster(d_full=True), "a"), virtual_node=NO_ROOM)  # c has 7 free GPUs
    decision = decide(obs, POLICY, 10.0)
    assert not of(decision.actions, SetCheckReady)
    assert of(decision.actions, SetPlacement)


def test_once_something_has_moved_zero_capacity_waits_for_max_hold() -> None:
    obs = replace(full(flipped(cluster(d_full=True))), virtual_node=NO_ROOM)
    assert not of(decide(obs, POLICY, 10.0).actions, SetCheckReady)
    assert ready(decide(obs, POLICY, 600.0)).fallback is Fallback.MAX_HOLD


# ---------------------------------------------------------------- nodes that blink


def blinked(since: float) -> Observation:
    two = cluster(workloads=(gang(U, 2, 8),))
    nodes = tuple(n if n.name != "a" else node("a", not_ready_since=since) for n in two.nodes or ())
    return reserved(room_made(replace(two, nodes=nodes)), "a", "d")


def test_a_reserved_node_not_ready_within_the_grace_changes_nothing_but_blocks_ready() -> None:
    decision = decide(blinked(since=100.0), POLICY, 159.0)
    assert not of(decision.actions, ReserveNode)
    assert not of(decision.actions, ReleaseNode)
    assert not of(decision.actions, SetCheckReady)
    assert "reserved nodes not Ready: a" in of(decision.actions, SetCheckPending)[0].message


def test_past_the_grace_the_node_is_replaced_and_released() -> None:
    decision = decide(blinked(since=100.0), POLICY, 160.0)
    assert [a.node for a in of(decision.actions, ReserveNode)] == ["b"]
    assert [a.node for a in of(decision.actions, ReleaseNode)] == ["a"]


def test_a_node_that_comes_back_after_being_replaced_is_not_taken_again() -> None:
    obs = decide_and_apply(blinked(since=100.0), 160.0)
    back = replace(obs, nodes=tuple(replace(n, not_ready_since=None) for n in obs.nodes or ()))
    decision = decide(back, POLICY, 170.0)
    assert not of(decision.actions, ReserveNode)
    assert not of(decision.actions, ReleaseNode)


def test_a_surplus_reserved_node_is_released_dearest_first() -> None:
    obs = reserved(cluster(d_full=True), "a", "d")  # both reserved, the gang needs one: d holds 8 GPUs to move
    decision = decide(obs, POLICY, 10.0)
    assert [a.node for a in of(decision.actions, ReleaseNode)] == ["d"]


def decide_and_apply(obs: Observation, now: float) -> Observation:
    return apply(obs, decide(obs, POLICY, now).actions)


# ---------------------------------------------------------------- flip-back and garbage collection


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"finished": True}, "team-a/job-uid-1, which has finished"),
        ({"evicted": True}, "team-a/job-uid-1, which was evicted"),
        ({"deleting": True}, "team-a/job-uid-1, which is being deleted"),
        ({"quota_reserved_at": None}, "team-a/job-uid-1, which no longer holds quota"),
        (None, "workload uid-1, which no longer exists"),
    ],
    ids=["finished", "evicted", "deleting", "quota-lost", "deleted"],
)
def test_a_workload_gone_mid_flip_releases_its_room_and_its_deployments(
    change: dict[str, Any] | None, says: str
) -> None:
    obs = flipped(cluster(d_full=True))
    obs = replace(obs, workloads=()) if change is None else with_workload(obs, **change)
    decision = decide(obs, POLICY, 100.0)
    (release,) = of(decision.actions, ReleaseNode)
    assert (release.node, release.uid, release.reason) == ("a", U, f"reserved for {says}")
    (placement,) = of(decision.actions, SetPlacement)
    assert (placement.flips, placement.epoch, placement.phase) == ((), E1, Phase.AWAITING_RETURN)
    assert placement.reason == f"moved for {says}"
    assert [(a.pod, a.cost) for a in of(decision.actions, SetDeletionCost)] == [("llm-0", None), ("llm-1", None)]
    assert not of(decision.actions, SetCheckReady)
    assert not of(decision.actions, SetCheckPending)


def test_reservations_and_flips_of_a_uid_with_no_workload_are_collected() -> None:
    obs = reserved(room_made(cluster(d_full=True)), "b", uid="stale")
    obs = with_dep(obs, "chat", flips=frozenset({"stale"}), epoch="e0", phase=Phase.MOVED)
    decision = decide(obs, POLICY, 100.0)
    assert [(a.node, a.uid) for a in of(decision.actions, ReleaseNode)] == [("b", "stale")]
    (placement,) = of(decision.actions, SetPlacement)
    assert (placement.deployment, placement.flips, placement.phase) == ("chat", (), Phase.AWAITING_RETURN)
    assert ready(decision).uid == U  # the live workload is not held up by the collection


def test_an_admitted_workload_keeps_its_room_untouched() -> None:
    obs = with_workload(room_made(cluster(d_full=True)), check=CheckState.READY)
    decision = decide(obs, POLICY, 5000.0)
    assert decision.actions == ()
    assert decision.workloads[0].phase == "admitted"


def test_after_a_crash_between_ready_and_the_revert_the_revert_still_happens() -> None:
    obs = with_workload(flipped(cluster(d_full=True)), check=CheckState.READY)
    (placement,) = of(decide(obs, POLICY, 601.0).actions, SetPlacement)
    assert (placement.flips, placement.epoch) == ((), None)


@pytest.mark.parametrize("check", [None, CheckState.RETRY, CheckState.REJECTED])
def test_a_check_that_is_not_pending_is_not_driven(check: CheckState | None) -> None:
    assert decide(with_workload(cluster(), check=check), POLICY, 10.0).actions == ()


# ---------------------------------------------------------------- two workloads


def test_the_workload_that_reserved_quota_first_gets_the_cheapest_room() -> None:
    first, second = gang("u-1", 1, 8, at=0.0), gang("u-2", 1, 8, at=5.0)
    decision = decide(cluster(workloads=(second, first)), POLICY, 10.0)
    assert [(a.node, a.uid) for a in of(decision.actions, ReserveNode)] == [("d", "u-1"), ("a", "u-2")]
    decision = decide(cluster(workloads=(replace(second, quota_reserved_at=-1.0), first)), POLICY, 10.0)
    assert [(a.node, a.uid) for a in of(decision.actions, ReserveNode)] == [("d", "u-2"), ("a", "u-1")]


def test_the_second_workload_waits_when_the_first_took_the_room() -> None:
    first, second = gang("u-1", 3, 8, at=0.0), gang("u-2", 1, 8, at=5.0)
    decision = decide(cluster(workloads=(first, second)), POLICY, 10.0)
    waiting = next(a for a in of(decision.actions, SetCheckPending) if a.uid == "u-2")
    assert waiting.message == (
        "waiting for room: the gang needs 1 pods of 8 GPUs; there is room for 0: 4 nodes have the labels gpu=h100 "
        "(3 taken by workloads ahead in the queue, 1 with immovable GPU pods in the way)"
    )
    assert {a.uid for a in of(decision.actions, ReserveNode)} == {"u-1"}


def test_a_node_reserved_for_one_workload_is_never_offered_to_another() -> None:
    first, second = gang("u-1", 1, 8, at=0.0), gang("u-2", 1, 8, at=5.0)
    obs = reserved(cluster(workloads=(first, second)), "d", uid="u-2")
    decision = decide(obs, POLICY, 10.0)
    assert [(a.node, a.uid) for a in of(decision.actions, ReserveNode)] == [("a", "u-1")]
    assert ready(decision).uid == "u-2"


# ---------------------------------------------------------------- coming home


def away(*names: str, **kw: Any) -> Observation:
    """Deployments moved for a workload that has finished: two replicas each on the virtual node."""
    nodes = [node("a"), node("b"), node("c"), node("d")]
    pods, deps = [], []
    for name in names:
        pods += [pod(f"{name}-{i}", VIRTUAL, 2, name, epoch="e1") for i in range(2)]
        deps.append(dep(name, 2, 2, epoch="e1", phase=Phase.AWAITING_RETURN, note=AWAY_NOTE))
    return observe(nodes, pods, deps, (), virtual=kw.pop("virtual", VirtualNode(VIRTUAL, 64, burst_taint=True)), **kw)


AWAY_NOTE = "the training it moved for has finished; comes home when in-cluster room allows"
BACK_NOTE = "coming home: each replica on a rented GPU leaves once its in-cluster replacement is Ready"


def test_a_deployment_comes_home_its_rented_replicas_marked_to_go_first() -> None:
    decision = decide(away("llm"), POLICY, 10.0)
    assert kinds(decision) == ["SetDeletionCost", "SetDeletionCost", "SetPlacement"]
    assert [(a.pod, a.cost) for a in of(decision.actions, SetDeletionCost)] == [("llm-0", -1000), ("llm-1", -1000)]
    (placement,) = of(decision.actions, SetPlacement)
    assert (placement.flips, placement.epoch, placement.phase) == ((), None, Phase.RETURNING)
    assert placement.template_annotations == {}
    assert placement.reason == "in-cluster room for its 2 replicas on rented GPUs: coming home"


def test_no_return_while_the_burst_taint_is_off() -> None:
    decision = decide(away("llm", virtual=VirtualNode(VIRTUAL, 64, burst_taint=False)), POLICY, 10.0)
    assert decision.actions == ()
    assert "the burst taint is off" in decision.notes[0]


def test_no_return_while_a_workload_is_making_room() -> None:
    obs = replace(away("llm"), workloads=(gang(U, 1, 8),))
    decision = decide(obs, POLICY, 10.0)
    assert not of(decision.actions, SetPlacement)
    assert "team-a/job-uid-1 still need in-cluster room" in decision.notes[0]
    admitted = replace(away("llm"), workloads=(gang(U, 1, 8, check=CheckState.READY),))
    assert of(decide(admitted, POLICY, 10.0).actions, SetPlacement)


def test_no_return_without_in_cluster_room_for_the_rented_replicas_and_the_surge() -> None:
    obs = away("llm")
    obs = replace(obs, nodes=(node("a", 6),))  # room for 3 replicas of 2 GPUs: 2 rented + 1 surge fit
    assert of(decide(obs, POLICY, 10.0).actions, SetPlacement)
    obs = replace(obs, nodes=(node("a", 5),))  # room for 2
    decision = decide(obs, POLICY, 10.0)
    assert decision.actions == ()
    assert "no in-cluster room for 3 replicas of 2 GPUs" in decision.notes[0]


def test_reserved_nodes_are_not_room_to_come_home_to() -> None:
    obs = replace(
        away("llm"), nodes=(node("a", 8, reserved_for="u-2"),), workloads=(gang("u-2", check=CheckState.READY),)
    )
    assert decide(obs, POLICY, 10.0).actions == ()


def test_returns_are_bounded_and_in_progress_ones_count() -> None:
    decision = decide(away("a1", "a2", "a3"), POLICY, 10.0)
    assert [a.deployment for a in of(decision.actions, SetPlacement)] == ["a1", "a2"]
    assert "a3 waits to come home: 2 returns in progress" in decision.notes[-1]
    obs = with_dep(away("a1", "a2", "a3"), "a1", epoch=None, phase=Phase.RETURNING, note=BACK_NOTE, updated=0)
    assert [a.deployment for a in of(decide(obs, POLICY, 10.0).actions, SetPlacement)] == ["a2"]


def test_a_return_ends_when_its_rollout_is_complete() -> None:
    obs = with_dep(away("llm"), "llm", epoch=None, phase=Phase.RETURNING, note=BACK_NOTE, updated=0)
    assert not of(decide(obs, POLICY, 10.0).actions, SetPlacement)
    home = replace(with_dep(obs, "llm", updated=2), pods=())
    (placement,) = of(decide(home, POLICY, 10.0).actions, SetPlacement)
    assert (placement.flips, placement.epoch, placement.phase, placement.note) == ((), None, None, "")
    assert placement.reason == "its rollout is complete: home"
    lagging = with_dep(home, "llm", current=False)
    assert not of(decide(lagging, POLICY, 10.0).actions, SetPlacement)


# ---------------------------------------------------------------- draining (on its way off)

DRAINING = replace(POLICY, draining=True)


def test_while_draining_a_pending_gang_is_ready_at_once_and_no_room_is_made() -> None:
    running = decide(cluster(), POLICY, 10.0)
    assert of(running.actions, ReserveNode), "running: room is made"
    decision = decide(cluster(), DRAINING, 10.0)
    assert not of(decision.actions, ReserveNode)
    check = ready(decision)
    assert check.fallback is Fallback.DRAINING
    assert check.message == (
        "make-before-break is draining: no new room is made: "
        "admitted without a reservation (no node is reserved for it)"
    )
    assert check.pod_set_updates == ()


def test_while_draining_what_was_done_is_undone() -> None:
    """A finished gang's room is released and its Deployments wait to come home, then come home, as when running."""
    done = with_workload(flipped(cluster(d_full=True)), finished=True)
    decision = decide(done, DRAINING, 100.0)
    assert [(a.node, a.uid) for a in of(decision.actions, ReleaseNode)] == [("a", U)]
    (placement,) = of(decision.actions, SetPlacement)
    assert (placement.flips, placement.phase) == ((), Phase.AWAITING_RETURN)
    (home,) = of(decide(away("llm"), DRAINING, 10.0).actions, SetPlacement)
    assert home.phase is Phase.RETURNING


def test_what_is_left_behind_counts_reserved_nodes_moved_deployments_and_marked_pods() -> None:
    left = left_behind(flipped(cluster(d_full=True)), POLICY.deletion_cost)
    assert left == LeftBehind(nodes=1, deployments=1, pods=2)
    assert not left.nothing
    assert left_behind(away("llm", "chat"), POLICY.deletion_cost) == LeftBehind(nodes=0, deployments=2, pods=0)
    clean = left_behind(cluster(d_full=True), POLICY.deletion_cost)
    assert clean == LeftBehind(0, 0, 0)
    assert clean.nothing
    assert left_behind(replace(cluster(), deployments=None), POLICY.deletion_cost) is None


# ---------------------------------------------------------------- settings


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"max_hold_s": 0}, "max_hold_s"),
        ({"node_grace_s": -1}, "node_grace_s"),
        ({"node_grace_s": 600, "max_hold_s": 600}, "node_grace_s"),
        ({"max_returning": 0}, "max_returning"),
        ({"reservation_key": ""}, "reservation_key"),
    ],
)
def test_the_policy_refuses_values_that_cannot_work(kw: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Policy(**kw)
