"""Let it crash: an admitted gang's bad reserved node is replaced one for one by a healthy node."""

from __future__ import annotations

from daemons.make_before_break.actions import ReleaseNode, ReserveNode
from daemons.make_before_break.decide import Decision, Policy, decide
from daemons.make_before_break.model import CheckState, Node, Observation
from tests.daemons.make_before_break.builders import gang, node, observe, of, pod

U = "uid-1"
POLICY = Policy(max_hold_s=600.0, node_grace_s=60.0)
NOW = 1000.0


def admitted(*nodes: Node, pods: tuple[object, ...] = ()) -> Observation:
    """A gang of two 8-GPU pods, admitted, with a and b reserved for it; c and d free or busy as given."""
    w = gang(U, 2, 8, check=CheckState.READY)
    return observe(nodes, pods, (), (w,))  # type: ignore[arg-type]


def mine(name: str, **kw: object) -> Node:
    return node(name, reserved_for=U, **kw)  # type: ignore[arg-type]


def run(obs: Observation) -> Decision:
    return decide(obs, POLICY, NOW)


def test_a_healthy_reservation_changes_nothing() -> None:
    d = run(admitted(mine("a"), mine("b"), node("c")))
    assert of(d.actions, ReserveNode) == []
    assert of(d.actions, ReleaseNode) == []


def test_a_quarantined_node_is_replaced_by_the_cheapest_healthy_node_and_released() -> None:
    obs = admitted(
        mine("a", quarantined=True),
        mine("b"),
        node("c"),
        node("d"),
        pods=(pod("chat-0", "c", 1, "chat"),),
    )
    d = run(obs)
    (reserve,) = of(d.actions, ReserveNode)
    assert (reserve.node, reserve.uid) == ("d", U)  # d is empty, c has a replica: d is cheaper to empty
    assert "a (quarantined)" in reserve.reason
    (release,) = of(d.actions, ReleaseNode)
    assert (release.node, release.uid) == ("a", U)


def test_a_cordoned_node_is_replaced() -> None:
    d = run(admitted(mine("a", schedulable=False), mine("b"), node("c")))
    assert [r.node for r in of(d.actions, ReserveNode)] == ["c"]
    assert "cordoned" in of(d.actions, ReserveNode)[0].reason


def test_a_node_that_blinks_within_node_grace_keeps_its_gang() -> None:
    d = run(admitted(mine("a", not_ready_since=NOW - 59.0), mine("b"), node("c")))
    assert of(d.actions, ReserveNode) == []
    assert of(d.actions, ReleaseNode) == []


def test_a_node_not_ready_past_node_grace_is_replaced() -> None:
    d = run(admitted(mine("a", not_ready_since=NOW - 60.0), mine("b"), node("c")))
    assert [r.node for r in of(d.actions, ReserveNode)] == ["c"]
    assert [r.node for r in of(d.actions, ReleaseNode)] == ["a"]


def test_a_lost_node_is_replaced() -> None:
    d = run(admitted(mine("b"), node("c")))
    (reserve,) = of(d.actions, ReserveNode)
    assert reserve.node == "c"
    assert "1 lost" in reserve.reason


def test_without_a_healthy_free_node_the_bad_node_stays_reserved_and_the_reason_is_noted() -> None:
    d = run(admitted(mine("a", quarantined=True), mine("b"), node("c", schedulable=False), node("d", quarantined=True)))
    assert of(d.actions, ReserveNode) == []
    assert of(d.actions, ReleaseNode) == []
    assert any("no healthy replacement" in n for n in d.notes)


def test_a_gang_admitted_without_a_reservation_is_left_to_the_scheduler() -> None:
    d = run(admitted(node("a", quarantined=True), node("b"), node("c")))
    assert of(d.actions, ReserveNode) == []
