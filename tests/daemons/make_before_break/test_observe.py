"""API JSON -> Observation (translation and fail-static observing), on objects shaped like the API server's replies."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from daemons.make_before_break.model import CheckState, Phase, PodSet
from daemons.make_before_break.observe import observe
from tests.daemons.make_before_break.api_objects import KEY, T0_S, UID, S, node, raw


def test_a_full_observation_from_api_objects() -> None:
    got = observe(raw(), S)
    assert got.problems == {}
    o = got.observation
    assert o.nodes is not None
    assert [n.name for n in o.nodes] == ["n1"]
    assert (o.nodes[0].gpus, o.nodes[0].ready, o.nodes[0].reserved_for) == (8, True, None)
    assert o.virtual_node is not None
    assert (o.virtual_node.gpus, o.virtual_node.burst_taint) == (64, True)
    assert o.pods is not None
    by_name = {p.name: p for p in o.pods}
    assert sorted(by_name) == ["other-0", "server-5d8f9-a"]  # finished, GPU-less and off-GPU-node pods left out
    assert (by_name["server-5d8f9-a"].deployment, by_name["server-5d8f9-a"].epoch) == ("server", "abc")
    assert by_name["other-0"].deployment is None  # not in an inference namespace: immovable
    assert o.deployments is not None
    d = o.deployments[0]
    assert (d.desired, d.available, d.surge, d.gpus_per_pod, d.flips, d.phase, d.epoch) == (
        4,
        3,
        1,
        1,
        frozenset({UID}),
        Phase.MOVED,
        "abc",
    )
    assert o.workloads is not None
    assert len(o.workloads) == 1
    w = o.workloads[0]
    assert (w.uid, w.check, w.quota_reserved_at, w.holds_quota) == (UID, CheckState.PENDING, T0_S, True)
    assert w.pod_sets == (PodSet("workers", 2, 8, {"gpu": "h100"}),)  # the admitted count, the flavor's labels


def test_reserved_cordoned_quarantined_and_not_ready_nodes() -> None:
    reserved = node(
        "n2",
        ready="False",
        taints=[
            {"key": KEY, "value": UID, "effect": "NoSchedule"},
            {"key": "gpucluster.io/quarantine", "effect": "NoSchedule"},
        ],
    )
    reserved["spec"]["unschedulable"] = True
    got = observe(raw(nodes=[reserved]), S).observation
    assert got.nodes is not None
    n = got.nodes[0]
    assert (n.reserved_for, n.schedulable, n.quarantined, n.not_ready_since) == (UID, False, True, T0_S)
    assert got.virtual_node is None  # not in the list: nothing can be rented


@pytest.mark.parametrize(
    ("change", "part", "words"),
    [
        (
            lambda r: r.nodes[0]["status"]["allocatable"].update({"nvidia.com/gpu": "eight"}),
            "nodes",
            "Node n1: status.allocatable nvidia.com/gpu: not a quantity",
        ),
        (
            lambda r: r.nodes[0]["spec"].update({"taints": [{"effect": "NoSchedule"}]}),
            "nodes",
            "Node n1: spec.taints[0] has no key",
        ),
        (
            lambda r: r.pods[0]["spec"].update({"containers": "x"}),
            "pods",
            "Pod inference/server-5d8f9-a: spec.containers has the wrong type",
        ),
        (
            lambda r: r.deployments[0]["spec"].update({"replicas": "4"}),
            "deployments",
            "Deployment inference/server: spec.replicas has the wrong type",
        ),
        (
            lambda r: r.workloads[0]["status"]["admissionChecks"][0].update({"state": "Maybe"}),
            "workloads",
            "unknown state",
        ),
        (lambda r: r.workloads[0]["status"].pop("admission"), "workloads", "podSetAssignments is missing"),
        (
            lambda r: r.workloads[0]["status"]["conditions"][0].update({"lastTransitionTime": "yesterday"}),
            "workloads",
            "not an RFC 3339",
        ),
        (lambda r: r.flavors.clear(), "workloads", "no known ResourceFlavor assigned for nvidia.com/gpu"),
    ],
)
def test_an_unreadable_object_makes_its_list_unknown(change: Any, part: str, words: str) -> None:
    lists = copy.deepcopy(raw())
    change(lists)
    got = observe(lists, S)
    assert getattr(got.observation, part) is None
    assert words in got.problems[part]
    assert "eight" not in got.problems[part]  # the reason names the field, not the value
    assert part in got.observation.unknown()


def test_a_well_formed_reply_beside_them_is_read() -> None:
    assert observe(copy.deepcopy(raw()), S).observation.unknown() == []


def test_a_failed_list_is_unknown_and_pods_need_the_nodes() -> None:
    got = observe(raw(nodes=None, errors={"nodes": "list nodes: HTTP 403: forbidden"}), S)
    assert (got.observation.nodes, got.observation.pods) == (None, None)
    assert got.problems["nodes"] == "list nodes: HTTP 403: forbidden"
    got = observe(raw(flavors=None, errors={"resourceflavors": "list resourceflavors: HTTP 500: boom"}), S)
    assert got.observation.workloads is None
    assert "resourceflavors" in got.problems
