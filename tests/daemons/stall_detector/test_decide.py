"""The stall verdict: each threshold with a case that fires and one that stays quiet, and fail-static inputs."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from daemons.stall_detector.decide import Gang, Judgement, Policy, Progress, Readings, Verdict, judge

NOW = 1_800_000_000.0
POLICY = Policy(stall_after_s=300, startup_grace_s=600, quiet_max_s=1800, tensor_floor=0.05, fabric_floor=1e6)
GANG = Gang("team-a", "llm", nodes=("n0", "n1"), gpus=4, running_since=NOW - 3600)
GPUS = [("llm-node-0-0", "0"), ("llm-node-0-0", "1"), ("llm-node-1-0", "0"), ("llm-node-1-0", "1")]


def readings(tensor: float = 0.01, fabric: float = 1e3, **kw: Any) -> Readings:
    return Readings(dict.fromkeys(GPUS, tensor), {"n0": fabric, "n1": fabric}, **kw)


def verdict(r: Readings, gang: Gang = GANG, now: float = NOW, policy: Policy = POLICY) -> Verdict:
    return judge(gang, r, now, policy).verdict


def test_a_gang_silent_on_every_count_is_stalled_and_the_evidence_says_why() -> None:
    j = judge(GANG, readings(progress=Progress(1200, advanced_at=NOW - 900)), NOW, POLICY)
    assert j == Judgement(
        Verdict.STALLED,
        "stalled for 300s: all 4 GPUs below tensor activity 0.05 (highest 0.010), every node below 976.6 KiB/s over "
        "the fabric (highest 1000 B/s on n1) and below 1.0 MiB/s written to its filesystems, its last step (1200) "
        "900s ago",
    )


def test_one_gpu_at_the_tensor_floor_is_busy_and_one_below_is_not() -> None:
    def one_gpu_at(value: float) -> Readings:
        return replace(readings(), tensor_active={**dict.fromkeys(GPUS, 0.01), GPUS[2]: value})

    assert verdict(one_gpu_at(0.05)) is Verdict.BUSY
    assert verdict(one_gpu_at(0.049)) is Verdict.STALLED


def test_one_node_at_the_fabric_floor_is_busy_and_one_below_is_not() -> None:
    assert verdict(replace(readings(), fabric_bytes_per_s={"n0": 1e3, "n1": 1e6})) is Verdict.BUSY
    assert verdict(replace(readings(), fabric_bytes_per_s={"n0": 1e3, "n1": 999_999})) is Verdict.STALLED


def test_a_node_writing_a_checkpoint_at_the_storage_floor_is_busy_and_one_below_is_not() -> None:
    """A job that reports only its checkpoints, writing one for longer than stallAfter (GPUs idle, fabric quiet):
    its filesystem writes are work. A write crawling below the floor (a hung client) is still a stall."""
    writing = judge(GANG, replace(readings(), storage_write_bytes_per_s={"n1": 1024.0 * 1024.0}), NOW, POLICY)
    assert writing == Judgement(Verdict.BUSY, "n1 writes 1.0 MiB/s to its filesystems (a checkpoint)")
    crawling = replace(readings(), storage_write_bytes_per_s={"n0": 4096.0, "n1": 1024.0 * 1024.0 - 1})
    assert verdict(crawling) is Verdict.STALLED
    # A node outside the gang writing is another job's checkpoint.
    assert verdict(replace(readings(), storage_write_bytes_per_s={"n9": 1e9})) is Verdict.STALLED


def test_a_step_within_stall_after_is_progress_and_one_just_outside_is_not() -> None:
    assert verdict(readings(progress=Progress(7, advanced_at=NOW - 299))) is Verdict.PROGRESSING
    assert verdict(readings(progress=Progress(7, advanced_at=NOW - 300))) is Verdict.STALLED


def test_the_job_may_set_its_own_stall_after() -> None:
    patient = replace(GANG, stall_after_s=1200)
    assert verdict(readings(progress=Progress(7, advanced_at=NOW - 900)), gang=patient) is Verdict.PROGRESSING
    assert verdict(readings(progress=Progress(7, advanced_at=NOW - 1200)), gang=patient) is Verdict.STALLED


def test_the_startup_grace_and_a_gang_younger_than_stall_after_are_never_stalled() -> None:
    assert verdict(readings(), gang=replace(GANG, running_since=NOW - 599)) is Verdict.STARTING
    assert verdict(readings(), gang=replace(GANG, running_since=NOW - 600)) is Verdict.STALLED
    long_grace = replace(POLICY, startup_grace_s=60)
    assert verdict(readings(), gang=replace(GANG, running_since=NOW - 299), policy=long_grace) is Verdict.STARTING
    assert verdict(readings(), gang=replace(GANG, running_since=NOW - 300), policy=long_grace) is Verdict.STALLED


@pytest.mark.parametrize("phase", ["checkpoint", "eval", "data"])
def test_a_declared_quiet_phase_holds_until_quiet_max(phase: str) -> None:
    quiet = Progress(7, advanced_at=NOW - 1700, phase=phase, phase_since=NOW - 1799)
    assert verdict(readings(progress=quiet)) is Verdict.QUIET
    assert verdict(readings(progress=replace(quiet, phase_since=NOW - 1800))) is Verdict.STALLED


def test_an_unknown_phase_is_judged_like_training() -> None:
    assert verdict(readings(progress=Progress(7, NOW - 900, phase="lunch", phase_since=NOW - 10))) is Verdict.STALLED


def test_a_gang_that_is_not_all_running_is_not_judged() -> None:
    assert verdict(readings(), gang=replace(GANG, running_since=None)) is Verdict.NOT_RUNNING


def test_missing_inputs_are_fail_static() -> None:
    r = readings()
    assert verdict(replace(r, tensor_active=None)) is Verdict.UNKNOWN
    assert verdict(replace(r, fabric_bytes_per_s=None)) is Verdict.UNKNOWN
    assert verdict(replace(r, storage_write_bytes_per_s=None)) is Verdict.UNKNOWN  # the query failed
    one_gpu_short = dict.fromkeys(GPUS[:3], 0.01)
    j = judge(GANG, replace(r, tensor_active=one_gpu_short), NOW, POLICY)
    assert j == Judgement(Verdict.UNKNOWN, "tensor activity for 3 of the gang's 4 GPUs: nothing is judged")
    j = judge(GANG, replace(r, fabric_bytes_per_s={"n0": 0.0}), NOW, POLICY)
    assert j == Judgement(Verdict.UNKNOWN, "no fabric reading for n1: nothing is judged")


@pytest.mark.parametrize(
    "change",
    [
        {"stall_after_s": 0},
        {"startup_grace_s": -1},
        {"quiet_max_s": 0},
        {"tensor_floor": 0},
        {"tensor_floor": 1},
        {"fabric_floor": -1},
        {"storage_floor": -1},
    ],
)
def test_a_policy_out_of_range_is_refused(change: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=next(iter(change))):
        replace(POLICY, **change)
