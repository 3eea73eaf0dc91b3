from __future__ import annotations

from typing import Any

from contract.checkpoint_record import CheckVerdict, next_record, render_record
from contract.times import unix_seconds
from daemons.interruptions.classify import NodeState
from daemons.interruptions.model import LEDGER_ANNOTATION, WorkloadView
from daemons.interruptions.translate import (
    checkpoint_at,
    event_time,
    job_view,
    node_state,
    owner_uid,
    pod_failure,
    workload_view,
)


def jobset(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "llm",
            "namespace": "team-a",
            "uid": "u1",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "resourceVersion": "7",
            "labels": {"gpucluster.io/training-job": "llm", "gpucluster.io/team": "a"},
            "annotations": {
                "gpucluster.io/checkpoint-interval-seconds": "1314",
                "gpucluster.io/max-restarts-per-hour": "4",
                LEDGER_ANNOTATION: '{"uid":"u1"}',
            },
        },
        "spec": {
            "suspend": False,
            "replicatedJobs": [{"name": "node", "replicas": 1, "template": {"spec": {"parallelism": 2}}}],
        },
        "status": status,
    }


def pod(
    name: str, phase: str, *, attempt: str = "1", started: str = "2026-01-01T00:10:00Z", **extra: Any
) -> dict[str, Any]:
    labels = {"gpucluster.io/training-job": "llm", "jobset.sigs.k8s.io/restart-attempt": attempt}
    status: dict[str, Any] = {
        "phase": phase,
        "containerStatuses": [{"name": "trainer", "state": {"running": {"startedAt": started}}}],
    }
    status.update(extra.pop("status", {}))
    return {
        "metadata": {"name": name, "namespace": "team-a", "labels": labels, **extra},
        "spec": {"nodeName": "n1"},
        "status": status,
    }


def test_a_job_with_its_gang_running() -> None:
    j = job_view(
        jobset(restarts=1, restartsCountTowardsMax=1),
        pods=[
            pod("a", "Running"),
            pod("b", "Running", started="2026-01-01T00:11:00Z"),
            pod("old", "Running", attempt="0"),
        ],
        nodes={},
        workload=None,
        events=[
            {
                "involvedObject": {"name": "llm", "namespace": "team-a", "uid": "u1"},
                "reason": "RestartJobSetFailurePolicyAction",
                "lastTimestamp": "2026-01-01T00:09:00Z",
            },
            {
                "involvedObject": {"name": "other", "namespace": "team-a"},
                "reason": "RestartJobSetFailurePolicyAction",
                "lastTimestamp": "2026-01-01T00:09:30Z",
            },
        ],
        claim_annotations={"checkpoint.gpucluster.io/llm": "2026-01-01T00:05:00Z"},
    )
    assert (j.restarts, j.restarts_towards_max, j.nodes, j.team) == (1, 1, 2, "a")
    assert j.max_restarts_per_hour == 4
    assert j.checkpoint_interval_s == 1314.0
    assert j.pods_running == 2
    assert j.all_running_since == unix_seconds("2026-01-01T00:11:00Z")
    assert j.restart_events == (("RestartJobSetFailurePolicyAction", unix_seconds("2026-01-01T00:09:00Z")),)
    assert j.checkpoint_at == unix_seconds("2026-01-01T00:05:00Z")
    assert j.record_text == '{"uid":"u1"}'


def test_a_gang_short_of_pods_is_not_running() -> None:
    j = job_view(
        jobset(), pods=[pod("a", "Running", attempt="0")], nodes={}, workload=None, events=[], claim_annotations={}
    )
    assert j.all_running_since is None
    assert j.pods_running == 1
    deleting = pod("b", "Running", attempt="0", deletionTimestamp="2026-01-01T00:00:00Z")
    j = job_view(
        jobset(),
        pods=[pod("a", "Running", attempt="0"), deleting],
        nodes={},
        workload=None,
        events=[],
        claim_annotations={},
    )
    assert j.all_running_since is None


def test_failed_pods_with_their_nodes() -> None:
    failed = pod(
        "a",
        "Failed",
        status={
            "containerStatuses": [
                {"name": "trainer", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}
            ]
        },
    )
    j = job_view(
        jobset(), pods=[failed], nodes={"n1": NodeState(True, False)}, workload=None, events=[], claim_annotations={}
    )
    ((f, n),) = j.failures
    assert f.exit_code == 137
    assert f.reason == "OOMKilled"
    assert n == NodeState(True, False)
    gone = job_view(jobset(), pods=[failed], nodes={}, workload=None, events=[], claim_annotations={})
    assert gone.failures[0][1] == NodeState(False)
    assert pod_failure(pod("r", "Running")) is None
    disrupted = pod("d", "Running", status={"conditions": [{"type": "DisruptionTarget", "status": "True"}]})
    assert pod_failure(disrupted) is not None


def test_bad_annotations_are_none() -> None:
    js = jobset()
    js["metadata"]["annotations"] = {
        "gpucluster.io/max-restarts-per-hour": "many",
        "gpucluster.io/checkpoint-interval-seconds": "-1",
    }
    j = job_view(js, pods=[], nodes={}, workload=None, events=[], claim_annotations={})
    assert j.max_restarts_per_hour is None
    assert j.checkpoint_interval_s is None


def test_node_state() -> None:
    obj = {
        "metadata": {"name": "n1"},
        "spec": {"taints": [{"key": "gpucluster.io/quarantine", "effect": "NoExecute"}]},
        "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]},
    }
    assert node_state(obj, ["gpucluster.io/quarantine"]) == ("n1", NodeState(True, None, True))


def test_workload_view() -> None:
    obj = {
        "metadata": {
            "name": "w",
            "namespace": "team-a",
            "ownerReferences": [{"kind": "JobSet", "uid": "u1", "name": "llm"}],
        },
        "spec": {"active": False},
        "status": {
            "conditions": [
                {"type": "Admitted", "status": "True", "lastTransitionTime": "2026-01-01T00:01:00Z"},
                {
                    "type": "Evicted",
                    "status": "True",
                    "reason": "Preempted",
                    "lastTransitionTime": "2026-01-01T00:02:00Z",
                },
            ],
            "schedulingStats": {"evictions": [{"reason": "Preempted", "underlyingCause": "", "count": 2}]},
        },
    }
    assert owner_uid(obj) == "u1"
    w = workload_view(obj)
    assert w == WorkloadView(
        "team-a",
        "w",
        False,
        True,
        unix_seconds("2026-01-01T00:01:00Z"),
        {"Preempted": 2},
        "Preempted",
        unix_seconds("2026-01-01T00:02:00Z"),
    )


def test_the_job_s_own_checkpoint_write_time_is_read_and_absent_is_none() -> None:
    js = jobset()
    js["metadata"]["annotations"]["gpucluster.io/checkpoint-write-seconds"] = "0.25"
    j = job_view(js, pods=[], nodes={}, workload=None, events=[], claim_annotations={})
    assert j.checkpoint_write_s == 0.25
    assert (
        job_view(jobset(), pods=[], nodes={}, workload=None, events=[], claim_annotations={}).checkpoint_write_s is None
    )


def test_the_stall_detectors_record_is_read_and_a_bad_one_ignored() -> None:
    from daemons.interruptions.translate import stall_restart  # noqa: PLC0415

    assert stall_restart('{"attempt": 3, "at": 12.5, "evidence": "idle"}') == (3, 12.5)
    for bad in (None, "", "{", '{"attempt": -1, "at": 1}', '{"attempt": true, "at": 1}', '{"attempt": 1}', "[]"):
        assert stall_restart(bad) is None


def test_with_a_verifier_only_the_last_verified_checkpoint_counts() -> None:
    report = {"checkpoint.gpucluster.io/llm": "2026-01-01T00:30:00Z"}
    verdict = CheckVerdict(ok=True, step=300, directory="step-300", problems=(), summary="")
    verified = next_record(None, verdict, "2026-01-01T00:05:00Z", 0.0)
    refused = next_record(
        verified, CheckVerdict(False, 400, "step-400", ("truncated-shard",), "refused"), "2026-01-01T00:30:00Z", 0.0
    )
    record = {"verified.checkpoint.gpucluster.io/llm": render_record(refused)}
    # the job's newest report (00:30) failed its check: the work since the verified one (00:05) is what is at risk
    assert checkpoint_at(report | record, "llm", verified_only=False) == unix_seconds("2026-01-01T00:30:00Z")
    assert checkpoint_at(report | record, "llm", verified_only=True) == unix_seconds("2026-01-01T00:05:00Z")
    # reported, never verified (or a record the verifier did not write): nothing counts
    assert checkpoint_at(report, "llm", verified_only=True) is None
    rejected_only = next_record(
        None, CheckVerdict(False, 400, "step-400", ("truncated-shard",), "refused"), "2026-01-01T00:30:00Z", 0.0
    )
    assert (
        checkpoint_at(
            report | {"verified.checkpoint.gpucluster.io/llm": render_record(rejected_only)}, "llm", verified_only=True
        )
        is None
    )
    forged = {"verified.checkpoint.gpucluster.io/llm": '{"verified": {"step": 1}}'}
    assert checkpoint_at(report | forged, "llm", verified_only=True) is None


def test_an_event_is_timed_by_whichever_api_wrote_it() -> None:
    """core/v1 Events (JobSet up to 0.11: lastTimestamp, count) and events.k8s.io/v1 Events read through core/v1
    (JobSet 0.12's recorder: eventTime in microseconds, no lastTimestamp, a series once repeated) are both timed;
    an Event with no time at all is not, and job_view then leaves it out."""
    legacy = {"lastTimestamp": "2026-01-01T00:09:00Z", "count": 1, "eventTime": None}
    assert event_time(legacy) == unix_seconds("2026-01-01T00:09:00Z")
    new = {"eventTime": "2026-01-01T00:09:00.250000Z", "lastTimestamp": None, "firstTimestamp": None}
    assert event_time(new) == unix_seconds("2026-01-01T00:09:00Z") + 0.25
    repeated = {**new, "series": {"count": 3, "lastObservedTime": "2026-01-01T00:12:00.000000Z"}}
    assert event_time(repeated) == unix_seconds("2026-01-01T00:12:00Z")
    assert event_time({"eventTime": None, "lastTimestamp": None}) is None
    involved = {"involvedObject": {"name": "llm", "namespace": "team-a", "uid": "u1"}}
    reason = {"reason": "RestartJobSetFailurePolicyAction"}
    views = [
        job_view(
            jobset(), pods=[], nodes={}, workload=None, events=[{**involved, **reason, **ev}], claim_annotations={}
        )
        for ev in (repeated, {"eventTime": None})
    ]
    assert views[0].restart_events == (("RestartJobSetFailurePolicyAction", unix_seconds("2026-01-01T00:12:00Z")),)
    assert views[1].restart_events == ()
