"""Actions -> exact request bodies, on objects shaped like the API server's replies."""

from __future__ import annotations

from typing import Any

from daemons.make_before_break.actions import PodSetUpdate, SetCheckPending, SetCheckReady, SetPlacement, Toleration
from daemons.make_before_break.model import Phase
from daemons.make_before_break.requests import (
    active_body,
    check_body,
    deletion_cost_patch,
    placement_body,
    release_ops,
    reserve_ops,
)
from tests.daemons.make_before_break.api_objects import KEY, T0, T0_S, UID, node, workload


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
