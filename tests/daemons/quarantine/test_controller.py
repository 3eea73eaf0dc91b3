"""One cycle of the quarantine controller against in-memory Prometheus and API server: the one patch, the ledger,
fail-static inputs, leadership, the breaker's Event and metric, and a node quarantined then deleted."""

from __future__ import annotations

import json
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from contract.constants import QUARANTINED_AT_ANNOTATION
from contract.quarantine_settings import LEDGER_NAME, RELEASED_AT_ANNOTATION, QuarantineSettings
from daemons.quarantine.controller import (
    REASON_BREAKER,
    REASON_QUARANTINED,
    REASON_QUERY_FAILED,
    REASON_UPDATE_FAILED,
    Controller,
    signals_from,
)
from daemons.quarantine.metrics import Metrics
from daemons.toolkit.kube import KubeError
from daemons.toolkit.prometheus import QueryError, Sample
from tests.daemons.quarantine.fakes import START, Clock, FakeApi, FakeQuerier, format_time

H100 = {"gpu.example/type": "h100"}
NS = "gpucluster-capacity"


def settings(**change: Any) -> QuarantineSettings:
    base: dict[str, Any] = {"flavors": [{"name": "h100", "nodeLabels": H100}]}
    return QuarantineSettings.model_validate({**base, **change})


class Rig:
    def __init__(self, nodes: int = 10, **change: Any) -> None:
        self.clock = Clock()
        self.prom = FakeQuerier()
        self.api = FakeApi()
        for i in range(nodes):
            self.api.add_node(f"n{i:02d}", H100)
        self.metrics = Metrics()
        self.leader = True
        self.controller = Controller(
            settings(**change),
            self.prom,
            self.api,
            self.metrics,
            is_leader=lambda: self.leader,
            identity="test",
            clock=self.clock,
            wall_clock=self.clock.wall,
        )

    def ledger(self) -> dict[str, dict[str, Any]]:
        data = (self.api.ledger or {}).get("data") or {}
        return {k: json.loads(v) for k, v in data.items()}

    def metric(self, name: str, **labels: str) -> float | None:
        for family in text_string_to_metric_families(self.metrics.render().decode()):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    return float(sample.value)
        return None


def test_a_firing_signal_quarantines_the_node_in_one_patch_and_lists_it() -> None:
    rig = Rig()
    rig.prom.fire("n03", gpu="2", UUID="GPU-c")
    result = rig.controller.cycle()
    assert result.quarantined == ("n03",)
    (name, ops), *_ = rig.api.patches
    assert name == "n03"
    assert len(rig.api.patches) == 1
    assert ops[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "1"}
    assert rig.api.quarantine_taints("n03") == [
        {"key": "gpucluster.io/quarantine", "value": "gpu-temperature", "effect": "NoExecute"}
    ]
    assert rig.api.quarantine_marks("n03") == (True, True, True)
    annotations = rig.api.nodes["n03"]["metadata"]["annotations"]
    assert annotations["gpucluster.io/quarantine-reason"] == "firing: GpuTemperatureHigh (gpu=2, UUID=GPU-c)"
    assert annotations[QUARANTINED_AT_ANNOTATION] == format_time(START)
    assert rig.ledger() == {
        "n03": {
            "flavor": "h100",
            "reason": "gpu-temperature",
            "since": format_time(START),
            "detail": "firing: GpuTemperatureHigh (gpu=2, UUID=GPU-c)",
        }
    }
    assert rig.api.ledger is not None
    assert rig.api.ledger["metadata"] == {
        "name": LEDGER_NAME,
        "namespace": NS,
        "labels": {"app.kubernetes.io/name": "gpucluster-quarantine", "app.kubernetes.io/part-of": "gpucluster"},
    }
    (event,) = rig.api.events
    assert (event["reason"], event["type"], event["metadata"]["namespace"]) == (
        REASON_QUARANTINED,
        "Warning",
        "default",
    )
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": "n03", "uid": "uid-n03"}
    assert rig.metric("gpucluster_quarantine_node_info", node="n03", flavor="h100", reason="gpu-temperature") == 1
    assert rig.metric("gpucluster_quarantined_since_seconds", node="n03") == START
    assert rig.metric("gpucluster_quarantine_quarantined_nodes", flavor="h100") == 1


def test_the_next_cycle_changes_nothing() -> None:
    rig = Rig()
    rig.prom.fire("n03")
    rig.controller.cycle()
    rig.clock.advance(15)
    result = rig.controller.cycle()
    assert result.quarantined == ()
    assert not result.ledger_written
    assert len(rig.api.patches) == 1
    assert len(rig.api.applies) == 1


def test_no_signal_writes_nothing() -> None:
    rig = Rig()
    result = rig.controller.cycle()
    assert result.plan is not None
    assert result.plan.decisions == ()
    assert rig.api.patches == []
    assert rig.api.applies == []
    assert rig.api.events == []


def test_prometheus_down_quarantines_nothing_and_warns_once_per_interval() -> None:
    rig = Rig()
    rig.prom.fire("n03")
    rig.prom.error = QueryError("unreachable", "http://prometheus: connection refused")
    result = rig.controller.cycle()
    assert result.signals is None
    assert "signals" in result.unknown
    assert rig.api.patches == []
    assert rig.api.reasons() == [REASON_QUERY_FAILED]
    (event,) = rig.api.events
    assert event["involvedObject"]["kind"] == "ConfigMap"
    assert event["metadata"]["namespace"] == NS
    rig.clock.advance(60)
    rig.controller.cycle()
    assert rig.api.reasons() == [REASON_QUERY_FAILED]  # within warningEventInterval (5m): no second Event
    rig.clock.advance(300)
    rig.controller.cycle()
    assert rig.api.reasons() == [REASON_QUERY_FAILED, REASON_QUERY_FAILED]
    assert rig.metric("gpucluster_quarantine_query_errors_total", reason="unreachable") == 3
    rig.prom.error = None
    assert rig.controller.cycle().quarantined == ("n03",)


def test_prometheus_down_still_records_a_deletion_in_the_ledger() -> None:
    rig = Rig()
    rig.prom.fire("n03")
    rig.controller.cycle()
    del rig.api.nodes["n03"]
    rig.prom.error = QueryError("timeout", "no answer")
    rig.clock.advance(30)
    rig.controller.cycle()
    assert rig.ledger()["n03"]["deleted"] == format_time(START + 30)
    assert rig.metric("gpucluster_quarantine_node_info", node="n03", flavor="h100", reason="gpu-temperature") is None


@pytest.mark.parametrize("failing", ["list-nodes", "read-ledger"])
def test_unreadable_nodes_or_ledger_change_nothing(failing: str) -> None:
    rig = Rig()
    rig.prom.fire("n03")
    rig.api.fail[failing] = KubeError("HTTP 500: etcd timeout")
    result = rig.controller.cycle()
    assert result.plan is None
    assert rig.api.patches == []
    assert rig.api.applies == []
    assert rig.metric("gpucluster_quarantine_kube_errors_total", operation=failing) == 1


def test_a_standby_decides_but_writes_nothing() -> None:
    rig = Rig()
    rig.leader = False
    rig.prom.fire("n03")
    result = rig.controller.cycle()
    assert result.plan is not None
    assert [d.node for d in result.plan.decisions] == ["n03"]
    assert rig.api.patches == []
    assert rig.api.applies == []
    assert rig.api.events == []


def test_leadership_lost_before_the_write_changes_nothing() -> None:
    rig = Rig()
    rig.prom.fire("n03")
    answers = iter([True, False, False])
    rig.controller.is_leader = lambda: next(answers)
    rig.controller.cycle()
    assert rig.api.patches == []
    assert rig.api.applies == []


def test_a_node_changed_meanwhile_is_left_for_the_next_cycle_and_not_listed() -> None:
    rig = Rig()
    rig.prom.fire("n03")
    rig.api.race = True
    result = rig.controller.cycle()
    assert result.quarantined == ()
    assert rig.api.quarantine_taints("n03") == []
    assert rig.api.ledger is None  # nothing to list: the ledger is not written
    rig.api.race = False
    assert rig.controller.cycle().quarantined == ("n03",)


def test_a_failed_patch_is_a_warning_event_and_no_ledger_entry() -> None:
    rig = Rig()
    rig.prom.fire("n03")
    rig.api.fail["patch-node"] = KubeError("patch node n03: HTTP 403: forbidden")
    rig.controller.cycle()
    assert rig.api.reasons() == [REASON_UPDATE_FAILED]
    assert rig.api.ledger is None


def test_the_breaker_refuses_past_the_share_with_an_event_and_its_metric() -> None:
    rig = Rig(nodes=10)  # 0.1 x 10: one node per hour
    for name in ("n01", "n02", "n03"):
        rig.prom.fire(name)
    result = rig.controller.cycle()
    assert result.quarantined == ("n01",)
    assert rig.api.reasons().count(REASON_BREAKER) == 2
    assert rig.metric("gpucluster_quarantine_breaker_open", flavor="h100") == 1
    assert rig.metric("gpucluster_quarantine_breaker_limit_nodes", flavor="h100") == 1
    assert rig.api.quarantine_taints("n02") == []
    assert rig.api.quarantine_taints("n03") == []
    rig.clock.advance(15)
    rig.controller.cycle()
    assert rig.api.reasons().count(REASON_BREAKER) == 2  # rate-limited per node
    assert len(rig.api.patches) == 1


def test_the_breaker_closes_again_once_the_window_has_passed() -> None:
    rig = Rig(nodes=10)
    rig.prom.fire("n01")
    rig.prom.fire("n02")
    rig.controller.cycle()
    rig.clock.advance(3601)
    result = rig.controller.cycle()
    assert result.quarantined == ("n02",)
    rig.prom.samples = []
    rig.controller.cycle()
    assert rig.metric("gpucluster_quarantine_breaker_open", flavor="h100") == 0


def test_a_quarantined_then_deleted_node_stays_in_the_ledger_and_counts_for_the_breaker() -> None:
    rig = Rig(nodes=10)
    rig.prom.fire("n01")
    rig.controller.cycle()
    del rig.api.nodes["n01"]
    rig.prom.samples = []
    rig.prom.fire("n02")
    rig.clock.advance(60)
    result = rig.controller.cycle()
    assert result.quarantined == ()
    entry = rig.ledger()["n01"]
    assert (entry["reason"], entry["deleted"]) == ("gpu-temperature", format_time(START + 60))


def test_a_released_node_is_recorded_and_not_quarantined_again_within_the_grace() -> None:
    rig = Rig(nodes=10, maxShare=0.5)
    rig.prom.fire("n01")
    rig.controller.cycle()
    node = rig.api.nodes["n01"]
    node["spec"]["taints"] = []
    del node["metadata"]["labels"]["gpucluster.io/quarantined"]
    node["metadata"]["annotations"] = {RELEASED_AT_ANNOTATION: format_time(START + 100)}
    rig.clock.advance(100)
    rig.controller.cycle()
    assert rig.ledger()["n01"]["released"] == format_time(START + 100)
    assert rig.api.quarantine_taints("n01") == []
    rig.clock.advance(30 * 60)
    assert rig.controller.cycle().quarantined == ("n01",)
    assert RELEASED_AT_ANNOTATION not in rig.api.nodes["n01"]["metadata"]["annotations"]


def test_dry_run_writes_nothing() -> None:
    rig = Rig(dryRun=True)
    rig.prom.fire("n03")
    rig.controller.cycle()
    assert rig.api.patches == []
    assert rig.api.applies == []
    assert rig.api.events == []


def test_samples_without_a_node_or_an_alert_name_are_counted_not_used() -> None:
    samples = (
        Sample({"alertname": "GpuXidError", "node": "n01"}, 1, 0),
        Sample({"alertname": "GpuXidError"}, 1, 0),
        Sample({"node": "n01"}, 1, 0),
    )
    signals, problems = signals_from(samples)
    assert [s.node for s in signals] == ["n01"]
    assert problems == ["no-node", "no-alertname"]
