"""The verifier's texts: a check's short verdict and the record on the claim are read strictly (anything else is no
verdict, never a pass), a record moves ``verified`` only forward, and what is written stays under its limit."""

from __future__ import annotations

import json

import pytest

from contract.checkpoint_record import (
    MAX_RECORD_CHARS,
    CheckVerdict,
    DrillVerdict,
    after_drill,
    next_record,
    read_drill_verdict,
    read_record,
    read_verdict,
    render_record,
)
from contract.checkpoint_verifier_settings import SettingsError, parse_settings

GOOD = CheckVerdict(ok=True, step=300, directory="step-300", problems=(), summary="step 300 verified: 10 bytes")
BAD = CheckVerdict(ok=False, step=400, directory="step-400", problems=("truncated-shard",), summary="refused")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not json",
        "[]",
        '{"ok": "yes", "step": 1, "directory": "d", "problems": [], "summary": ""}',
        '{"ok": true, "step": null, "directory": "d", "problems": [], "summary": ""}',  # a pass names its step
        '{"ok": true, "step": 3, "directory": "d", "problems": ["missing-shard"], "summary": ""}',
        '{"ok": false, "step": -1, "directory": "d", "problems": [], "summary": ""}',
        '{"ok": false, "step": 1, "directory": "d", "problems": [1], "summary": ""}',
    ],
)
def test_a_termination_message_that_is_no_verdict_reads_as_none(text: str) -> None:
    assert read_verdict(text) is None


def test_a_pass_moves_verified_forward_and_a_refusal_keeps_it() -> None:
    first = next_record(None, GOOD, "2027-01-15T08:00:00Z", 1_800_000_100.0)
    assert first.verified is not None
    assert (first.verified.step, first.last.ok) == (300, True)
    refused = next_record(first, BAD, "2027-01-15T08:30:00Z", 1_800_002_000.0)
    assert refused.verified == first.verified
    assert (refused.last.ok, refused.last.step, refused.last.problems) == (False, 400, ("truncated-shard",))
    older = CheckVerdict(ok=True, step=200, directory="step-200", problems=(), summary="")
    assert next_record(refused, older, "2027-01-15T09:00:00Z", 1_800_004_000.0).verified == first.verified


def test_a_record_reads_back_as_written_and_a_long_summary_is_cut_to_fit() -> None:
    record = next_record(None, BAD, "2027-01-15T08:30:00Z", 1_800_002_000.0)
    assert read_record(render_record(record)) == record
    long = next_record(
        None, CheckVerdict(False, 1, "step-1", ("hash-mismatch",), "x" * 10_000), "2027-01-15T08:30:00Z", 0
    )
    text = render_record(long)
    assert len(text) <= MAX_RECORD_CHARS
    back = read_record(text)
    assert back is not None
    assert back.last.summary.endswith("…")


@pytest.mark.parametrize(
    "doc",
    [
        {"verified": {"step": 999}},  # no last check
        {"verified": {"step": 9}, "last": {"ok": True}},
        {
            "verified": "yes",
            "last": {
                "ok": True,
                "directory": "d",
                "reported": "2027-01-15T08:30:00Z",
                "checked": "x",
                "problems": [],
                "summary": "",
            },
        },
        {
            "verified": None,
            "last": {
                "ok": True,
                "directory": "d",
                "reported": "yesterday",
                "checked": "x",
                "problems": [],
                "summary": "",
            },
        },
    ],
)
def test_a_record_the_verifier_did_not_write_reads_as_none(doc: object) -> None:
    assert read_record(json.dumps(doc)) is None


RESTORED = DrillVerdict(True, 300, "step-300", 1 << 30, 41.5, (), "restored 8 records")
NOT_RESTORED = DrillVerdict(False, 300, "step-300", 4096, 0.2, ("corrupt-item",), "Bad CRC-32")


def test_a_good_drill_moves_last_good_and_a_failed_one_keeps_it_and_a_check_keeps_the_drill() -> None:
    record = next_record(None, GOOD, "2027-01-15T08:00:00Z", 1_800_000_100.0)
    assert record.drill is None
    drilled = after_drill(record, RESTORED, "restore-drill-a-0", 1_800_000_200.0)
    assert drilled.drill is not None
    assert (drilled.drill.ok, drilled.drill.last_good) == (True, drilled.drill.finished)
    failed = after_drill(drilled, NOT_RESTORED, "restore-drill-b-0", 1_800_090_000.0)
    assert failed.drill is not None
    assert (failed.drill.ok, failed.drill.job, failed.drill.last_good) == (
        False,
        "restore-drill-b-0",
        drilled.drill.finished,
    )
    assert failed.verified == record.verified  # a drill never moves what a restart resumes from
    checked = next_record(failed, BAD, "2027-01-15T09:00:00Z", 1_800_090_100.0)
    assert checked.drill == failed.drill
    assert read_record(render_record(failed)) == failed


def test_a_record_with_two_long_summaries_is_cut_to_fit() -> None:
    record = next_record(None, CheckVerdict(False, 1, "step-1", ("x",), "c" * 3000), "2027-01-15T08:30:00Z", 0)
    record = after_drill(record, DrillVerdict(False, 1, "step-1", 0, 1.0, ("corrupt-item",), "d" * 2048), "j-0", 9.0)
    text = render_record(record)
    assert len(text) <= MAX_RECORD_CHARS
    back = read_record(text)
    assert back is not None
    assert back.drill is not None
    assert back.drill.problems == ("corrupt-item",)


@pytest.mark.parametrize(
    "text",
    [
        "",
        '{"ok": true, "step": 1, "directory": "d", "bytes": 1, "seconds": 1, "problems": ["x"], "summary": ""}',
        '{"ok": true, "step": 1, "directory": "d", "bytes": -1, "seconds": 1, "problems": [], "summary": ""}',
        '{"ok": true, "step": 1, "directory": "d", "bytes": 1, "problems": [], "summary": ""}',  # no seconds
        '{"ok": false, "step": 1, "directory": "d", "bytes": 1, "seconds": true, "problems": [], "summary": ""}',
    ],
)
def test_a_termination_message_that_is_no_drill_verdict_reads_as_none(text: str) -> None:
    assert read_drill_verdict(text) is None


def test_a_record_whose_drill_does_not_read_is_not_read() -> None:
    record = after_drill(next_record(None, GOOD, "2027-01-15T08:00:00Z", 0), RESTORED, "j-0", 5.0)
    doc = json.loads(render_record(record))
    doc["drill"]["lastGood"] = "last tuesday"
    assert read_record(json.dumps(doc)) is None


def test_drills_must_come_before_their_stale_alert_and_end_before_the_next_is_due() -> None:
    assert parse_settings({"restoreDrill": {"every": "6h", "staleAfter": "12h", "deadline": "1h"}})
    with pytest.raises(SettingsError) as err:
        parse_settings({"restoreDrill": {"every": "12h", "staleAfter": "12h"}})
    assert "restoreDrill.every" in str(err.value)
    with pytest.raises(SettingsError) as err:
        parse_settings({"restoreDrill": {"every": "1h", "deadline": "1h"}})
    assert "restoreDrill.deadline" in str(err.value)
