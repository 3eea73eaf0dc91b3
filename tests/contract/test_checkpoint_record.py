"""The verifier's texts: a check's short verdict and the record on the claim are read strictly (anything else is no
verdict, never a pass), a record moves ``verified`` only forward, and what is written stays under its limit."""

from __future__ import annotations

import json

import pytest

from contract.checkpoint_record import (
    MAX_RECORD_CHARS,
    CheckVerdict,
    next_record,
    read_record,
    read_verdict,
    render_record,
)

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
