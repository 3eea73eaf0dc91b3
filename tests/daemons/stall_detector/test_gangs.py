"""Reading a gang from API JSON: its current attempt's pods, since when all run, its GPUs, the progress report
(each field with one that reads and one refused), the restart record and a job's own stallAfter; and the suspects'
memory text."""

from __future__ import annotations

import json
from typing import Any

import pytest

from contract.constants import PROGRESS_ANNOTATION_PREFIX, STALL_AFTER_ANNOTATION, STALL_RESTART_ANNOTATION
from daemons.stall_detector import memory
from daemons.stall_detector.gangs import gang_view, parse_progress, parse_restart
from tests.daemons.stall_detector.fakes import START, FakeApi, rfc3339


def one_gang(attempt: int = 0) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    api = FakeApi()
    api.add_gang("team-a", "llm", ["n0", "n1"], started=START - 100, attempt=attempt)
    api.add_pod("team-a", "llm", 0, "n0", started=START - 5000, gpus=8, attempt=attempt - 1)  # an older attempt's
    return api.jobsets[("team-a", "llm")], list(api.pods.values())


def test_the_current_attempts_pods_make_the_gang() -> None:
    js, pods = one_gang(attempt=2)
    view = gang_view(js, pods, {})
    assert (view.attempt, view.gang.nodes, view.gang.gpus, view.gang.running_since) == (
        2,
        ("n0", "n1"),
        16,
        START - 100,
    )
    assert len(view.all_pods) == 3
    assert (view.progress, view.restart, view.problems) == (None, None, ())


def test_a_gang_not_all_running_has_no_running_since() -> None:
    js, pods = one_gang()
    pods[1]["status"]["phase"] = "Pending"
    assert gang_view(js, pods, {}).gang.running_since is None


def test_a_progress_report_reads_with_its_phase_and_since() -> None:
    text = json.dumps({"step": 7, "phase": "eval", "at": rfc3339(START - 60), "phaseSince": rfc3339(START - 30)})
    js, pods = one_gang()
    view = gang_view(js, pods, {f"{PROGRESS_ANNOTATION_PREFIX}llm": text})
    assert view.progress is not None
    assert (view.progress.step, view.progress.phase, view.progress.advanced_at, view.progress.phase_since) == (
        7,
        "eval",
        START - 60,
        START - 30,
    )


@pytest.mark.parametrize(
    ("doc", "problem"),
    [
        ('{"step": 1', "not JSON"),
        ("[1]", "not a JSON object"),
        ('{"step": -1, "at": "2026-12-03T10:00:00Z"}', "step"),
        ('{"step": true, "at": "2026-12-03T10:00:00Z"}', "step"),
        ('{"step": 1, "phase": "lunch", "at": "2026-12-03T10:00:00Z"}', "phase must be one of"),
        ('{"step": 1}', "at must be"),
        ('{"step": 1, "at": "2026-12-03T10:00:00Z", "phaseSince": "soon"}', "phaseSince"),
        ('{"step": 1, "at": "' + "x" * 5000 + '"}', "longer than"),
    ],
)
def test_a_bad_progress_report_is_refused_naming_the_field(doc: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_progress(doc)
    js, pods = one_gang()
    view = gang_view(js, pods, {f"{PROGRESS_ANNOTATION_PREFIX}llm": doc})
    assert view.progress is None
    assert problem.split(maxsplit=1)[0] in view.problems[0]


@pytest.mark.parametrize(
    ("doc", "problem"),
    [
        ('{"attempt": 1', "not JSON"),
        ('"restarted"', "not a JSON object"),
        ('{"attempt": -1, "at": 1.0}', "attempt must be"),
        ('{"attempt": 1, "at": "noon"}', "at must be"),
        ('{"attempt": 1, "at": 1.0, "evidence": "' + "x" * 5000 + '"}', "longer than"),
    ],
)
def test_a_bad_restart_record_is_refused_naming_the_field(doc: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_restart(doc)


def test_a_restart_record_reads_back() -> None:
    record = parse_restart('{"attempt": 2, "at": 1800000000, "evidence": "idle", "suspects": {"n1": ["xid"]}}')
    assert (record.attempt, record.at, record.evidence, record.suspects) == (2, 1.8e9, "idle", {"n1": ("xid",)})


def test_the_restart_record_and_the_jobs_own_stall_after() -> None:
    js, pods = one_gang()
    js["metadata"]["annotations"] = {
        STALL_RESTART_ANNOTATION: '{"attempt": 0, "at": 5, "evidence": "idle", "suspects": {"n1": ["xid"]}}',
        STALL_AFTER_ANNOTATION: "900",
    }
    view = gang_view(js, pods, {})
    assert view.restart is not None
    assert (view.restart.attempt, view.restart.suspects, view.gang.stall_after_s) == (0, {"n1": ("xid",)}, 900)
    js["metadata"]["annotations"] = {STALL_RESTART_ANNOTATION: '{"attempt": "x"}', STALL_AFTER_ANNOTATION: "-1"}
    view = gang_view(js, pods, {})
    assert (view.restart, view.gang.stall_after_s) == (None, None)
    assert len(view.problems) == 2


def test_a_jobset_without_a_name_is_named_as_unreadable() -> None:
    with pytest.raises(ValueError, match=r"no metadata\.name"):
        gang_view({"metadata": {}}, [], {})


def test_the_memory_keeps_one_offence_per_attempt_drops_old_ones_and_survives_garbage() -> None:
    named = memory.add({}, "n1", memory.Offence(100.0, "a/llm#0", ("straggler",)), 100.0, 1000.0)
    assert named is not None
    assert memory.add(named, "n1", memory.Offence(150.0, "a/llm#0", ("straggler",)), 150.0, 1000.0) is None
    later = memory.add(named, "n1", memory.Offence(1200.0, "a/llm#1", ("xid",)), 1200.0, 1000.0)
    assert later == {"n1": [memory.Offence(1200.0, "a/llm#1", ("xid",))]}
    assert memory.parse(memory.render(later)) == later
    assert memory.parse("{not json") == {}
    assert memory.parse('{"n1": [["x", 1, 2]], "n2": "no"}') == {}
