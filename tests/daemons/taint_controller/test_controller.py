"""The loop with fakes: only the leader writes, fail-static on bad input, repairs, Events and flaps."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from contract.taint_controller_settings import TaintControllerSettings
from daemons.taint_controller.controller import (
    REASON_ADDED,
    REASON_KUBE_FAILED,
    REASON_QUERY_FAILED,
    REASON_REMOVED,
    REASON_REPLACED,
    Controller,
)
from daemons.taint_controller.decide import Action
from daemons.taint_controller.kube import ConflictError, KubeError, Taint
from daemons.taint_controller.metrics import Metrics
from daemons.toolkit.prometheus import QueryError
from tests.daemons.taint_controller.fakes import FakeEvents, FakeNodes, FakeQuerier
from tests.daemons.toolkit.fakes import Clock

KEY = "gpucluster.io/in-cluster-capacity"
OURS = Taint(KEY, "NoSchedule", "true")
VK = Taint("virtual-kubelet.io/provider", "NoSchedule", "gpucluster")
SETTINGS = TaintControllerSettings(
    high_mark=4,
    low_mark=1,
    hold_add="10m",
    hold_remove="2m",
    interval="30s",
    flap_window="30m",
    warning_event_interval="5m",
)


@dataclass
class Rig:
    clock: Clock
    querier: FakeQuerier
    nodes: FakeNodes
    events: FakeEvents
    metrics: Metrics
    leader: list[bool]
    controller: Controller

    def ticks(self, n: int, step: float = 30) -> list[str | None]:
        out = []
        for _ in range(n):
            out.append(self.controller.tick().changed)
            self.clock.advance(step)
        return out

    def metric(self, name: str, **labels: str) -> float | None:
        return self.metrics.registry.get_sample_value(f"gpucluster_taint_controller_{name}", labels)


def rig(taints: list[Taint] | None = None, *, leader: bool = True, dry_run: bool = False) -> Rig:
    clock = Clock()
    querier = FakeQuerier(headroom=0, pending=0)
    nodes = FakeNodes("gpu-burst", [VK, *(taints or [])])
    events = FakeEvents()
    metrics = Metrics(wall_clock=clock.wall)
    is_leader = [leader]
    controller = Controller(
        SETTINGS,
        querier,
        nodes,
        events,
        metrics,
        is_leader=lambda: is_leader[0],
        dry_run=dry_run,
        clock=clock,
        wall_clock=clock.wall,
    )
    return Rig(clock, querier, nodes, events, metrics, is_leader, controller)


def test_the_leader_adds_the_taint_after_hold_add_and_keeps_other_taints() -> None:
    r = rig()
    r.querier.headroom = 6
    changes = r.ticks(21)  # 0 .. 600 s
    assert changes == [None] * 20 + ["add"]
    assert r.nodes.taints == (VK, OURS)
    assert r.events.reasons() == [REASON_ADDED]
    assert r.metric("taint_present") == 1
    assert r.metric("decisions_total", action="add") == 1
    assert r.metric("decisions_total", action="hold") == 20
    assert r.metric("last_transition_timestamp_seconds") == r.clock.wall() - 30
    # later ticks: already present, nothing more
    assert r.ticks(5) == [None] * 5


def test_the_leader_removes_the_taint_when_low_with_pending() -> None:
    r = rig([OURS])
    r.querier.headroom, r.querier.pending = 0, 3
    assert r.ticks(5) == [None] * 4 + ["remove"]  # 120 s
    assert r.nodes.taints == (VK,)
    assert r.events.reasons() == [REASON_REMOVED]
    assert r.metric("taint_present") == 0


def test_the_taint_is_created_on_a_node_without_any_taints() -> None:
    r = rig()
    r.nodes.hand_edit([])
    r.querier.headroom = 9
    r.ticks(21)
    assert r.nodes.taints == (OURS,)


def test_a_standby_queries_and_exports_but_never_writes() -> None:
    r = rig(leader=False)
    r.querier.headroom = 6
    assert r.ticks(40) == [None] * 40
    assert r.nodes.patches == []
    assert r.events.events == []
    assert r.metric("headroom_gpus") == 6
    assert r.metric("is_leader") == 0
    assert r.metric("decisions_total", action="add") == 0
    assert r.metric("decisions_total", action="hold") == 0


def test_a_standby_that_becomes_leader_acts_on_the_history_it_already_has() -> None:
    r = rig(leader=False)
    r.querier.headroom = 6
    r.ticks(21)
    r.leader[0] = True
    assert r.ticks(1) == ["add"]


def test_losing_the_lease_stops_acting_at_once() -> None:
    r = rig()
    r.querier.headroom = 6
    r.ticks(20)
    r.leader[0] = False
    assert r.ticks(10) == [None] * 10
    assert r.nodes.patches == []


def test_leadership_lost_during_the_tick_blocks_the_write() -> None:
    r = rig()
    r.querier.headroom = 6
    r.ticks(20)
    calls = iter([True])  # leader when the tick starts, not any more when it is about to write
    r.controller.is_leader = lambda: next(calls, False)
    assert r.ticks(1) == [None]
    assert r.nodes.patches == []


def test_noexecute_found_is_replaced_by_noschedule_with_an_event() -> None:
    r = rig([Taint(KEY, "NoExecute", "true")])
    r.querier.headroom = 2  # between the marks: only the repair happens
    assert r.ticks(1) == ["replace"]
    assert r.nodes.taints == (VK, OURS)
    assert r.events.events[0][:2] == ("Warning", REASON_REPLACED)
    assert "NoExecute" in r.events.events[0][2]
    assert r.ticks(3) == [None] * 3  # repaired once, then nothing


def test_duplicate_burst_taints_collapse_to_ours() -> None:
    r = rig([Taint(KEY, "PreferNoSchedule"), Taint(KEY, "NoExecute", "x")])
    r.querier.headroom = 2
    r.ticks(1)
    assert r.nodes.taints == (VK, OURS)


def test_a_standby_does_not_repair() -> None:
    bad = Taint(KEY, "NoExecute", "true")
    r = rig([bad], leader=False)
    r.ticks(2)
    assert r.nodes.taints == (VK, bad)


@pytest.mark.parametrize(
    "failure",
    [QueryError("unreachable", "connection refused"), QueryError("empty", "no sample"), None],
)
def test_fail_static_changes_nothing_counts_and_warns_rate_limited(failure: QueryError | None) -> None:
    r = rig([OURS])
    r.querier.headroom = failure  # None: an empty vector
    r.querier.pending = 5
    assert r.ticks(40) == [None] * 40  # 20 minutes of failures
    assert r.nodes.patches == []
    assert r.nodes.taints == (VK, OURS)
    reason = failure.reason if failure else "empty"
    assert r.metric("query_errors_total", reason=reason) == 40
    warnings = [e for e in r.events.events if e[1] == REASON_QUERY_FAILED]
    assert len(warnings) == 4  # at 0, 5, 10 and 15 minutes
    assert all(e[0] == "Warning" for e in warnings)
    headroom = r.metric("headroom_gpus")
    assert headroom is not None
    assert math.isnan(headroom)  # while unknown


def test_pending_query_failure_blocks_removal_only() -> None:
    r = rig([OURS])
    r.querier.headroom, r.querier.pending = 0, QueryError("timeout", "slow")
    assert r.ticks(20) == [None] * 20
    assert r.metric("query_errors_total", reason="timeout") == 20
    r2 = rig()
    r2.querier.headroom, r2.querier.pending = 8, QueryError("timeout", "slow")
    assert "add" in r2.ticks(21)


def test_a_patch_failure_is_counted_warned_and_retried_next_tick() -> None:
    r = rig()
    r.querier.headroom = 6
    r.ticks(20)
    r.nodes.fail_patch = KubeError("HTTP 403: forbidden")
    assert r.ticks(3) == [None] * 3
    assert r.metric("kube_errors_total", operation="patch-node") == 3
    assert r.events.reasons() == [REASON_KUBE_FAILED]  # rate-limited
    r.nodes.fail_patch = None
    assert r.ticks(1) == ["add"]


def test_a_conflict_is_retried_quietly() -> None:
    r = rig()
    r.querier.headroom = 6
    r.ticks(20)
    r.nodes.fail_patch = ConflictError("changed")
    assert r.ticks(1) == [None]
    assert r.events.events == []
    r.nodes.fail_patch = None
    assert r.ticks(1) == ["add"]


def test_a_node_changed_between_read_and_patch_is_not_overwritten() -> None:
    r = rig()
    r.querier.headroom = 6
    r.ticks(20)
    other = Taint("example.com/maintenance", "NoSchedule")
    r.nodes.before_patch = lambda: r.nodes.hand_edit([VK, other])
    assert r.ticks(1) == [None]  # the resourceVersion test failed
    r.nodes.before_patch = None
    assert r.ticks(1) == ["add"]
    assert r.nodes.taints == (VK, other, OURS)


def test_an_unreadable_node_changes_nothing() -> None:
    r = rig()
    r.querier.headroom = 6
    r.nodes.fail_read = KubeError("timeout")
    assert r.ticks(30) == [None] * 30
    assert r.metric("kube_errors_total", operation="read-node") == 30


def test_dry_run_decides_but_writes_nothing() -> None:
    r = rig([Taint(KEY, "NoExecute")], dry_run=True)
    r.querier.headroom = 6
    r.ticks(30)
    r.querier.headroom = QueryError("http", "HTTP 500")
    r.ticks(2)
    assert r.nodes.patches == []
    assert r.events.events == []


def test_a_reversal_within_the_flap_window_counts_as_a_flap() -> None:
    r = rig()
    r.querier.headroom = 6
    r.ticks(21)  # add at 600 s
    r.querier.headroom, r.querier.pending = 0, 2
    assert "remove" in r.ticks(5)  # removed 2.5 min later: inside 30 min
    assert r.metric("flaps_total") == 1
    # outside the window: not a flap
    r.querier.headroom = 2
    r.ticks(70)  # 35 min between the marks
    r.querier.headroom = 6
    assert "add" in r.ticks(21)
    assert r.metric("flaps_total") == 1


def test_seconds_since_last_change() -> None:
    r = rig()
    since = r.metric("seconds_since_last_change")
    assert since is not None
    assert math.isnan(since)  # before any change
    r.querier.headroom = 6
    r.ticks(21)
    r.clock.advance(100)
    assert r.metric("seconds_since_last_change") == 130


def test_queries_are_rendered_with_the_node_and_namespaces() -> None:
    r = rig()
    r.ticks(1)
    headroom_q, pending_q, reserved_q = r.querier.queries
    assert 'node!="gpu-burst"' in headroom_q
    assert "$" not in headroom_q
    assert 'namespace=~"inference"' in pending_q
    assert reserved_q.startswith('count((kube_node_spec_taint{key="gpucluster.io/reservation"} and (time() - ')
    assert all("<= 120)" in q and "$" not in q for q in (headroom_q, pending_q, reserved_q))  # freshWithin 2m


def test_with_nodes_reserved_the_leader_removes_the_taint_without_the_hold() -> None:
    r = rig([OURS])
    r.querier.headroom, r.querier.pending, r.querier.reserved = 0, 8, 4
    assert r.ticks(1) == ["remove"]
    assert r.nodes.taints == (VK,)
    assert r.events.reasons() == [REASON_REMOVED]


def test_an_unknown_reservation_count_only_loses_the_shortcut() -> None:
    r = rig([OURS])
    r.querier.headroom, r.querier.pending = 0, 8
    r.querier.reserved = QueryError("timeout", "no answer")
    assert r.ticks(5) == [None] * 4 + ["remove"]  # the whole 120 s hold, as without reservations
    assert not [e for e in r.events.reasons() if e == REASON_QUERY_FAILED]


def test_tick_result_reports_inputs() -> None:
    r = rig([OURS])
    r.querier.headroom, r.querier.pending = 2, 1
    result = r.controller.tick()
    assert (result.leader, result.headroom, result.pending, result.taint_present) == (True, 2, 1, True)
    assert result.decision.action is Action.HOLD


# --- by GPU type ------------------------------------------------------------------------------------------------

TYPED = SETTINGS.model_copy(update={"gpu_types": ["H100", "L40S"]})


def typed_rig(taints: list[Taint] | None = None) -> Rig:
    r = rig(taints)
    r.controller = Controller(
        TYPED,
        r.querier,
        r.nodes,
        r.events,
        r.metrics,
        is_leader=lambda: r.leader[0],
        clock=r.clock,
        wall_clock=r.clock.wall,
    )
    return r


def test_without_gpu_types_only_the_whole_cluster_is_asked() -> None:
    r = rig()
    r.ticks(1)
    assert len(r.querier.queries) == 3
    assert not any("gpu_type" in q for q in r.querier.queries)
    assert r.metrics.registry.get_sample_value("gpucluster_taint_controller_headroom_by_type_gpus", {}) is None
    burst = r.metric("burst_inference_pods")
    assert burst is not None
    assert math.isnan(burst)  # not asked


def test_with_gpu_types_every_query_by_type_is_rendered() -> None:
    r = typed_rig()
    r.ticks(1)
    assert len(r.querier.queries) == 6
    by_type = [q for q in r.querier.queries if "gpu_type" in q]
    assert len(by_type) == 3
    assert all("$" not in q.replace('"$1"', "") for q in by_type)
    assert all("kube_node_labels" in q or "kube_pod_annotations" in q for q in by_type)


def test_idle_h100_with_l40s_pending_removes_the_taint_and_says_which_type() -> None:
    r = typed_rig([OURS])
    r.querier.headroom, r.querier.pending = 16, 3
    r.querier.headroom_by_type, r.querier.pending_by_type = {"H100": 16, "L40S": 0}, {"L40S": 3}
    assert r.ticks(5) == [None] * 4 + ["remove"]
    assert r.events.reasons() == [REASON_REMOVED]
    assert r.events.events[0][2].startswith("L40S: headroom 0 < lowMark 1 with 3 inference pods pending for 120s")
    assert r.metric("headroom_gpus") == 16
    assert r.metric("headroom_by_type_gpus", gpu_type="H100") == 16
    assert r.metric("headroom_by_type_gpus", gpu_type="L40S") == 0
    assert r.metric("pending_inference_by_type_pods", gpu_type="L40S") == 3
    assert r.metric("pending_inference_by_type_pods", gpu_type="H100") == 0  # no series: nothing pending


def test_the_same_cluster_without_gpu_types_keeps_the_taint() -> None:
    r = rig([OURS])
    r.querier.headroom, r.querier.pending = 16, 3
    r.querier.headroom_by_type, r.querier.pending_by_type = {"H100": 16, "L40S": 0}, {"L40S": 3}
    assert r.ticks(10) == [None] * 10


def test_an_empty_answer_by_type_is_zero_for_every_type() -> None:
    """No node of a configured type: no series, which is no room (the whole cluster's answer says ksm is up)."""
    r = typed_rig([OURS])
    r.querier.headroom, r.querier.pending = 8, 1
    r.querier.headroom_by_type, r.querier.pending_by_type = None, {"L40S": 1}
    assert r.ticks(5)[-1] == "remove"
    assert r.metric("headroom_by_type_gpus", gpu_type="L40S") == 0


@pytest.mark.parametrize("failure", [QueryError("timeout", "slow"), QueryError("multiple", "two H100 rows")])
def test_headroom_by_type_failing_is_unknown_headroom(failure: QueryError) -> None:
    r = typed_rig([OURS])
    r.querier.headroom, r.querier.pending = 16, 3
    r.querier.headroom_by_type, r.querier.pending_by_type = failure, {"L40S": 3}
    assert r.ticks(20) == [None] * 20
    assert r.metric("query_errors_total", reason=failure.reason) == 20
    assert REASON_QUERY_FAILED in r.events.reasons()
    assert "headroom by type query failed" in r.events.events[0][2]
    h100 = r.metric("headroom_by_type_gpus", gpu_type="H100")
    assert h100 is not None
    assert math.isnan(h100)
    assert r.controller.decider.remove_since is None  # fail-static: the timers restarted


def test_pending_by_type_failing_leaves_the_whole_clusters_rule() -> None:
    r = typed_rig([OURS])
    r.querier.headroom, r.querier.pending = 0, 3
    r.querier.headroom_by_type, r.querier.pending_by_type = {"H100": 0, "L40S": 0}, QueryError("http", "HTTP 500")
    assert r.ticks(5)[-1] == "remove"  # the whole cluster is full with inference Pending
    assert "pending by type query failed" in r.events.events[0][2]
    r2 = typed_rig([OURS])
    r2.querier.headroom, r2.querier.pending = 16, 3
    r2.querier.headroom_by_type, r2.querier.pending_by_type = {"H100": 16, "L40S": 0}, QueryError("http", "500")
    assert r2.ticks(10) == [None] * 10  # which type is Pending is unknown: no removal on the whole's room


def test_replicas_out_hold_the_add_until_their_type_has_room() -> None:
    r = typed_rig()
    r.querier.headroom, r.querier.pending = 20, 0
    r.querier.headroom_by_type, r.querier.burst = {"H100": 20, "L40S": 0}, {"": 2, "L40S": 2}
    assert r.ticks(30) == [None] * 30
    assert r.metric("burst_inference_pods") == 2
    assert r.metric("burst_inference_by_type_pods", gpu_type="L40S") == 2
    r.querier.headroom_by_type = {"H100": 12, "L40S": 8}
    assert r.ticks(21)[-1] == "add"
    assert r.events.events[-1][2].startswith("L40S: headroom 8 >= highMark 4 for 600s")


def test_unknown_burst_pods_wait_for_every_type_without_a_warning() -> None:
    r = typed_rig()
    r.querier.headroom, r.querier.pending = 20, 0
    r.querier.headroom_by_type, r.querier.burst = {"H100": 20, "L40S": 0}, QueryError("timeout", "slow")
    assert r.ticks(30) == [None] * 30
    assert r.events.events == []
    r.querier.headroom_by_type = {"H100": 12, "L40S": 8}
    assert r.ticks(21)[-1] == "add"


def test_tick_result_reports_the_rows() -> None:
    r = typed_rig([OURS])
    r.querier.headroom, r.querier.pending = 16, 3
    r.querier.headroom_by_type, r.querier.pending_by_type = {"H100": 16, "L40S": 0}, {"L40S": 3}
    result = r.controller.tick()
    assert result.headroom_by_type == {"H100": 16, "L40S": 0}
    assert result.pending_by_type == {"L40S": 3}
    assert result.burst == {"": 0}
    assert (result.decision.reason, result.decision.gpu_type) == ("holding-remove", "L40S")
