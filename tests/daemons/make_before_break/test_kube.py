"""API JSON -> Observation and actions -> exact request bodies, on objects shaped like the API server's replies."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from components.issues import SettingsError
from components.make_before_break_settings import load_settings
from daemons.make_before_break.decide import PodSetUpdate, SetCheckPending, SetCheckReady, SetPlacement, Toleration
from daemons.make_before_break.kube import (
    active_body,
    check_body,
    deletion_cost_patch,
    observe,
    placement_body,
    release_ops,
    reserve_ops,
)
from daemons.make_before_break.model import CheckState, Phase, PodSet
from daemons.make_before_break.rbac import cluster_rules, inference_rules, lease_rules
from tests.daemons.make_before_break.api_objects import KEY, T0, T0_S, UID, S, node, raw, workload

# ------------------------------------------------------------------ reading


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


# ------------------------------------------------------------------ writing


def test_reserve_is_one_json_patch_guarded_by_the_resource_version() -> None:
    other = {"key": "example.com/x", "effect": "NoSchedule"}
    stale = {"key": KEY, "value": "old", "effect": "NoSchedule"}
    ops = reserve_ops(node("n1", taints=[other, stale]), KEY, UID)
    assert ops == [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "41"},
        {"op": "add", "path": "/metadata/labels/gpucluster.io~1reservation", "value": UID},
        {"op": "test", "path": "/spec/taints/1", "value": stale},
        {"op": "remove", "path": "/spec/taints/1"},
        {"op": "add", "path": "/spec/taints/-", "value": {"key": KEY, "value": UID, "effect": "NoSchedule"}},
    ]
    bare = node("n1")
    del bare["metadata"]["labels"]
    assert reserve_ops(bare, KEY, UID)[1:] == [
        {"op": "add", "path": "/metadata/labels", "value": {KEY: UID}},
        {"op": "add", "path": "/spec/taints", "value": [{"key": KEY, "value": UID, "effect": "NoSchedule"}]},
    ]
    done = node("n1", taints=[{"key": KEY, "value": UID, "effect": "NoSchedule"}])
    done["metadata"]["labels"][KEY] = UID
    assert reserve_ops(done, KEY, UID) == []


def test_release_removes_only_the_entries_of_that_uid() -> None:
    mine = {"key": KEY, "value": UID, "effect": "NoSchedule"}
    n = node("n1", taints=[{"key": "example.com/x", "effect": "NoSchedule"}, mine])
    n["metadata"]["labels"][KEY] = UID
    assert release_ops(n, KEY, UID) == [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "41"},
        {"op": "test", "path": "/metadata/labels/gpucluster.io~1reservation", "value": UID},
        {"op": "remove", "path": "/metadata/labels/gpucluster.io~1reservation"},
        {"op": "test", "path": "/spec/taints/1", "value": mine},
        {"op": "remove", "path": "/spec/taints/1"},
    ]
    assert release_ops(n, KEY, "another-uid") == []


def test_deletion_cost_and_placement_bodies() -> None:
    assert deletion_cost_patch(-1000) == {
        "metadata": {"annotations": {"controller.kubernetes.io/pod-deletion-cost": "-1000"}}
    }
    assert deletion_cost_patch(None) == {
        "metadata": {"annotations": {"controller.kubernetes.io/pod-deletion-cost": None}}
    }
    moved = SetPlacement("inference", "server", (UID,), "e1", Phase.MOVED, "moved off", "why")
    assert placement_body(moved) == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "server",
            "namespace": "inference",
            "annotations": {
                "gpucluster.io/flips": UID,
                "gpucluster.io/flip-phase": "moved",
                "gpucluster.io/flip-note": "moved off",
            },
        },
        "spec": {
            "template": {
                "metadata": {
                    "annotations": {
                        "gpucluster.io/placement-epoch": "e1",
                        "descheduler.alpha.kubernetes.io/prefer-no-eviction": "true",
                    }
                }
            }
        },
    }
    home = SetPlacement("inference", "server", (), None, None, "", "home")
    # Nothing of ours left: applying only the name makes the API server drop every key we applied before.
    assert placement_body(home) == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "server", "namespace": "inference"},
    }


def test_the_check_body_holds_only_our_entry_and_the_resource_version() -> None:
    update = PodSetUpdate("workers", {KEY: UID}, (Toleration(KEY, UID),))
    ready = SetCheckReady(UID, "team-a", "job-train", "room made", (update,))
    body = check_body(ready, workload(), "make-before-break", T0_S + 90)
    assert body == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "job-train", "namespace": "team-a", "resourceVersion": "77"},
        "status": {
            "admissionChecks": [
                {
                    "name": "make-before-break",
                    "state": "Ready",
                    "lastTransitionTime": "2026-12-01T10:01:30Z",
                    "message": "room made",
                    "podSetUpdates": [
                        {
                            "name": "workers",
                            "nodeSelector": {KEY: UID},
                            "tolerations": [{"key": KEY, "operator": "Equal", "value": UID, "effect": "NoSchedule"}],
                        }
                    ],
                }
            ]
        },
    }
    pending = check_body(
        SetCheckPending(UID, "team-a", "job-train", "reserving"), workload(), "make-before-break", T0_S + 90
    )
    entry = pending["status"]["admissionChecks"][0]
    assert entry == {"name": "make-before-break", "state": "Pending", "lastTransitionTime": T0, "message": "reserving"}


def test_active_is_applied_until_it_holds_for_the_generation() -> None:
    check: dict[str, Any] = {
        "metadata": {"name": "make-before-break", "generation": 2},
        "spec": {"controllerName": "gpucluster.io/make-before-break"},
    }
    body = active_body(check, T0_S)
    assert body is not None
    assert body["status"]["conditions"][0] | {"message": ""} == {
        "type": "Active",
        "status": "True",
        "reason": "Active",
        "message": "",
        "lastTransitionTime": T0,
        "observedGeneration": 2,
    }
    check["status"] = {"conditions": [body["status"]["conditions"][0]]}
    assert active_body(check, T0_S) is None
    check["metadata"]["generation"] = 3
    assert active_body(check, T0_S) is not None


# ------------------------------------------------------------------ settings and RBAC


def test_settings_from_yaml_and_their_rules(tmp_path: Path) -> None:
    good = tmp_path / "s.yaml"
    good.write_text("maxHold: 5m\nnodeGrace: 30s\ninferenceNamespaces: [inference, llm]\n")
    s = load_settings(good)
    assert (s.policy().max_hold_s, s.policy().node_grace_s, s.inference_namespaces) == (
        300.0,
        30.0,
        ["inference", "llm"],
    )
    bad = tmp_path / "s.json"
    bad.write_text('{"maxHold": "1m", "nodeGrace": "2m", "deletionCost": 5, "bogus": 1}')
    with pytest.raises(SettingsError) as info:
        load_settings(bad)
    text = str(info.value)
    assert "nodeGrace (2m) must be shorter than maxHold (1m)" in text
    assert "deletionCost" in text
    assert "bogus" in text


def test_rbac_rules_grant_no_secret_and_no_delete() -> None:
    rules = [r.to_k8s() for r in (*cluster_rules("make-before-break"), *inference_rules(), *lease_rules("l"))]
    assert all("secrets" not in r["resources"] and "*" not in r["resources"] for r in rules)
    assert all(set(r["verbs"]) <= {"get", "list", "patch", "create", "update"} for r in rules)
    assert {
        "apiGroups": ["kueue.x-k8s.io"],
        "resources": ["admissionchecks/status"],
        "verbs": ["patch"],
        "resourceNames": ["make-before-break"],
    } in rules


@pytest.mark.parametrize(
    ("good", "bad", "words"),
    [
        ({"leaseDuration": "15s", "renewDeadline": "14s"}, {"renewDeadline": "15s"}, "renewDeadline (15s) must be"),
        ({"renewDeadline": "10s", "retryPeriod": "9s"}, {"retryPeriod": "10s"}, "retryPeriod (10s) must be"),
        ({"maxHold": "2m", "nodeGrace": "119s"}, {"maxHold": "2m", "nodeGrace": "2m"}, "nodeGrace (2m) must be"),
        ({"deletionCost": -1}, {"deletionCost": 0}, "deletionCost"),
        ({"returnBatch": 1}, {"returnBatch": 0}, "returnBatch"),
        ({"returnBatch": 50}, {"returnBatch": 51}, "returnBatch"),
    ],
)
def test_each_settings_bound_holds_at_its_edge_and_fails_past_it(
    tmp_path: Path, good: dict[str, Any], bad: dict[str, Any], words: str
) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps(good))
    load_settings(path)
    path.write_text(json.dumps(bad))
    with pytest.raises(SettingsError, match=re.escape(words)):
        load_settings(path)
