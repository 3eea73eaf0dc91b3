"""Choosing the room: whole nodes for whole-node pods, cheapest to empty first, never past an immovable pod."""

from __future__ import annotations

import random
from typing import Any

import pytest

from daemons.make_before_break.model import PodSet
from daemons.make_before_break.plan import CannotFit, Plan, choose_room
from tests.daemons.make_before_break.builders import FLAVOR, node, pod


def gang(pods: int, gpus: int = 8, labels: dict[str, str] | None = None) -> tuple[PodSet, ...]:
    return (PodSet("workers", pods, gpus, FLAVOR if labels is None else labels),)


def plan_of(result: Plan | CannotFit) -> Plan:
    assert isinstance(result, Plan), result
    return result


def test_whole_nodes_cheapest_to_empty_first() -> None:
    nodes = [node("a"), node("b"), node("c"), node("d")]
    pods = [
        *(pod(f"big-{i}", "a", 1, "big") for i in range(5)),  # a: 5 GPUs to move
        pod("mid-0", "b", 2, "mid"),  # b: 2 GPUs
        pod("mid-1", "c", 2, "mid"),  # c: 2 GPUs, same cost as b: by name
    ]
    plan = plan_of(choose_room(gang(2), nodes, pods))
    assert plan.node_names == {"b", "d"}
    assert plan.deployments == (("inference", "mid"),)
    assert plan.moves == (("inference", "mid-0"),)
    assert plan.move_gpus == 2


def test_fewer_pods_break_a_tie_in_gpus() -> None:
    nodes = [node("a"), node("b")]
    pods = [pod("one-0", "a", 4, "one"), pod("two-0", "b", 2, "two"), pod("two-1", "b", 2, "two")]
    assert plan_of(choose_room(gang(1), nodes, pods)).node_names == {"a"}


def test_an_immovable_gpu_pod_takes_a_node_out_of_a_whole_node_gang() -> None:
    nodes = [node("a"), node("b")]
    pods = [pod("trainer", "a", 1)]  # no Deployment: immovable
    assert plan_of(choose_room(gang(1), nodes, pods)).node_names == {"b"}
    result = choose_room(gang(2), nodes, pods)
    assert isinstance(result, CannotFit)
    assert (result.pods_needed, result.pods_placed) == (2, 1)
    assert "1 with immovable GPU pods in the way" in result.reason


def test_an_immovable_pod_leaves_room_for_smaller_pods_beside_it() -> None:
    nodes = [node("a")]
    pods = [pod("trainer", "a", 4), pod("inf-0", "a", 4, "inf")]
    plan = plan_of(choose_room(gang(1, 4), nodes, pods))
    assert plan.moves == (("inference", "inf-0"),)
    assert isinstance(choose_room(gang(2, 4), nodes, pods), CannotFit)


@pytest.mark.parametrize(
    ("kw", "why"),
    [
        ({"not_ready_since": 5.0}, "not Ready"),
        ({"schedulable": False}, "cordoned"),
        ({"quarantined": True}, "quarantined"),
        ({"reserved_for": "other"}, "reserved for other workloads"),
    ],
)
def test_an_unhealthy_or_foreign_node_never_counts(kw: dict[str, Any], why: str) -> None:
    nodes = [node("a", **kw), node("b")]
    assert plan_of(choose_room(gang(1), nodes, [], reserved_for="me")).node_names == {"b"}
    result = choose_room(gang(2), nodes, [], reserved_for="me")
    assert isinstance(result, CannotFit)
    assert f"1 {why}" in result.reason


def test_a_node_still_counting_counts_although_not_ready() -> None:
    nodes = [node("a", not_ready_since=5.0, reserved_for="me"), node("b")]
    result = choose_room(gang(2), nodes, [], reserved_for="me", still_counting=frozenset({"a"}))
    assert plan_of(result).node_names == {"a", "b"}
    cordoned = [node("a", not_ready_since=5.0, reserved_for="me", schedulable=False), node("b")]
    assert isinstance(choose_room(gang(2), cordoned, [], reserved_for="me", still_counting=frozenset({"a"})), CannotFit)


def test_nodes_already_reserved_for_the_workload_come_first_even_when_dearer() -> None:
    nodes = [node("a", reserved_for="me"), node("b")]
    pods = [pod("inf-0", "a", 8, "inf")]
    assert plan_of(choose_room(gang(1), nodes, pods, reserved_for="me")).node_names == {"a"}
    assert plan_of(choose_room(gang(1), nodes, pods, reserved_for="someone")).node_names == {"b"}


def test_on_a_shared_node_the_cheapest_set_of_deployments_moves() -> None:
    nodes = [node("a")]
    pods = [
        pod("pair-0", "a", 1, "pair"),
        pod("pair-1", "a", 1, "pair"),  # 2 GPUs in 2 pods
        pod("solo-0", "a", 2, "solo"),  # 2 GPUs in 1 pod: cheaper
        pod("wide-0", "a", 4, "wide"),  # 4 GPUs
    ]
    plan = plan_of(choose_room(gang(1, 2), nodes, pods))
    assert plan.deployments == (("inference", "solo"),)
    plan = plan_of(choose_room(gang(1, 4), nodes, pods))
    assert plan.deployments == (("inference", "wide"),)
    plan = plan_of(choose_room(gang(1, 6), nodes, pods))
    assert plan.deployments == (("inference", "solo"), ("inference", "wide"))


def test_a_deployment_leaves_every_chosen_node_as_a_whole() -> None:
    nodes = [node("a"), node("b")]
    pods = [
        pod("inf-0", "a", 4, "inf"),
        pod("inf-1", "b", 4, "inf"),
        pod("other-0", "b", 4, "other"),
    ]
    plan = plan_of(choose_room(gang(2, 8), nodes, pods))
    assert plan.moves == (("inference", "inf-0"), ("inference", "inf-1"), ("inference", "other-0"))
    # Three 4-GPU pods: two on a once inf has left it, one in b's free GPUs; inf rolls as a whole, so its
    # replica on b must go as well, though b did not need it gone.
    nodes = [node("a"), node("b")]
    pods = [pod("inf-0", "a", 4, "inf"), pod("inf-1", "b", 2, "inf"), pod("wide-0", "b", 2, "wide")]
    plan = plan_of(choose_room(gang(3, 4), nodes, pods))
    assert {(c.node, c.gang_pods) for c in plan.nodes} == {("a", 2), ("b", 1)}
    assert plan.deployments == (("inference", "inf"),)
    assert plan.moves == (("inference", "inf-0"), ("inference", "inf-1"))


def test_pods_already_leaving_or_terminating_cost_nothing() -> None:
    nodes = [node("a"), node("b")]
    pods = [pod("old-0", "a", 8, "old"), pod("inf-0", "b", 1, "inf")]
    leaving = frozenset({("inference", "old-0")})
    plan = plan_of(choose_room(gang(1), nodes, pods, leaving=leaving))
    assert plan.node_names == {"a"}
    assert plan.moves == (("inference", "old-0"),)  # it must still be gone before the gang lands
    terminating = [pod("old-0", "a", 8, "old", terminating=True), pod("inf-0", "b", 1, "inf")]
    plan = plan_of(choose_room(gang(1), nodes, terminating))
    assert plan.node_names == {"a"}
    assert plan.moves == ()


def test_equal_cost_prefers_the_node_that_hosts_more_of_the_gang() -> None:
    nodes = [node("a", 4), node("b", 8)]
    plan = plan_of(choose_room(gang(2, 4), nodes, []))
    assert plan.node_names == {"b"}
    assert plan.nodes[0].gang_pods == 2


def test_largest_pods_first_and_smaller_ones_in_what_is_left() -> None:
    nodes = [node("a"), node("b", 4)]
    pod_sets = (PodSet("launcher", 1, 4, FLAVOR), PodSet("workers", 1, 8, FLAVOR))
    plan = plan_of(choose_room(pod_sets, nodes, []))
    assert {(c.node, c.gang_gpus) for c in plan.nodes} == {("a", 8), ("b", 4)}
    pod_sets = (PodSet("launcher", 1, 4, FLAVOR), PodSet("workers", 2, 8, FLAVOR))
    result = choose_room(pod_sets, nodes, [])
    assert isinstance(result, CannotFit)
    assert "needs 2 pods of 8 GPUs" in result.reason


def test_only_nodes_of_the_assigned_flavor() -> None:
    nodes = [node("a", labels={"gpu": "l40s"}), node("b")]
    assert plan_of(choose_room(gang(1), nodes, [])).node_names == {"b"}
    result = choose_room(gang(1, labels={"gpu": "a100"}), nodes, [])
    assert isinstance(result, CannotFit)
    assert "no GPU node has the labels gpu=a100" in result.reason


def test_excluded_nodes_are_taken_by_someone_ahead() -> None:
    nodes = [node("a"), node("b")]
    assert plan_of(choose_room(gang(1), nodes, [], exclude=frozenset({"a"}))).node_names == {"b"}
    result = choose_room(gang(2), nodes, [], exclude=frozenset({"a"}))
    assert isinstance(result, CannotFit)
    assert "1 taken by workloads ahead in the queue" in result.reason


def test_pods_of_fewer_gpus_than_a_node_has_never_span_nodes() -> None:
    nodes = [node("a", 4), node("b", 4)]
    result = choose_room(gang(1, 8), nodes, [])
    assert isinstance(result, CannotFit)
    assert "2 with fewer than 8 GPUs" in result.reason


def test_a_gang_without_gpus_needs_no_room() -> None:
    assert choose_room((PodSet("cpu", 4, 0, FLAVOR), PodSet("none", 0, 8, FLAVOR)), [node("a")], []) == Plan((), ())


def test_a_negative_pod_set_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="pod set 'workers'"):
        choose_room((PodSet("workers", -1, 8, FLAVOR),), [node("a")], [])


def test_the_plan_does_not_depend_on_the_order_of_its_inputs() -> None:
    nodes = [node(f"n{i:02d}") for i in range(24)]
    rng = random.Random(7)
    pods = [pod(f"p{i:03d}", f"n{rng.randrange(24):02d}", rng.choice([1, 2]), f"d{i % 5}") for i in range(60)]
    pods = [p for p in pods if sum(q.gpus for q in pods if q.node == p.node and q.name <= p.name) <= 8]
    first = choose_room(gang(10), nodes, pods)
    for seed in range(5):
        r = random.Random(seed)
        shuffled_nodes, shuffled_pods = nodes[:], pods[:]
        r.shuffle(shuffled_nodes)
        r.shuffle(shuffled_pods)
        assert choose_room(gang(10), shuffled_nodes, shuffled_pods) == first


def test_the_cheapest_whole_nodes_at_production_scale() -> None:
    """96 nodes, 64 replicas of 4 services, a 64-node gang: the 32 nodes left are the most loaded ones."""
    nodes = [node(f"n{i:02d}") for i in range(96)]
    pods = []
    for i in range(64):
        pods.append(pod(f"svc{i % 4}-{i:02d}", f"n{i % 48:02d}", 2, f"svc{i % 4}"))
    plan = plan_of(choose_room(gang(64), nodes, pods))
    assert len(plan.nodes) == 64
    assert {f"n{i:02d}" for i in range(48, 96)} <= plan.node_names  # the 48 empty nodes first
    assert plan.move_gpus == sum(p.gpus for p in pods if p.node in plan.node_names)
    assert plan.move_gpus == 16 * 2  # 16 nodes with a single 2-GPU replica
