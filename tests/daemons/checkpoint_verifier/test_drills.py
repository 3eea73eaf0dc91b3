"""Restore drills: the verifier reads each job's latest verified checkpoint whole on a schedule, in a Job of its own,
and records what it found beside the check, in an Event and in the metrics the drill alerts read.

The drills run for real (``fakes.FakeApi.run_checks`` runs each Job's own command, ``python3 -m
daemons.checkpoint_verifier.drill ...``) on copies of the checkpoints torch 2.15.0 wrote.
"""

from __future__ import annotations

import pytest

from contract.checkpoint_record import read_record
from contract.constants import CHECKPOINT_CLAIM, PRIORITY_LABEL, QUEUE_LABEL, VERIFIED_ANNOTATION_PREFIX
from contract.controllers.checkpoint_verifier import DRILL_EVERY_ANNOTATION_PREFIX, DRILL_KIND, KIND_LABEL
from daemons.checkpoint_verifier.controller import REASON_DRILL_FAILED, REASON_DRILLED, Controller
from daemons.checkpoint_verifier.drills import DrillState
from sim.checkpoint_faults import SILENT
from tests.daemons.checkpoint_verifier.fakes import FakeApi
from tests.daemons.checkpoint_verifier.test_controller import JOB, NS, controller, sample, save

HOUR = 3600.0


def drilling(api: FakeApi, **changes: object) -> Controller:
    drill = {"enabled": True, "every": "6h", "staleAfter": "12h", "deadline": "1h", "maxRunning": 1, **changes}
    return controller(api, restoreDrill=drill)


def drill_jobs(api: FakeApi) -> list[dict[str, object]]:
    return [j for j in api.jobs.values() if j["metadata"]["labels"].get(KIND_LABEL) == DRILL_KIND]


def verified(api: FakeApi, c: Controller, step: str = "step-100") -> None:
    """The job saves and reports ``step``; its check runs and is recorded."""
    save(api, step)
    api.report(NS, JOB, api.clock)
    c.cycle()
    api.run_checks()
    api.clock += 5


def states(c: Controller) -> list[DrillState]:
    return [d.state for d in c.cycle().drills]


def drill_record(api: FakeApi) -> dict[str, object]:
    text = api.annotation(NS, f"{VERIFIED_ANNOTATION_PREFIX}{JOB}")
    assert text is not None
    record = read_record(text)
    assert record is not None, text
    assert record.drill is not None, text
    return {
        "ok": record.drill.ok,
        "step": record.drill.step,
        "last_good": record.drill.last_good,
        "problems": record.drill.problems,
        "bytes": record.drill.bytes_read,
    }


def test_a_verified_checkpoint_is_drilled_at_once_then_every_interval(api: FakeApi) -> None:
    c = drilling(api)
    verified(api, c)
    assert states(c) == [DrillState.START]  # recorded verified this cycle, drilled at once
    (job,) = drill_jobs(api)
    meta, pod = job["metadata"], job["spec"]["template"]["spec"]  # type: ignore[index]
    assert (meta["labels"][QUEUE_LABEL], meta["labels"][PRIORITY_LABEL]) == ("training", "research-scavenger")
    (container,) = pod["containers"]
    assert container["command"][2:4] == ["daemons.checkpoint_verifier.drill", f"/checkpoints/{JOB}/step-100"]
    assert container["command"][-2:] == ["--max-read-mbps", "500"]  # it leaves the filesystem to training
    assert container["volumeMounts"] == [{"name": CHECKPOINT_CLAIM, "mountPath": "/checkpoints", "readOnly": True}]
    assert "nvidia.com/gpu" not in container["resources"]["limits"]
    assert pod["automountServiceAccountToken"] is False
    assert states(c) == [DrillState.DRILLING]
    api.run_checks()
    api.clock += 30
    assert states(c) == [DrillState.RECORD]
    got = drill_record(api)
    assert (got["ok"], got["step"], got["problems"]) == (True, 100, ())
    assert isinstance(got["bytes"], int)
    assert got["bytes"] > 10_000
    assert api.events[-1]["reason"] == REASON_DRILLED
    assert "step-100 restored whole" in api.events[-1]["message"]
    recorded_at = api.clock
    assert sample(c, "restore_drill_last_ok", namespace=NS, job=JOB) == 1
    assert sample(c, "restore_drill_last_good_timestamp_seconds", namespace=NS, job=JOB) == recorded_at
    assert sample(c, "restore_drill_step", namespace=NS, job=JOB) == 100
    # not again before its interval, whatever the job reports meanwhile
    api.clock += 5 * HOUR
    api.report(NS, JOB, api.clock)
    assert DrillState.SCHEDULED in states(c)
    assert len(drill_jobs(api)) == 1
    api.clock += HOUR
    assert states(c) == [DrillState.START]
    assert len(drill_jobs(api)) == 2


def test_bit_rot_the_check_passes_is_caught_by_the_drill_and_alerts(api: FakeApi) -> None:
    c = drilling(api)
    directory = save(api, "step-100")
    SILENT["bit rot without a manifest"][0](directory)
    api.report(NS, JOB, api.clock)
    c.cycle()
    api.run_checks()
    api.clock += 5
    c.cycle()  # the check passes it: sizes are right and there is no manifest
    text = api.annotation(NS, f"{VERIFIED_ANNOTATION_PREFIX}{JOB}")
    assert text is not None
    assert '"verified":{"step":100' in text
    api.run_checks()
    api.clock += 5
    assert states(c) == [DrillState.RECORD]
    got = drill_record(api)
    assert (got["ok"], got["problems"], got["last_good"]) == (False, ("corrupt-item",), None)
    warning = api.events[-1]
    assert (warning["type"], warning["reason"]) == ("Warning", REASON_DRILL_FAILED)
    assert JOB in warning["message"]
    assert "CRC-32" in warning["message"]
    assert sample(c, "restore_drill_last_ok", namespace=NS, job=JOB) == 0
    assert sample(c, "drills_recorded_total", outcome="failed") == 1


def test_a_job_sets_its_own_interval_on_the_claim_and_a_bad_one_is_named(api: FakeApi) -> None:
    c = drilling(api)
    api.claims[NS]["metadata"]["annotations"][f"{DRILL_EVERY_ANNOTATION_PREFIX}{JOB}"] = "1h"
    verified(api, c)
    c.cycle()
    api.run_checks()
    api.clock += 5
    c.cycle()
    api.clock += HOUR
    api.report(NS, JOB, api.clock)
    assert states(c) == [DrillState.START]  # its own hour, not the stack's six
    api.claims[NS]["metadata"]["annotations"][f"{DRILL_EVERY_ANNOTATION_PREFIX}{JOB}"] = "13h"  # > staleAfter
    result = c.cycle()
    assert any("no duration from 1m to staleAfter" in p for p in result.problems), result.problems


def test_a_drill_with_no_verdict_runs_again_after_retry_after(api: FakeApi) -> None:
    c = drilling(api)
    verified(api, c)
    c.cycle()
    api.run_checks(message=False)
    assert states(c) == [DrillState.RETRY_LATER]
    api.clock += 21
    assert states(c) == [DrillState.START]
    assert sorted(str(j["metadata"]["name"]).rsplit("-", 1)[1] for j in drill_jobs(api)) == ["0", "1"]  # type: ignore[index]


def test_a_job_that_stopped_checkpointing_is_not_drilled_or_exported(api: FakeApi) -> None:
    c = drilling(api)
    verified(api, c)
    c.cycle()
    api.run_checks()
    c.cycle()
    assert sample(c, "restore_drill_last_ok", namespace=NS, job=JOB) == 1
    api.clock += 13 * HOUR  # no report for longer than staleAfter: the job is done
    assert states(c) == [DrillState.DONE]
    assert sample(c, "restore_drill_last_ok", namespace=NS, job=JOB) is None
    assert sample(c, "restore_drill_last_good_timestamp_seconds", namespace=NS, job=JOB) is None


def test_drills_off_start_none(api: FakeApi) -> None:
    c = drilling(api, enabled=False)
    verified(api, c)
    assert c.cycle().drills == []
    assert drill_jobs(api) == []


@pytest.mark.parametrize(("leader", "dry_run"), [(False, False), (True, True)])
def test_a_standby_or_a_dry_run_starts_no_drill(api: FakeApi, leader: bool, dry_run: bool) -> None:
    writer = controller(api)  # the leader with drills off: the checkpoint is verified, nothing drilled yet
    verified(api, writer)
    writer.cycle()
    c = controller(
        api, leader=leader, dry_run=dry_run, restoreDrill={"every": "6h", "staleAfter": "12h", "deadline": "1h"}
    )
    before = len(api.jobs)
    result = c.cycle()
    assert [(d.state, d.action) for d in result.drills] == [(DrillState.START, "would-start")]
    assert len(api.jobs) == before


def test_a_drill_kueue_never_admits_is_given_up_after_its_deadline(api: FakeApi) -> None:
    c = drilling(api, deadline="1h")
    verified(api, c)
    c.cycle()
    (drill,) = drill_jobs(api)
    api.clock += HOUR + 1
    api.report(NS, JOB, api.clock)  # still checkpointing
    result = c.cycle()
    assert result.given_up == [f"{NS}/{drill['metadata']['name']}"]  # type: ignore[index]
    assert sample(c, "jobs_given_up_total", kind="drill") == 1
    assert api.events[-1]["reason"] == "CheckpointJobNotAdmitted"
