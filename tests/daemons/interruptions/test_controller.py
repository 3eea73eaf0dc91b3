"""One cycle on a fake API: fail-static, only the leader writes, the bound stops a crash loop once, the record and
the reliability ConfigMap are written when they change, and the metrics say so."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from typing import Any, cast

from contract.checkpoint_record import CheckVerdict, next_record, render_record
from contract.interruptions_settings import InterruptionsSettings
from daemons.interruptions.client import KubeApi
from daemons.interruptions.controller import Controller, reliability_data, resume_command
from daemons.interruptions.ettr import ClusterTime
from daemons.interruptions.metrics import Metrics
from daemons.interruptions.model import LEDGER_ANNOTATION
from daemons.toolkit.kube import KubeError

NOW = 1_800_000_000.0


def ts(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class FakeApi:
    def __init__(self) -> None:
        self.jobset: dict[str, Any] = {
            "metadata": {
                "name": "llm",
                "namespace": "team-a",
                "uid": "u1",
                "resourceVersion": "1",
                "creationTimestamp": ts(NOW - 7200),
                "labels": {"gpucluster.io/training-job": "llm", "gpucluster.io/team": "a"},
                "annotations": {"gpucluster.io/max-restarts-per-hour": "2"},
            },
            "spec": {"replicatedJobs": [{"name": "node", "replicas": 1, "template": {"spec": {"parallelism": 1}}}]},
            "status": {"restarts": 0, "restartsCountTowardsMax": 0},
        }
        self.workload: dict[str, Any] = {
            "metadata": {
                "name": "jobset-llm",
                "namespace": "team-a",
                "ownerReferences": [{"kind": "JobSet", "uid": "u1"}],
            },
            "spec": {"active": True},
            "status": {"conditions": [{"type": "Admitted", "status": "True", "lastTransitionTime": ts(NOW - 7000)}]},
        }
        self.broken: str | None = None
        self.pods: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.created_events: list[dict[str, Any]] = []
        self.config_maps: list[Mapping[str, str]] = []
        self.claim_annotations: dict[str, str] = {}

    def _read(self, what: str, items: list[Any]) -> list[Any]:
        if self.broken == what:
            raise KubeError(f"list {what}: unreachable")
        return items

    def list_jobsets(self) -> list[Any]:
        return self._read("jobsets", [self.jobset])

    def list_pods(self) -> list[Any]:
        return self._read("pods", self.pods)

    def list_nodes(self) -> list[Any]:
        return self._read("nodes", [])

    def list_workloads(self) -> list[Any]:
        return self._read("workloads", [self.workload])

    def list_jobset_events(self) -> list[Any]:
        return self._read("events", self.events)

    def list_checkpoint_claims(self) -> list[Any]:
        claim = {"metadata": {"name": "checkpoints", "namespace": "team-a", "annotations": self.claim_annotations}}
        return self._read("claims", [claim])

    def write_record(self, namespace: str, name: str, text: str, resource_version: str) -> None:
        self.jobset["metadata"]["annotations"][LEDGER_ANNOTATION] = text

    def deactivate_workload(self, namespace: str, name: str) -> None:
        self.workload["spec"]["active"] = False

    def put_config_map(self, namespace: str, name: str, data: Mapping[str, str]) -> None:
        self.config_maps.append(dict(data))

    def create_event(self, body: dict[str, Any]) -> None:
        self.created_events.append(body)


def controller(
    api: FakeApi, *, leader: bool = True, clock: list[float] | None = None, verified_only: bool = False
) -> tuple[Controller, Metrics]:
    metrics = Metrics()
    now = clock if clock is not None else [NOW]
    c = Controller(
        InterruptionsSettings(verified_checkpoints_only=verified_only),
        cast(KubeApi, api),
        metrics,
        is_leader=lambda: leader,
        identity="test",
        clock=lambda: now[0],
    )
    return c, metrics


def running_pod(attempt: int, since: float) -> dict[str, Any]:
    labels = {"gpucluster.io/training-job": "llm", "jobset.sigs.k8s.io/restart-attempt": str(attempt)}
    return {
        "metadata": {"name": f"llm-node-0-0-{attempt}", "namespace": "team-a", "labels": labels},
        "spec": {"nodeName": "n1"},
        "status": {"phase": "Running", "startTime": ts(since)},
    }


def crash(api: FakeApi, n: int) -> None:
    api.jobset["status"] = {"restarts": n, "restartsCountTowardsMax": n}
    api.events = [
        {
            "metadata": {"namespace": "team-a"},
            "involvedObject": {"kind": "JobSet", "name": "llm", "namespace": "team-a", "uid": "u1"},
            "reason": "RestartJobSetFailurePolicyAction",
            "lastTimestamp": ts(NOW - 10),
        }
    ]


def test_the_bound_stops_a_crash_loop_once_with_an_event_that_says_how_to_resume() -> None:
    api = FakeApi()
    c, metrics = controller(api)
    crash(api, 2)
    assert c.cycle().stopped == ()  # two restarts: at the bound of 2, not past it
    crash(api, 3)
    result = c.cycle()
    assert result.stopped == ("team-a/llm",)
    assert api.workload["spec"]["active"] is False
    (event,) = api.created_events
    assert event["reason"] == "RestartBoundReached"
    assert event["type"] == "Warning"
    assert "3 restarts in the last hour" in event["message"]
    assert "bound of 2" in event["message"]
    assert "3 program" in event["message"]
    assert resume_command("team-a", "jobset-llm") in event["message"]
    assert """'{"spec":{"active":true}}'""" in event["message"]
    record = json.loads(api.jobset["metadata"]["annotations"][LEDGER_ANNOTATION])
    assert record["restarts"] == 3
    assert "stoppedAt" in record
    assert c.cycle().stopped == ()  # stopped once
    assert metrics.bound_stops._value.get() == 1
    text = metrics.render().decode()
    assert 'gpucluster_training_stopped_at_bound{job="llm",namespace="team-a",team="a"} 1.0' in text
    assert 'gpucluster_training_max_restarts_per_hour{job="llm",namespace="team-a",team="a"} 2.0' in text


def test_a_standby_writes_nothing_but_exports_the_figures() -> None:
    api = FakeApi()
    crash(api, 5)
    c, metrics = controller(api, leader=False)
    result = c.cycle()
    assert result.stopped == ()
    assert result.written == ()
    assert api.workload["spec"]["active"] is True
    assert LEDGER_ANNOTATION not in api.jobset["metadata"]["annotations"]
    assert api.config_maps == []
    text = metrics.render().decode()
    assert 'gpucluster_training_interruptions_total{cause="program",job="llm",namespace="team-a",team="a"} 5.0' in text
    assert 'gpucluster_training_restarts_last_hour{job="llm",namespace="team-a",team="a"}' in text


def test_fail_static_keeps_the_figures_and_writes_nothing() -> None:
    api = FakeApi()
    crash(api, 1)
    api.pods = [running_pod(1, NOW - 5)]
    c, metrics = controller(api)
    first = c.cycle()
    assert first.figures is not None
    assert "reliability" in first.written
    writes = len(api.config_maps)
    api.broken = "workloads"
    crash(api, 9)
    result = c.cycle()
    assert result.fail_static
    assert result.figures is first.figures
    assert api.workload["spec"]["active"] is True
    assert len(api.config_maps) == writes
    text = metrics.render().decode()
    assert 'cause="program",job="llm",namespace="team-a",team="a"} 1.0' in text
    assert 'gpucluster_interruptions_cycle_errors_total{read="workloads"} 1.0' in text


def test_the_reliability_configmap_follows_the_contract_and_is_written_when_it_changes() -> None:
    api = FakeApi()
    clock = [NOW]
    c, _ = controller(api, clock=clock)
    crash(api, 1)
    api.pods = [running_pod(1, NOW - 5)]
    c.cycle()
    (data,) = api.config_maps
    assert set(data) == {"nodeMtbiSeconds", "interruptions", "nodeSeconds", "updatedAt"}
    assert data["interruptions"] == "1"
    assert float(data["nodeSeconds"]) == 5.0  # one node running since the restart 5 s ago
    assert float(data["nodeMtbiSeconds"]) == 5.0
    c.cycle()  # nothing changed (the same clock)
    assert len(api.config_maps) == 1
    clock[0] += 5
    c.cycle()
    assert len(api.config_maps) == 2


def test_a_new_leader_after_a_kill_reads_the_record_and_adds_nothing_twice() -> None:
    api = FakeApi()
    crash(api, 1)
    first, _ = controller(api)
    first.cycle()
    before = api.jobset["metadata"]["annotations"][LEDGER_ANNOTATION]
    second, _ = controller(api)  # a fresh process: no memory, only the annotation and the objects
    second.cycle()
    assert json.loads(api.jobset["metadata"]["annotations"][LEDGER_ANNOTATION])["items"] == json.loads(before)["items"]


def test_reliability_data_before_and_without_training_time() -> None:
    assert reliability_data(ClusterTime(None, 0.0, 0)) == {
        "nodeMtbiSeconds": "0",
        "interruptions": "0",
        "nodeSeconds": "0.0",
    }
    assert reliability_data(ClusterTime(None, 0.0, 2)) is None  # interrupted before any training: not measurable
    assert reliability_data(ClusterTime(0.9, 7200.0, 3)) == {
        "nodeMtbiSeconds": "2400.0",
        "interruptions": "3",
        "nodeSeconds": "7200.0",
    }


def test_the_checkpoint_age_counts_what_counts_and_a_job_with_none_ages_from_its_start() -> None:
    def seen(api: FakeApi, verified_only: bool) -> float | None:
        c, metrics = controller(api, verified_only=verified_only)
        c.cycle()
        value: float | None = metrics.registry.get_sample_value(
            "gpucluster_training_checkpoint_age_seconds", {"job": "llm", "namespace": "team-a", "team": "a"}
        )
        return value

    api = FakeApi()
    api.pods = [running_pod(0, NOW - 600)]
    assert seen(api, verified_only=False) == 600  # nothing reported: as old as the running gang
    api.claim_annotations["checkpoint.gpucluster.io/llm"] = ts(NOW - 100)
    assert seen(api, verified_only=False) == 100
    assert seen(api, verified_only=True) == 600  # reported, never verified: nothing counts
    verdict = CheckVerdict(ok=True, step=10, directory="step-10", problems=(), summary="")
    record = next_record(None, verdict, ts(NOW - 400), NOW - 300)
    api.claim_annotations["verified.checkpoint.gpucluster.io/llm"] = render_record(record)
    assert seen(api, verified_only=True) == 400
    api.pods = []
    assert seen(api, verified_only=True) is None  # not every pod runs: no age
