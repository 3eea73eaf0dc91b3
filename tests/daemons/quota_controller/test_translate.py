"""API JSON to values: the Ready condition and its time, allocatable GPUs, taints; bad objects named, not crashing."""

from __future__ import annotations

from typing import Any

import pytest

from daemons.quota_controller.translate import node_view, queue_view


def api_node(**extra: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {"name": "h100-node-0", "labels": {"gpucluster.io/accepted": "true"}},
        "spec": {"taints": [{"key": "gpucluster.io/quarantine", "value": "gpu-temperature", "effect": "NoExecute"}]},
        "status": {
            "allocatable": {"nvidia.com/gpu": "8", "cpu": "192", "memory": "2Ti", "pods": "110"},
            "conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-01T10:00:00Z"},
            ],
        },
    }
    obj.update(extra)
    return obj


def test_a_node_reads_as_its_readiness_gpus_and_taint_keys() -> None:
    n = node_view(api_node())
    assert n.name == "h100-node-0"
    assert (n.ready, n.ready_since) == (True, 1796119200.0)
    assert n.allocatable["nvidia.com/gpu"] == 8
    assert "memory" not in n.allocatable  # 2Ti is not a whole number of units this controller counts
    assert n.taint_keys == frozenset({"gpucluster.io/quarantine"})
    assert n.unschedulable is False


@pytest.mark.parametrize(("status", "ready"), [("False", False), ("Unknown", None)])
def test_not_ready_and_unknown(status: str, ready: bool | None) -> None:
    obj = api_node()
    obj["status"]["conditions"][1]["status"] = status
    assert node_view(obj).ready is ready


def test_a_node_without_conditions_is_not_known_ready() -> None:
    obj = api_node(status={})
    n = node_view(obj)
    assert (n.ready, n.ready_since, dict(n.allocatable)) == (None, None, {})


def test_a_cordoned_node() -> None:
    assert node_view(api_node(spec={"unschedulable": True})).unschedulable is True


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ({}, "without metadata.name"),
        ({"metadata": {"name": "n", "labels": ["a"]}}, "node n: metadata.labels, spec or status is not an object"),
        ({"metadata": {"name": "n"}, "spec": {"taints": "x"}}, "node n: spec.taints is not a list"),
    ],
)
def test_a_malformed_node_is_named(obj: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        node_view(obj)


def test_a_cluster_queue_reads_as_its_groups_and_admitted_usage() -> None:
    groups = [{"coveredResources": ["nvidia.com/gpu"], "flavors": [{"name": "h100", "resources": []}]}]
    q = queue_view(
        {
            "metadata": {"name": "training"},
            "spec": {"resourceGroups": groups},
            "status": {"flavorsUsage": [{"name": "h100", "resources": [{"name": "nvidia.com/gpu", "total": "16"}]}]},
        }
    )
    assert (q.name, list(q.resource_groups), dict(q.usage)) == ("training", groups, {"h100": 16})


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ({"spec": {}}, "without metadata.name"),
        ({"metadata": {"name": "q"}}, "ClusterQueue q: no spec"),
        ({"metadata": {"name": "q"}, "spec": {"resourceGroups": "x"}}, "not a list of objects"),
    ],
)
def test_a_malformed_cluster_queue_is_named(obj: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        queue_view(obj)
