from __future__ import annotations

import pytest

from daemons.interruptions.classify import (
    Cause,
    NodeState,
    PodFailure,
    eviction_cause,
    pod_cause,
    pod_detail,
    restart_causes,
)

HEALTHY = NodeState(True, True, False)


def test_disruption_target_is_the_node_even_with_a_non_zero_exit() -> None:
    pod = PodFailure("p", "n1", disruption_target=True, exit_code=137)
    assert pod_cause(pod, HEALTHY) is Cause.NODE


@pytest.mark.parametrize(
    "node",
    [NodeState(True, True, quarantined=True), NodeState(True, False), NodeState(True, None), NodeState(False), None],
)
def test_a_bad_node_is_the_node(node: NodeState | None) -> None:
    assert pod_cause(PodFailure("p", "n1", exit_code=1), node) is Cause.NODE


@pytest.mark.parametrize(("code", "reason"), [(1, "Error"), (137, "OOMKilled"), (2, "")])
def test_non_zero_exit_on_a_healthy_node_is_the_program(code: int, reason: str) -> None:
    assert pod_cause(PodFailure("p", "n1", exit_code=code, reason=reason), HEALTHY) is Cause.PROGRAM


def test_exit_zero_or_none_on_a_healthy_node_is_unknown() -> None:
    assert pod_cause(PodFailure("p", "n1", exit_code=0), HEALTHY) is Cause.UNKNOWN
    assert pod_cause(PodFailure("p", "n1"), HEALTHY) is Cause.UNKNOWN


def test_an_unscheduled_pod_does_not_blame_a_node() -> None:
    assert pod_cause(PodFailure("p", None, exit_code=1), None) is Cause.PROGRAM


def test_eviction_causes() -> None:
    assert eviction_cause("Preempted") is Cause.PREEMPTION
    # Kueue gave up on a failed node of a topology-placed gang: the node's fault, not a requeue of its own
    assert eviction_cause("NodeFailures") is Cause.NODE
    for reason in ("PodsReadyTimeout", "Deactivated", "ClusterQueueStopped"):
        assert eviction_cause(reason) is Cause.REQUEUE


def test_restart_causes_from_the_counters() -> None:
    # restarts 3 -> 5, towards max 1 -> 2: one node restart, one program restart
    assert restart_causes((3, 1), (5, 2)) == (1, 1)
    assert restart_causes((3, 1), (3, 1)) == (0, 0)
    assert restart_causes((0, 0), (4, 0)) == (4, 0)
    assert restart_causes((5, 2), (1, 1)) == (0, 0)


def test_detail_names_pod_node_and_exit() -> None:
    text = pod_detail(PodFailure("job-node-0-1", "n7", exit_code=137, reason="OOMKilled"), HEALTHY)
    assert text == "job-node-0-1, exit 137 OOMKilled"
    assert "node n7 quarantined" in pod_detail(PodFailure("p", "n7"), NodeState(True, True, True))
    assert "node n7 gone" in pod_detail(PodFailure("p", "n7"), None)
