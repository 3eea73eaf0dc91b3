"""The fake trainer's bookkeeping: work, checkpoints, and the work an interruption loses."""

from __future__ import annotations

from typing import Any

import pytest

from sim.fake_trainer import COMPUTING_LOAD, HUNG_LOAD, WRITING_LOAD, Progress, gang_attempt, progress_for


def run(p: Progress, start: float, end: float, attempt: str = "job/0", step: float = 0.5) -> None:
    t = start
    while t <= end + 1e-9:
        p.tick(t, attempt)
        t += step


def test_work_pauses_for_each_checkpoint_write_and_finishes_on_time() -> None:
    p = Progress(work_needed=25.0, interval=10.0, write=2.0)
    run(p, 0.0, 40.0)
    # 10 s work, 2 s write, 10 s work, 2 s write, 5 s work: done at 29 s.
    assert p.checkpoints == pytest.approx([12.0, 24.0])
    assert p.done_at == pytest.approx(29.0)
    assert p.started_at == 0.0
    assert p.lost == []


def test_an_interruption_loses_the_work_since_the_last_complete_checkpoint() -> None:
    p = Progress(work_needed=100.0, interval=10.0, write=1.0)
    run(p, 0.0, 15.0)  # checkpoint at 11 s, then 4 s of work
    p.tick(15.5, None)  # seen stopped at 15.5 s: work counts until it was last seen running (15 s)
    assert p.lost == pytest.approx([4.0])
    assert p.saved == pytest.approx(10.0)
    run(p, 20.0, 25.0, attempt="job/1")
    assert p.running_again_at == [20.0]
    assert p.saved + p.since_save == pytest.approx(15.0)


def test_a_write_under_way_is_lost_with_the_work_it_was_saving() -> None:
    p = Progress(work_needed=100.0, interval=10.0, write=4.0)
    run(p, 0.0, 12.0)  # work until 10 s, writing until 14 s
    p.tick(12.5, "job/1")  # a new attempt: the gang restarted
    assert p.saved == 0.0
    assert p.lost == pytest.approx([10.0])


def test_bad_figures_are_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        Progress(work_needed=0.0, interval=1.0, write=0.0)


def _jobset(restarts: int = 0, parallelism: int = 2) -> dict[str, Any]:
    return {
        "metadata": {"name": "job"},
        "spec": {
            "replicatedJobs": [
                {
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "parallelism": parallelism,
                            "template": {
                                "metadata": {"annotations": {"sim.gpucluster.io/work-seconds": "30"}},
                                "spec": {
                                    "containers": [
                                        {
                                            "name": "trainer",
                                            "env": [{"name": "GPUCLUSTER_CHECKPOINT_INTERVAL_SECONDS", "value": "8"}],
                                        }
                                    ]
                                },
                            },
                        }
                    },
                }
            ]
        },
        "status": {"restarts": restarts},
    }


def _pod(attempt: str, phase: str = "Running") -> dict[str, Any]:
    return {"metadata": {"labels": {"jobset.sigs.k8s.io/restart-attempt": attempt}}, "status": {"phase": phase}}


def test_the_gang_runs_only_when_every_pod_of_the_current_attempt_runs() -> None:
    assert gang_attempt(_jobset(), [_pod("0"), _pod("0")]) == "job/0"
    assert gang_attempt(_jobset(), [_pod("0"), _pod("0", "Pending")]) is None
    assert gang_attempt(_jobset(1), [_pod("0"), _pod("1")]) is None


def test_the_job_s_figures_come_from_its_template() -> None:
    logical, p = progress_for(_jobset())
    assert logical == "job"
    assert (p.work_needed, p.interval, p.write) == (30.0, 8.0, 0.0)


def test_the_gpus_show_what_the_program_does_and_a_hang_is_silent() -> None:
    p = Progress(work_needed=100.0, interval=10.0, write=2.0)
    assert p.activity() is None  # not running yet
    run(p, 0.0, 5.0)
    assert p.activity() == COMPUTING_LOAD
    run(p, 5.5, 11.0)  # writing from 10 s to 12 s
    assert p.activity() == WRITING_LOAD
    run(p, 11.5, 15.0)
    p.hang()
    work, checkpoints = p.saved + p.since_save, list(p.checkpoints)
    run(p, 15.5, 60.0)  # 45 s hung: pods Running, nothing advances, no checkpoint
    assert p.activity() == HUNG_LOAD
    assert (p.saved + p.since_save, p.checkpoints) == (pytest.approx(work), checkpoints)
    # the restart clears it: the work since the last checkpoint is lost, and the new attempt computes again
    run(p, 61.0, 70.0, attempt="job/1")
    assert p.lost == pytest.approx([work - 10.0])
    assert (p.hung, p.activity()) == (False, COMPUTING_LOAD)


def test_a_gang_that_is_not_running_cannot_hang() -> None:
    p = Progress(work_needed=100.0, interval=10.0, write=2.0)
    p.hang()
    assert not p.hung
