"""One cycle against an in-memory API: only the leader writes, a dry run writes nothing, conflicts and errors are
told apart, a failed list changes nothing, and the AdmissionCheck is set Active only when it is ours."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest

from contract.make_before_break_settings import CONTROLLER_NAME, MakeBeforeBreakSettings
from daemons.make_before_break.actions import SetPlacement
from daemons.make_before_break.client import KubeApi
from daemons.make_before_break.controller import Controller
from daemons.make_before_break.metrics import Metrics
from daemons.make_before_break.model import Phase
from daemons.toolkit.kube import ConflictError, KubeError
from tests.daemons.make_before_break.api_objects import FLAVOR, KEY, T0_S, UID, S, node, workload


class FakeApi(KubeApi):
    """The lists and objects the controller reads, and every write it sends."""

    def __init__(self) -> None:
        super().__init__(None)
        self.nodes: dict[str, dict[str, Any]] = {"n1": node("n1"), "n2": node("n2")}
        self.workload = workload()
        self.check: dict[str, Any] = {
            "metadata": {"name": "make-before-break", "generation": 1},
            "spec": {"controllerName": CONTROLLER_NAME},
        }
        self.writes: list[tuple[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.fail: dict[str, KubeError] = {}

    def _maybe_fail(self, what: str) -> None:
        if what in self.fail:
            raise self.fail[what]

    def list_nodes(self) -> list[Mapping[str, Any]]:
        self._maybe_fail("list-nodes")
        return [copy.deepcopy(n) for n in self.nodes.values()]

    def list_pods(self) -> list[Mapping[str, Any]]:
        return []

    def list_deployments(self, namespace: str) -> list[Mapping[str, Any]]:
        return []

    def list_workloads(self) -> list[Mapping[str, Any]]:
        return [copy.deepcopy(self.workload)]

    def list_flavors(self) -> list[Mapping[str, Any]]:
        return [FLAVOR]

    def get_node(self, name: str) -> Mapping[str, Any]:
        return copy.deepcopy(self.nodes[name])

    def get_workload(self, namespace: str, name: str) -> Mapping[str, Any]:
        return copy.deepcopy(self.workload)

    def get_admission_check(self, name: str) -> Mapping[str, Any]:
        return copy.deepcopy(self.check)

    def patch_node(self, name: str, ops: list[dict[str, Any]]) -> Mapping[str, Any]:
        self._maybe_fail("patch-node")
        self.writes.append(("patch-node", ops))
        return {}

    def apply_workload_status(self, body: dict[str, Any]) -> Mapping[str, Any]:
        self.writes.append(("workload-status", body))
        return {}

    def apply_admission_check_status(self, body: dict[str, Any]) -> Mapping[str, Any]:
        self.writes.append(("check-status", body))
        return {}

    def apply_deployment(self, body: dict[str, Any]) -> Mapping[str, Any]:
        self.writes.append(("apply-deployment", body))
        return {"metadata": {**body["metadata"], "uid": "dep-uid"}}

    def create_event(self, body: dict[str, Any]) -> None:
        self.events.append(body)


def controller(
    api: FakeApi, *, leader: bool = True, dry_run: bool = False, settings: MakeBeforeBreakSettings = S
) -> tuple[Controller, Metrics]:
    metrics = Metrics()
    clock = iter(float(T0_S + 30 + i) for i in range(1000))
    c = Controller(
        settings, api, metrics, is_leader=lambda: leader, identity="t_1", dry_run=dry_run, clock=lambda: next(clock)
    )
    return c, metrics


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(f"gpucluster_make_before_break_{name}", labels)
    assert value is not None
    return value


def test_the_leader_reserves_the_node_and_tells_it() -> None:
    api = FakeApi()
    c, metrics = controller(api)
    result = c.cycle()
    assert [(o.kind, o.target, o.result) for o in result.outcomes] == [
        ("reserve-node", "node/n1", "applied"),
        ("reserve-node", "node/n2", "applied"),
        ("check-pending", "workload/team-a/job-train", "applied"),
    ]
    kinds = [w[0] for w in api.writes]
    assert kinds == ["check-status", "patch-node", "patch-node", "workload-status"]  # Active, then the actions
    ops = api.writes[1][1]
    assert ops[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "41"}
    assert {"op": "add", "path": "/spec/taints", "value": [{"key": KEY, "value": UID, "effect": "NoSchedule"}]} in ops
    reserved = [e for e in api.events if e["reason"] == "NodeReserved"]
    assert [(e["metadata"]["namespace"], e["involvedObject"]["name"]) for e in reserved] == [
        ("default", "n1"),
        ("default", "n2"),
    ]
    making = [e for e in api.events if e["reason"] == "MakingRoom"]
    assert making[0]["metadata"]["namespace"] == "team-a"
    assert making[0]["involvedObject"]["kind"] == "Workload"
    assert sample(metrics, "actions_total", kind="reserve-node", result="applied") == 2
    assert sample(metrics, "decisions_total", kind="reserve-node") == 2
    assert sample(metrics, "is_leader") == 1
    assert sample(metrics, "hold_seconds", workload="team-a/job-train") == 30


def test_while_draining_a_pending_gang_is_admitted_at_once_and_what_is_left_is_counted() -> None:
    api = FakeApi()
    api.nodes["n2"] = node("n2", taints=[{"key": KEY, "value": "stale-uid", "effect": "NoSchedule"}])  # a gone gang's
    c, metrics = controller(api, settings=S.model_copy(update={"enabled": True, "draining": True}))
    result = c.cycle()
    assert [(o.kind, o.target) for o in result.outcomes] == [
        ("release-node", "node/n2"),
        ("check-ready", "workload/team-a/job-train"),
    ]
    (admitted,) = [e for e in api.events if e["reason"] == "FallbackDraining"]
    assert admitted["type"] == "Normal"
    assert "draining: no new room is made" in admitted["message"]
    assert not [e for e in api.events if e["reason"] == "NodeReserved"]
    assert sample(metrics, "draining") == 1
    assert sample(metrics, "fallbacks_total", reason="draining") == 1
    assert result.left is not None
    assert (result.left.nodes, result.left.deployments, result.left.pods) == (1, 0, 0)  # as observed this cycle
    assert sample(metrics, "left_behind", kind="nodes") == 1

    running, running_metrics = controller(FakeApi())
    assert running.cycle().left is not None
    assert sample(running_metrics, "draining") == 0
    assert sample(running_metrics, "left_behind", kind="nodes") == 0


@pytest.mark.parametrize(("leader", "dry_run"), [(False, False), (True, True)])
def test_a_standby_or_a_dry_run_writes_nothing(leader: bool, dry_run: bool) -> None:
    api = FakeApi()
    c, _ = controller(api, leader=leader, dry_run=dry_run)
    result = c.cycle()
    assert [a.__class__.__name__ for a in result.decision.actions] == ["ReserveNode", "ReserveNode", "SetCheckPending"]
    assert api.writes == []
    assert api.events == []
    assert all(o.result == "skipped" for o in result.outcomes)


def test_a_conflict_is_retried_quietly_and_an_error_is_told_once() -> None:
    api = FakeApi()
    api.fail["patch-node"] = ConflictError("patch node n1: the object changed since it was read")
    c, metrics = controller(api)
    assert c.cycle().outcomes[0].result == "conflict"
    assert not [e for e in api.events if e["type"] == "Warning"]
    api.fail["patch-node"] = KubeError("patch node n1: HTTP 403: forbidden")
    assert c.cycle().outcomes[0].result == "error"
    assert c.cycle().outcomes[0].result == "error"
    warnings = [e for e in api.events if e["reason"] == "MakeBeforeBreakWriteFailed"]
    assert [e["involvedObject"]["name"] for e in warnings] == ["n1", "n2"]  # once per interval and object
    assert "HTTP 403" in warnings[0]["message"]
    assert sample(metrics, "actions_total", kind="reserve-node", result="conflict") == 2
    assert sample(metrics, "actions_total", kind="reserve-node", result="error") == 4


def test_a_failed_list_changes_nothing_and_is_counted() -> None:
    api = FakeApi()
    api.fail["list-nodes"] = KubeError("list nodes: HTTP 500: etcd")
    c, metrics = controller(api)
    result = c.cycle()
    assert result.decision.actions == ()
    assert result.observed.problems["nodes"] == "list nodes: HTTP 500: etcd"
    assert [w[0] for w in api.writes] == ["check-status"]  # Active is independent of the lists
    assert sample(metrics, "observe_errors_total", list="nodes") == 1


def test_the_check_is_not_written_once_kueue_moved_it() -> None:
    api = FakeApi()
    c, _ = controller(api)
    stale = c.cycle  # the cycle observes Pending; Kueue resets the entry before our write
    original = api.get_workload

    def moved(namespace: str, name: str) -> Mapping[str, Any]:
        w = dict(original(namespace, name))
        w["status"]["admissionChecks"][0]["state"] = "Retry"
        return w

    api.get_workload = moved  # type: ignore[method-assign]
    result = stale()
    assert [(o.kind, o.result) for o in result.outcomes][-1] == ("check-pending", "conflict")
    assert "workload-status" not in [w[0] for w in api.writes]


def test_an_admission_check_of_another_controller_is_left_alone() -> None:
    api = FakeApi()
    api.check["spec"]["controllerName"] = "example.com/other"
    c, _ = controller(api)
    assert c.cycle().active == "not ours"
    assert "check-status" not in [w[0] for w in api.writes]
    assert [e["reason"] for e in api.events if e["type"] == "Warning"] == ["AdmissionCheckNotOurs"]
    api.check["spec"]["controllerName"] = CONTROLLER_NAME
    api.check["status"] = {
        "conditions": [{"type": "Active", "status": "True", "observedGeneration": 1, "reason": "Active"}]
    }
    assert c.cycle().active == "active"


@pytest.mark.parametrize(
    ("phase", "reason"),
    [
        (Phase.MOVED, "MovedForTraining"),
        (Phase.AWAITING_RETURN, "AwaitingReturn"),
        (Phase.RETURNING, "ComingHome"),
        (None, "PlacementHome"),
    ],
)
def test_a_placement_change_is_told_on_the_deployment(phase: Phase | None, reason: str) -> None:
    """``kubectl describe deployment`` says why it moved, waits, comes home or went back."""
    api = FakeApi()
    c, _ = controller(api)
    why = "2 of its replicas stand on GPUs reserved for team-a/job-train"
    move = SetPlacement("inference", "sd-serve", (UID,), "e1" if phase else None, phase, "a note", why)
    c._apply(move)  # one write, without a whole observation around it
    ((kind, body),) = api.writes
    assert (kind, body["metadata"]["name"]) == ("apply-deployment", "sd-serve")
    (event,) = api.events
    assert (event["reason"], event["type"], event["message"]) == (reason, "Normal", why)
    assert event["metadata"]["namespace"] == "inference"
    assert event["involvedObject"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "sd-serve",
        "namespace": "inference",
        "uid": "dep-uid",
    }


def test_the_decision_and_the_cycle_are_timed() -> None:
    """decide_seconds holds the pure decide() call alone; cycle_seconds the lists, the decision and the writes."""
    api = FakeApi()
    ticks = iter([100.0, 100.5, 100.75, 102.0])  # cycle start, before decide, after decide, cycle end
    metrics = Metrics()
    clock = iter(float(T0_S + 30 + i) for i in range(1000))
    c = Controller(
        S,
        api,
        metrics,
        is_leader=lambda: True,
        identity="t_1",
        clock=lambda: next(clock),
        timer=lambda: next(ticks),
    )
    c.cycle()
    assert sample(metrics, "decide_seconds_count") == 1
    assert sample(metrics, "decide_seconds_sum") == pytest.approx(0.25)
    assert sample(metrics, "decide_seconds_bucket", le="0.25") == 1
    assert sample(metrics, "decide_seconds_bucket", le="0.1") == 0
    assert sample(metrics, "cycle_seconds_count") == 1
    assert sample(metrics, "cycle_seconds_sum") == pytest.approx(2.0)
    assert b"gpucluster_make_before_break_decide_seconds_bucket" in metrics.render()
