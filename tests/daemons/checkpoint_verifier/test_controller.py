"""The checkpoint verifier's controller: a report becomes a check Job, the Job's verdict becomes the record beside
the report, an Event and metrics; only a verified checkpoint counts, and nothing is lost when a replica dies.

The check Jobs run for real (``fakes.FakeApi.run_checks`` runs each Job's own command) on copies of the checkpoints
torch 2.15.0 wrote (``tests/fixtures/dcp/``), corrupted by ``sim.checkpoint_faults``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from contract.checkpoint_record import read_record
from contract.checkpoint_verifier_settings import CheckpointVerifierSettings, TeamQueue
from contract.constants import CHECKPOINT_CLAIM, PRIORITY_LABEL, QUEUE_LABEL, VERIFIED_ANNOTATION_PREFIX
from contract.controllers.checkpoint_verifier import CHECK_REPORT_ANNOTATION
from daemons.checkpoint_verifier.controller import REASON_REJECTED, REASON_VERIFIED, Controller
from daemons.checkpoint_verifier.decide import State
from daemons.checkpoint_verifier.metrics import Metrics
from sim.checkpoint_faults import CAPTURED, CORRUPTIONS
from tests.daemons.checkpoint_verifier.fakes import START, FakeApi

NS, JOB = "team-a", "sd-pretrain"


def settings(**changes: object) -> CheckpointVerifierSettings:
    """The checks' tests' settings: restore drills off unless asked for (``test_drills.py`` has theirs)."""
    team = TeamQueue(namespace=NS, local_queue="training", priority="research-scavenger")
    base = {"interval": "2s", "requestTimeout": "1s", "retryAfter": "20s", "maxRunning": 4}
    return CheckpointVerifierSettings.parse({**base, "restoreDrill": {"enabled": False}, **changes}).model_copy(
        update={"teams": [team]}
    )


def controller(api: FakeApi, *, leader: bool = True, dry_run: bool = False, **changes: object) -> Controller:
    return Controller(
        settings(**changes),
        api,
        Metrics(),
        is_leader=lambda: leader,
        identity="verifier-0",
        dry_run=dry_run,
        clock=lambda: api.clock,
    )


def save(api: FakeApi, step: str, job: str = JOB, source: str = "step-100") -> Path:
    """The job writes ``step`` under its directory on the volume: a real DCP checkpoint of two ranks."""
    return Path(shutil.copytree(CAPTURED / source, api.volume / job / step))


def record(api: FakeApi, job: str = JOB) -> dict[str, object]:
    text = api.annotation(NS, f"{VERIFIED_ANNOTATION_PREFIX}{job}")
    assert text is not None
    assert read_record(text) is not None, text
    return dict(json.loads(text))


def sample(c: Controller, name: str, **labels: str) -> float | None:
    return c.metrics.registry.get_sample_value(f"gpucluster_checkpoint_verifier_{name}", labels)


def test_a_reported_checkpoint_is_checked_by_a_job_and_counts_once_verified(api: FakeApi) -> None:
    c = controller(api)
    save(api, "step-100")
    api.report(NS, JOB, START)
    first = c.cycle()
    assert [(j.job, j.state, j.action) for j in first.jobs] == [(JOB, State.START, "started")]
    assert api.annotation(NS, f"{VERIFIED_ANNOTATION_PREFIX}{JOB}") is None  # nothing counts before the check
    (job,) = api.jobs.values()
    meta, pod = job["metadata"], job["spec"]["template"]["spec"]
    assert (meta["labels"][QUEUE_LABEL], meta["labels"][PRIORITY_LABEL]) == ("training", "research-scavenger")
    (container,) = pod["containers"]
    assert container["command"][3:5] == ["--newest-under", f"/checkpoints/{JOB}"]
    assert "nvidia.com/gpu" not in container["resources"]["limits"]
    assert container["volumeMounts"] == [{"name": CHECKPOINT_CLAIM, "mountPath": "/checkpoints", "readOnly": True}]
    assert pod["volumes"][0]["persistentVolumeClaim"] == {"claimName": CHECKPOINT_CLAIM, "readOnly": True}
    assert pod["automountServiceAccountToken"] is False
    assert [j.state for j in c.cycle().jobs] == [State.CHECKING]  # a running check is waited for
    api.run_checks()
    api.clock += 5
    assert [(j.state, j.action) for j in c.cycle().jobs] == [(State.RECORD, "recorded")]
    verified = record(api)["verified"]
    assert isinstance(verified, dict)
    assert (verified["step"], verified["directory"], verified["reported"]) == (100, "step-100", "2027-01-15T08:00:00Z")
    assert [e["reason"] for e in api.events] == [REASON_VERIFIED]
    assert sample(c, "verified_step", namespace=NS, job=JOB) == 100
    assert sample(c, "verified_report_timestamp_seconds", namespace=NS, job=JOB) == START
    assert sample(c, "last_check_ok", namespace=NS, job=JOB) == 1
    assert [j.state for j in c.cycle().jobs] == [State.VERIFIED]
    assert len(api.jobs) == 1  # the same report is never checked twice


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_a_corrupt_checkpoint_is_refused_and_the_last_verified_one_still_counts(api: FakeApi, corruption: str) -> None:
    c = controller(api)
    save(api, "step-100")
    api.report(NS, JOB, START)
    c.cycle()
    api.run_checks()
    c.cycle()
    newer = save(api, "step-200")
    spoil, problem = CORRUPTIONS[corruption]
    spoil(newer)
    api.clock += 1800
    api.report(NS, JOB, api.clock)
    assert [j.state for j in c.cycle().jobs] == [State.START]
    second = api.jobs[max(api.jobs, key=lambda k: api.jobs[k]["metadata"]["annotations"][CHECK_REPORT_ANNOTATION])]
    assert second["spec"]["template"]["spec"]["containers"][0]["command"][-2:] == ["--last-verified-step", "100"]
    api.run_checks()
    assert [j.state for j in c.cycle().jobs] == [State.RECORD]
    after = record(api)
    assert isinstance(after["verified"], dict)
    assert after["verified"]["step"] == 100  # a restart resumes from the last good one
    last = after["last"]
    assert isinstance(last, dict)
    assert last["ok"] is False
    assert problem in last["problems"]
    warning = api.events[-1]
    assert (warning["type"], warning["reason"]) == ("Warning", REASON_REJECTED)
    assert JOB in warning["message"]
    assert "resumes from step 100" in warning["message"]
    assert sample(c, "last_check_ok", namespace=NS, job=JOB) == 0
    assert sample(c, "verified_step", namespace=NS, job=JOB) == 100
    assert [j.state for j in c.cycle().jobs] == [State.REJECTED]


def test_a_check_with_no_verdict_counts_nothing_and_runs_again_after_retry_after(api: FakeApi) -> None:
    c = controller(api)
    save(api, "step-100")
    api.report(NS, JOB, START)
    c.cycle()
    api.run_checks(message=False)  # evicted, its node lost: no termination message
    assert [j.state for j in c.cycle().jobs] == [State.RETRY_LATER]
    assert sample(c, "checks_incomplete_total") == 1
    assert api.annotation(NS, f"{VERIFIED_ANNOTATION_PREFIX}{JOB}") is None
    api.clock += 21
    assert [j.state for j in c.cycle().jobs] == [State.START]
    assert sorted(name.rsplit("-", 1)[1] for _, name in api.jobs) == ["0", "1"]
    api.run_checks()
    c.cycle()
    assert record(api)["verified"] is not None
    assert sample(c, "checks_incomplete_total") == 1  # counted once, not every cycle


def test_a_replica_killed_mid_check_loses_nothing_and_its_successor_records_the_verdict(api: FakeApi) -> None:
    directory = save(api, "step-100")
    before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in directory.iterdir()}
    api.report(NS, JOB, START)
    controller(api).cycle()  # starts the check, then the replica dies
    successor = controller(api)
    assert [j.state for j in successor.cycle().jobs] == [State.CHECKING]
    api.run_checks()
    successor.cycle()
    assert record(api)["verified"] is not None
    assert len(api.jobs) == 1
    after = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in directory.iterdir()}
    assert after == before  # the check only reads


def test_two_replicas_starting_the_same_check_make_one_job(api: FakeApi) -> None:
    save(api, "step-100")
    api.report(NS, JOB, START)
    a, b = controller(api), controller(api)
    created = api.create_check

    def twice(body: dict[str, Any]) -> None:
        created(body)
        created(body)

    api.create_check = twice  # type: ignore[method-assign]
    # as if b had created it between a's read and a's create: a's create is refused as already there
    assert [j.action for j in a.cycle().jobs] == [""]
    api.create_check = created  # type: ignore[method-assign]
    assert len(api.jobs) == 1
    assert [j.state for j in b.cycle().jobs] == [State.CHECKING]


def test_at_most_max_running_checks_run_the_oldest_report_first(api: FakeApi) -> None:
    c = controller(api, maxRunning=2)
    for i, job in enumerate(["job-c", "job-a", "job-b"]):
        save(api, "step-100", job)
        api.report(NS, job, START - 100 * i)
    states = {j.job: j.state for j in c.cycle().jobs}
    assert states == {"job-b": State.START, "job-a": State.START, "job-c": State.QUEUED}
    api.run_checks()
    c.cycle()  # records two
    assert {j.job: j.state for j in c.cycle().jobs}["job-c"] is State.CHECKING


@pytest.mark.parametrize(("leader", "dry_run"), [(False, False), (True, True)])
def test_a_standby_or_a_dry_run_decides_and_writes_nothing(api: FakeApi, leader: bool, dry_run: bool) -> None:
    c = controller(api, leader=leader, dry_run=dry_run)
    save(api, "step-100")
    api.report(NS, JOB, START)
    assert [j.action for j in c.cycle().jobs] == ["would-start"]
    assert api.jobs == {}
    assert api.events == []


@pytest.mark.parametrize("failing", ["claim", "list_checks", "list_check_pods"])
def test_an_unreadable_namespace_is_left_alone(api: FakeApi, failing: str) -> None:
    c = controller(api)
    save(api, "step-100")
    api.report(NS, JOB, START)
    c.cycle()
    api.run_checks()
    api.failing.add(failing)
    result = c.cycle()
    assert result.jobs == []
    assert NS in result.unknown
    assert api.annotation(NS, f"{VERIFIED_ANNOTATION_PREFIX}{JOB}") is None
    operation = {"claim": "read-claim", "list_checks": "list-checks", "list_check_pods": "list-pods"}[failing]
    assert sample(c, "kube_errors_total", operation=operation) == 1


def test_a_record_or_report_that_does_not_read_is_never_taken_for_a_pass(api: FakeApi) -> None:
    c = controller(api)
    meta = api.claims[NS]["metadata"]
    meta["annotations"][f"{VERIFIED_ANNOTATION_PREFIX}{JOB}"] = '{"verified": {"step": 999}}'
    meta["annotations"]["checkpoint.gpucluster.io/other"] = "yesterday"
    save(api, "step-100")
    api.report(NS, JOB, START)
    result = c.cycle()
    assert {j.job: j.state for j in result.jobs} == {JOB: State.START, "other": State.UNREADABLE_REPORT}
    assert len(result.problems) == 2
    assert sample(c, "verified_step", namespace=NS, job=JOB) is None
    api.run_checks()
    c.cycle()
    verified = record(api)["verified"]
    assert isinstance(verified, dict)
    assert verified["step"] == 100


def test_a_record_write_that_loses_a_race_is_written_next_cycle(api: FakeApi) -> None:
    c = controller(api)
    save(api, "step-100")
    api.report(NS, JOB, START)
    c.cycle()
    api.run_checks()
    real = api.write_record

    def racing(namespace: str, annotation: str, value: str, resource_version: str) -> None:
        api.claims[NS]["metadata"]["resourceVersion"] = api._bump()  # the job annotated the claim meanwhile
        api.write_record = real  # type: ignore[method-assign]
        real(namespace, annotation, value, resource_version)

    api.write_record = racing  # type: ignore[method-assign]
    assert [j.action for j in c.cycle().jobs] == [""]
    assert [j.action for j in c.cycle().jobs] == ["recorded"]


def test_a_restart_is_told_the_latest_verified_checkpoint_and_never_a_refused_one(api: FakeApi) -> None:
    """The job's entry in the team's checkpoint-resume ConfigMap (what its pods mount as GPUCLUSTER_RESUME_FILE)
    follows the record: the verified checkpoint, not a newer refused one; gone when an operator removes the record;
    kept when the record does not read."""
    c = controller(api)
    save(api, "step-100")
    api.report(NS, JOB, START)
    c.cycle()
    assert api.resume[NS] == {}  # nothing verified: no file, the job starts afresh
    api.run_checks()
    c.cycle()
    entry = json.loads(api.resume[NS][f"{JOB}.json"])
    assert (entry["step"], entry["directory"]) == (100, f"/checkpoints/{JOB}/step-100")
    truncated = save(api, "step-200")
    CORRUPTIONS["truncated shard"][0](truncated)
    api.clock += 1800
    api.report(NS, JOB, api.clock)
    c.cycle()
    api.run_checks()
    c.cycle()
    assert json.loads(api.resume[NS][f"{JOB}.json"])["step"] == 100  # the refused step-200 is never named
    annotations = api.claims[NS]["metadata"]["annotations"]
    annotations[f"{VERIFIED_ANNOTATION_PREFIX}{JOB}"] = "{not a record"
    c.cycle()
    assert f"{JOB}.json" in api.resume[NS]  # a record that does not read takes nothing away
    del annotations[f"{VERIFIED_ANNOTATION_PREFIX}{JOB}"]
    c.cycle()
    assert api.resume[NS] == {}  # the operator started the job afresh


def test_without_its_configmap_the_verifier_still_verifies_and_names_what_is_missing(api: FakeApi) -> None:
    del api.resume[NS]
    c = controller(api)
    save(api, "step-100")
    api.report(NS, JOB, START)
    c.cycle()
    api.run_checks()
    result = c.cycle()
    assert record(api)["verified"] is not None
    assert any("no checkpoint-resume ConfigMap" in p for p in result.problems), result.problems


def test_a_check_kueue_never_admits_is_given_up_after_its_deadline_and_run_again(api: FakeApi) -> None:
    c = controller(api, checkDeadline="10m")
    save(api, "step-100")
    api.report(NS, JOB, START)
    c.cycle()
    (first,) = api.jobs
    api.clock += 600  # exactly the deadline: still waited for
    assert [j.state for j in c.cycle().jobs] == [State.CHECKING]
    api.clock += 1
    result = c.cycle()
    assert result.given_up == [f"{NS}/{first[1]}"]
    assert [j.state for j in result.jobs] == [State.START]  # decided afresh, without the deleted Job
    warning = api.events[-1]
    assert (warning["type"], warning["reason"]) == ("Warning", "CheckpointJobNotAdmitted")
    assert "not admitted by Kueue in 601s" in warning["message"]
    assert sample(c, "jobs_given_up_total", kind="check") == 1
    api.run_checks()  # admitted this time
    c.cycle()
    assert record(api)["verified"] is not None


def test_a_standby_never_deletes_a_job_kueue_has_not_admitted(api: FakeApi) -> None:
    save(api, "step-100")
    api.report(NS, JOB, START)
    controller(api, checkDeadline="10m").cycle()
    api.clock += 601
    standby = controller(api, leader=False, checkDeadline="10m")
    result = standby.cycle()
    assert [g.startswith("would delete") for g in result.given_up] == [True]
    assert len(api.jobs) == 1
