"""A gang Kueue placed by topology: its assignment read in every encoding, and the room is exactly its nodes."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from daemons.make_before_break.actions import ReleaseNode, ReserveNode
from daemons.make_before_break.decide import Policy, decide
from daemons.make_before_break.model import CheckState, PodSet
from daemons.make_before_break.observe import observe as observe_api
from daemons.make_before_break.plan import CannotFit, Plan, choose_room
from daemons.make_before_break.topology_assignment import AssignmentError, decode, pods_per_node
from tests.daemons.make_before_break.api_objects import S, raw
from tests.daemons.make_before_break.builders import FLAVOR, gang, node, observe, of, pod

HOST = "kubernetes.io/hostname"

#: Kueue 0.17's own encoding of 4 pods on h100-node-0 and 4 on h100-node-1 (tas_assignment.go: one slice, the
#: longest common prefix, a universal count).
V1BETA2 = {
    "levels": [HOST],
    "slices": [
        {
            "domainCount": 2,
            "valuesPerLevel": [{"individual": {"prefix": "h100-node-", "roots": ["0", "1"]}}],
            "podCounts": {"universal": 4},
        }
    ],
}
#: The same assignment as the v1beta1 view serves it through the conversion webhook.
V1BETA1 = {
    "levels": [HOST],
    "domains": [{"values": ["h100-node-0"], "count": 4}, {"values": ["h100-node-1"], "count": 4}],
}


def test_the_stored_and_the_served_forms_read_the_same() -> None:
    assert pods_per_node(V1BETA2) == pods_per_node(V1BETA1) == {"h100-node-0": 4, "h100-node-1": 4}


def test_empty_roots_suffixes_individual_counts_universal_levels_and_several_slices() -> None:
    # h100-node-1 and h100-node-11: prefix "h100-node-", suffix "1", roots "" and "1" (legal in Kueue's encoding).
    ta = {
        "levels": ["gpucluster.io/ib-block", HOST],
        "slices": [
            {
                "domainCount": 2,
                "valuesPerLevel": [
                    {"universal": "block-a"},
                    {"individual": {"prefix": "h100-node-", "suffix": "1", "roots": ["", "1"]}},
                ],
                "podCounts": {"individual": [5, 3]},
            },
            {
                "domainCount": 1,
                "valuesPerLevel": [{"universal": "block-b"}, {"individual": {"roots": ["l40s-node-7"]}}],
                "podCounts": {"universal": 2},
            },
        ],
    }
    assert decode(ta) == [
        ({"gpucluster.io/ib-block": "block-a", HOST: "h100-node-1"}, 5),
        ({"gpucluster.io/ib-block": "block-a", HOST: "h100-node-11"}, 3),
        ({"gpucluster.io/ib-block": "block-b", HOST: "l40s-node-7"}, 2),
    ]
    assert pods_per_node(ta) == {"h100-node-1": 5, "h100-node-11": 3, "l40s-node-7": 2}


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda t: t.update(levels="host"), "levels: expected a list"),
        (lambda t: t["slices"][0].update(domainCount=0), "domainCount: expected a whole number of 1 or more"),
        (lambda t: t["slices"][0]["valuesPerLevel"][0]["individual"]["roots"].pop(), "1 roots for 2 domains"),
        (lambda t: t["slices"][0].update(podCounts={"individual": [4]}), "1 counts for 2 domains"),
        (lambda t: t["slices"][0].update(podCounts={"universal": -1}), "expected a pod count"),
        (lambda t: t["slices"][0].update(valuesPerLevel=[]), "0 entries for 1 levels"),
        (lambda t: t["slices"][0]["valuesPerLevel"][0].pop("individual"), "neither universal nor individual"),
        (lambda t: t.update(levels=["gpucluster.io/ib-leaf"]), "no kubernetes.io/hostname level"),
    ],
)
def test_a_malformed_assignment_is_refused_naming_the_field(change: Any, words: str) -> None:
    ta = copy.deepcopy(V1BETA2)
    change(ta)
    with pytest.raises(AssignmentError, match=words):
        pods_per_node(ta, "podSetAssignments[0].topologyAssignment")


def test_the_observer_reads_the_assignment_and_refuses_a_broken_one() -> None:
    lists = copy.deepcopy(raw())
    assignment = lists.workloads[0]["status"]["admission"]["podSetAssignments"][0]
    assignment["topologyAssignment"] = {**V1BETA2, "slices": [{**V1BETA2["slices"][0], "podCounts": {"universal": 1}}]}
    workloads = observe_api(lists, S).observation.workloads
    assert workloads is not None
    assert workloads[0].pod_sets == (PodSet("workers", 2, 8, {"gpu": "h100"}, {"h100-node-0": 1, "h100-node-1": 1}),)
    assignment["topologyAssignment"]["slices"][0]["domainCount"] = 3
    got = observe_api(lists, S)
    assert got.observation.workloads is None
    assert "podSetAssignments[0].topologyAssignment.slices[0]" in got.problems["workloads"]


def placed(assigned: dict[str, int], pods: int = 2) -> tuple[PodSet, ...]:
    return (PodSet("workers", pods, 8, FLAVOR, assigned),)


def test_the_room_is_exactly_the_assigned_nodes_even_when_others_are_cheaper_to_empty() -> None:
    nodes = [node("a"), node("b"), node("c"), node("d")]
    pods = [pod("s-0", "c", 4, "serve"), pod("s-1", "d", 4, "serve")]
    assert plan_nodes(choose_room(placed({}), nodes, pods)) == {"a", "b"}  # without TAS: the free ones
    plan = choose_room(placed({"c": 1, "d": 1}), nodes, pods)
    assert plan_nodes(plan) == {"c", "d"}
    assert isinstance(plan, Plan)
    assert plan.moves == (("inference", "s-0"), ("inference", "s-1"))


def plan_nodes(result: Plan | CannotFit) -> set[str]:
    assert isinstance(result, Plan), result
    return set(result.node_names)


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        ({"quarantined": True}, "on c, which is quarantined"),
        ({"reserved_for": "someone-else"}, "on c, which is reserved for another workload"),
        ({"schedulable": False}, "on c, which is cordoned"),
    ],
)
def test_an_assigned_node_that_cannot_take_its_pods_is_named(bad: dict[str, Any], words: str) -> None:
    nodes = [node("a"), node("b"), node("c", **bad), node("d")]
    result = choose_room(placed({"c": 1, "d": 1}), nodes, [])
    assert isinstance(result, CannotFit)
    assert words in result.reason
    assert (result.pods_needed, result.pods_placed) == (2, 1)


def test_an_immovable_pod_on_an_assigned_node_is_named() -> None:
    result = choose_room(placed({"a": 1}, 1), [node("a"), node("b")], [pod("other-trainer", "a", 1)])
    assert isinstance(result, CannotFit)
    assert "on a, which has room for 0 (immovable GPU pods in the way)" in result.reason


def test_the_check_reserves_the_assigned_nodes_and_the_room_follows_a_reassignment() -> None:
    policy = Policy(max_hold_s=600.0, node_grace_s=60.0)
    w = gang("u1", 2, 8, pod_sets=placed({"c": 1, "d": 1}))
    d = decide(observe([node("a"), node("b"), node("c"), node("d")], (), (), (w,)), policy, 10.0)
    assert sorted(r.node for r in of(d.actions, ReserveNode)) == ["c", "d"]
    # Admitted; c fails and Kueue's failed-node replacement moves its pod to b: b is reserved, then c released.
    admitted = gang("u1", 2, 8, check=CheckState.READY, pod_sets=placed({"b": 1, "d": 1}))
    nodes = [node("a"), node("b"), node("c", reserved_for="u1", quarantined=True), node("d", reserved_for="u1")]
    d = decide(observe(nodes, (), (), (admitted,)), policy, 20.0)
    assert [r.node for r in of(d.actions, ReserveNode)] == ["b"]
    assert [r.node for r in of(d.actions, ReleaseNode)] == ["c"]
    # Kueue names a node reserved for another gang: nothing is released, and the note says why.
    nodes = [node("a"), node("b", reserved_for="u2"), node("c", reserved_for="u1"), node("d", reserved_for="u1")]
    other = gang("u2", 1, 8, check=CheckState.READY)
    d = decide(observe(nodes, (), (), (admitted, other)), policy, 30.0)
    assert of(d.actions, ReleaseNode) == []
    assert of(d.actions, ReserveNode) == []
    assert any("Kueue assigned b, which cannot be reserved" in n for n in d.notes)
