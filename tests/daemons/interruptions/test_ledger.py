from __future__ import annotations

import json
from dataclasses import replace

from daemons.interruptions.classify import Cause, NodeState, PodFailure
from daemons.interruptions.ledger import (
    MAX_RECORD_BYTES,
    SAME_NODE_FAILURE_S,
    Interruption,
    Record,
    counts,
    parse_record,
    reconcile,
    render,
)
from daemons.interruptions.model import NODE_RESTART_REASON, PROGRAM_RESTART_REASON, JobView, WorkloadView

T0 = 1_000_000.0


def job(**kw: object) -> JobView:
    base = JobView(
        namespace="team-a",
        name="llm",
        uid="u1",
        team="a",
        created_at=T0,
        restarts=0,
        restarts_towards_max=0,
        max_restarts_per_hour=None,
        checkpoint_interval_s=1800.0,
        nodes=4,
        workload=WorkloadView("team-a", "jobset-llm", True, True, T0 + 10),
        all_running_since=T0 + 60,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def test_counts_are_the_counters() -> None:
    wl = WorkloadView("team-a", "w", True, True, T0, evictions={"Preempted": 2, "PodsReadyTimeout": 1})
    c = counts(job(restarts=5, restarts_towards_max=2, workload=wl))
    assert c[Cause.PROGRAM] == 2
    assert c[Cause.NODE] == 3
    assert c[Cause.PREEMPTION] == 2
    assert c[Cause.REQUEUE] == 1
    assert c[Cause.UNKNOWN] == 0


def test_first_sight_records_admission_and_running() -> None:
    r = reconcile(Record("u1"), job(), T0 + 100)
    assert r.first_admitted == T0 + 10
    assert r.first_running == T0 + 60
    assert r.items == ()


def test_a_program_restart_takes_its_event_time_and_work_lost_from_the_checkpoint() -> None:
    r = reconcile(Record("u1"), job(), T0 + 100)
    failed = job(
        restarts=1,
        restarts_towards_max=1,
        all_running_since=None,
        restart_events=((PROGRAM_RESTART_REASON, T0 + 1000),),
        checkpoint_at=T0 + 700,
        failures=((PodFailure("llm-node-0-2", "n3", exit_code=137, reason="OOMKilled"), NodeState(True)),),
    )
    r = reconcile(r, failed, T0 + 1005)
    (item,) = r.items
    assert item.cause is Cause.PROGRAM
    assert item.restart
    assert item.at == T0 + 1000
    assert item.work_lost_s == 300.0
    assert not item.time_estimated
    assert item.recovered_at is None
    assert "OOMKilled" in item.detail
    # all pods Running again at +1090: recovery 90 s
    r = reconcile(r, replace(failed, all_running_since=T0 + 1090), T0 + 1100)
    assert r.items[0].recovery_s == 90.0


def test_work_lost_is_bounded_by_the_attempt_start() -> None:
    r = reconcile(Record("u1"), job(), T0 + 100)
    failed = job(restarts=1, restarts_towards_max=1, restart_events=((PROGRAM_RESTART_REASON, T0 + 500),))
    r = reconcile(r, replace(failed, checkpoint_at=T0 + 5), T0 + 505)
    assert r.items[0].work_lost_s == 440.0  # from first running at +60, not from the old checkpoint


def test_node_restart_from_the_counter_difference() -> None:
    r = reconcile(Record("u1"), job(), T0 + 100)
    r = reconcile(
        r, job(restarts=1, restart_events=((NODE_RESTART_REASON, T0 + 400),), checkpoint_at=T0 + 350), T0 + 410
    )
    assert [(i.cause, i.at, i.work_lost_s) for i in r.items] == [(Cause.NODE, T0 + 400, 50.0)]


def test_a_restart_without_its_event_is_kept_and_marked_estimated() -> None:
    # The daemon was away: status counts 2 program restarts, no Event left, the gang is Running again.
    r = reconcile(Record("u1"), job(restarts=2, restarts_towards_max=2, all_running_since=T0 + 5000), T0 + 9000)
    assert len(r.items) == 2
    assert all(i.time_estimated and i.cause is Cause.PROGRAM for i in r.items)
    assert r.restarts == 2
    assert r.towards_max == 2


def test_an_event_older_than_the_last_recorded_restart_is_not_reused() -> None:
    r = reconcile(Record("u1"), job(), T0 + 100)
    events = ((PROGRAM_RESTART_REASON, T0 + 400),)
    r = reconcile(r, job(restarts=1, restarts_towards_max=1, restart_events=events), T0 + 410)
    r = reconcile(r, job(restarts=2, restarts_towards_max=2, restart_events=events), T0 + 900)
    assert [i.time_estimated for i in r.items] == [False, True]


def test_evictions_by_reason() -> None:
    wl = WorkloadView(
        "team-a", "w", True, False, None, evictions={"Preempted": 1}, evicted_reason="Preempted", evicted_at=T0 + 300
    )
    r = reconcile(Record("u1"), job(), T0 + 100)
    r = reconcile(r, job(workload=wl, all_running_since=None), T0 + 310)
    (item,) = r.items
    assert item.cause is Cause.PREEMPTION
    assert not item.restart
    assert item.at == T0 + 300
    assert r.evictions == {"Preempted": 1}
    # The same count again adds nothing.
    assert reconcile(r, job(workload=wl, all_running_since=None), T0 + 320).items == r.items


def test_a_recreated_jobset_starts_afresh() -> None:
    r = reconcile(Record("u1", restarts=5, towards_max=5), job(uid="u2", restarts=1, restarts_towards_max=1), T0)
    assert r.uid == "u2"
    assert len(r.items) == 1


def test_the_record_round_trips_and_a_kill_loses_nothing() -> None:
    r = reconcile(Record("u1"), job(), T0 + 100)
    r = reconcile(
        r, job(restarts=1, restarts_towards_max=1, restart_events=((PROGRAM_RESTART_REASON, T0 + 400),)), T0 + 410
    )
    text = render(r, 50)
    again, problem = parse_record(text, "u1")
    assert problem == ""
    assert again == r
    # A new process reads the record and the objects: nothing is added twice, nothing is lost.
    later = reconcile(
        again, job(restarts=1, restarts_towards_max=1, restart_events=((PROGRAM_RESTART_REASON, T0 + 400),)), T0 + 500
    )
    assert len(later.items) == 1


def test_render_is_compact_and_bounded() -> None:
    items = tuple(Interruption(T0 + i, Cause.PROGRAM, True, detail="x" * 200) for i in range(400))
    text = render(Record("u1", restarts=400, towards_max=400, items=items), 50)
    data = json.loads(text)
    assert len(data["items"]) == 50
    assert data["restarts"] == 400
    assert " " not in text[:40]
    big = render(Record("u1", items=items), 400)
    assert len(big) <= MAX_RECORD_BYTES
    assert json.loads(big)["items"][-1]["at"] == T0 + 399


def test_unreadable_or_foreign_records_start_afresh_with_a_problem() -> None:
    assert parse_record("", "u1") == (Record("u1"), "")
    rec, problem = parse_record("{not json", "u1")
    assert rec == Record("u1")
    assert "cannot be read" in problem
    rec, problem = parse_record(json.dumps({"uid": "other"}), "u1")
    assert rec == Record("u1")
    assert "another JobSet" in problem
    rec, problem = parse_record(json.dumps({"uid": "u1", "items": [{"at": "x", "cause": "node"}]}), "u1")
    assert "cannot be read" in problem


def test_a_resume_clears_the_stop_and_restarts_count_from_then() -> None:
    stopped = Record("u1", stopped_at=T0 + 50)
    wl_inactive = WorkloadView("team-a", "w", False, True, T0)
    assert reconcile(stopped, job(workload=wl_inactive), T0 + 60).stopped_at == T0 + 50
    resumed = reconcile(stopped, job(), T0 + 70)
    assert resumed.stopped_at is None
    assert resumed.bound_from == T0 + 70


def test_a_restart_ending_the_attempt_the_stall_detector_recorded_is_a_hang_and_others_stay_the_nodes() -> None:
    r0 = reconcile(Record("u1"), job(), T0 + 100)
    hung = job(restarts=1, stall_restart=(0, T0 + 500), all_running_since=T0 + 560)
    r1 = reconcile(r0, hung, T0 + 600)
    (item,) = r1.items
    assert (item.cause, item.at, item.restart, item.recovered_at) == (Cause.HANG, T0 + 500, True, T0 + 560)
    assert r1.hangs == 1
    assert counts(hung, r1.hangs)[Cause.HANG] == 1
    assert counts(hung, r1.hangs)[Cause.NODE] == 0
    # the next node restart, with the record of the older attempt still on the JobSet, is the node's
    later = replace(hung, restarts=2, all_running_since=None)
    r2 = reconcile(r1, later, T0 + 900)
    assert [i.cause for i in r2.items] == [Cause.HANG, Cause.NODE]
    assert (counts(later, r2.hangs)[Cause.HANG], counts(later, r2.hangs)[Cause.NODE]) == (1, 1)
    # the count survives the annotation, as a kill -9 of the daemon would need
    back, problem = parse_record(render(r2, 50), "u1")
    assert (problem, back.hangs) == ("", 1)


def _node_failures(n: int, at: float) -> WorkloadView:
    """The Workload after ``n`` Kueue evictions for a failed node, the last at ``at``, admitted again."""
    return WorkloadView(
        "team-a", "w", True, True, at + 5, evictions={"NodeFailures": n}, evicted_reason="NodeFailures", evicted_at=at
    )


def test_one_node_failure_that_kueue_evicts_for_and_jobset_restarts_for_is_one_interruption() -> None:
    # Seen on Kueue 0.19.2: the eviction, then JobSet's node restart 0.25 s later, in the same cycle.
    r = reconcile(Record("u1"), job(), T0 + 100)
    failed = job(
        restarts=1,
        restart_events=((NODE_RESTART_REASON, T0 + 400.25),),
        workload=_node_failures(1, T0 + 400),
        checkpoint_at=T0 + 350,
        all_running_since=None,
    )
    r = reconcile(r, failed, T0 + 410)
    (item,) = r.items
    assert (item.cause, item.at, item.restart, item.restarted) == (Cause.NODE, T0 + 400, False, True)
    assert item.work_lost_s == 50.25  # the larger of the two readings
    assert r.paired == 1
    assert counts(failed, r.hangs, r.paired)[Cause.NODE] == 1
    # Unpaired, the counters would say two.
    assert counts(failed)[Cause.NODE] == 2
    # Nothing is added again, and the record round-trips with the pairing.
    assert reconcile(r, failed, T0 + 500).items == r.items
    again, problem = parse_record(render(r, 50), "u1")
    assert problem == ""
    assert again == r


def test_the_two_seen_in_different_cycles_pair_too_and_a_later_failure_stays_its_own() -> None:
    r = reconcile(Record("u1"), job(), T0 + 100)
    # the JobSet's restart first, the Workload's eviction noticed a cycle later
    r = reconcile(r, job(restarts=1, restart_events=((NODE_RESTART_REASON, T0 + 400),)), T0 + 402)
    assert [i.restart for i in r.items] == [True]
    r = reconcile(r, job(restarts=1, workload=_node_failures(1, T0 + 420)), T0 + 425)
    (item,) = r.items
    assert (item.at, item.restarted, r.paired) == (T0 + 400, True, 1)
    # A second node failure half a minute later: its restart may not pair with the eviction already paired.
    events = ((NODE_RESTART_REASON, T0 + 450),)
    r = reconcile(r, job(restarts=2, restart_events=events, workload=_node_failures(1, T0 + 420)), T0 + 455)
    assert [(i.at, i.restart) for i in r.items] == [(T0 + 400, False), (T0 + 450, True)]
    assert counts(job(restarts=2, workload=_node_failures(1, T0 + 420)), r.hangs, r.paired)[Cause.NODE] == 2


def test_an_eviction_and_a_restart_further_apart_than_the_window_are_two() -> None:
    r = reconcile(Record("u1"), job(), T0 + 100)
    r = reconcile(r, job(restarts=1, restart_events=((NODE_RESTART_REASON, T0 + 400),)), T0 + 402)
    r = reconcile(r, job(restarts=1, workload=_node_failures(1, T0 + 400 + SAME_NODE_FAILURE_S + 1)), T0 + 500)
    assert [(i.cause, i.restart, i.restarted) for i in r.items] == [
        (Cause.NODE, True, False),
        (Cause.NODE, False, False),
    ]
    assert r.paired == 0
