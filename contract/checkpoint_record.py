"""The checkpoint verifier's texts: a check's short verdict (the pod's termination message, written by
``daemons.checkpoint_verifier.check.termination_message``) and its record on the claim
(``verified.checkpoint.gpucluster.io/<job>``), which the verifier writes and the interruption accounting reads.

The record, one JSON object per job::

    {"verified": {"step": 1200, "directory": "step-1200", "reported": "<RFC 3339>", "checked": "<RFC 3339>"},
     "last": {"ok": false, "step": 1500, "directory": "step-1500", "reported": "<RFC 3339>",
              "checked": "<RFC 3339>", "problems": ["truncated-shard"], "summary": "..."}}

``verified`` is the newest checkpoint that passed (null until one has): what a restart resumes from and what the
accounting counts. ``last`` is the last check, passed or not: what the alert and ``kubectl describe`` read. Pure:
every function here takes text and gives values, or None for text it cannot read (the caller counts it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from contract.times import rfc3339, unix_seconds

#: The longest record the verifier writes (an annotation's whole map is capped at 256 KiB).
MAX_RECORD_CHARS = 4096


@dataclass(frozen=True)
class CheckVerdict:
    """What one check said (its termination message)."""

    ok: bool
    step: int | None
    directory: str
    problems: tuple[str, ...]
    summary: str


@dataclass(frozen=True)
class Verified:
    step: int
    directory: str
    #: The report's time (when the job said the checkpoint was complete), as written.
    reported: str
    checked: str


@dataclass(frozen=True)
class LastCheck:
    ok: bool
    step: int | None
    directory: str
    reported: str
    checked: str
    problems: tuple[str, ...]
    summary: str


@dataclass(frozen=True)
class Record:
    verified: Verified | None
    last: LastCheck

    @property
    def last_reported(self) -> float | None:
        return unix_seconds(self.last.reported)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _str(value: Any, limit: int = 2048) -> str | None:
    return value[:limit] if isinstance(value, str) else None


def _strings(value: Any) -> tuple[str, ...] | None:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return None
    return tuple(v[:64] for v in value[:16])


def read_verdict(text: str) -> CheckVerdict | None:
    """A check's termination message; None when it is not one (empty, cut, or written by anything else)."""
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("ok"), bool):
        return None
    step = doc.get("step")
    directory, summary = _str(doc.get("directory"), 253), _str(doc.get("summary"))
    problems = _strings(doc.get("problems"))
    if (step is not None and _int(step) is None) or directory is None or summary is None or problems is None:
        return None
    if doc["ok"] and (step is None or problems):
        return None
    return CheckVerdict(ok=doc["ok"], step=_int(step), directory=directory, problems=problems, summary=summary)


def read_record(text: str) -> Record | None:
    """The record on the claim; None when it cannot be read (the verifier then writes a new one)."""
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("last"), dict):
        return None
    last, good = doc["last"], doc.get("verified")
    directory, reported, checked = (
        _str(last.get("directory"), 253),
        _str(last.get("reported"), 64),
        _str(last.get("checked"), 64),
    )
    problems, summary = _strings(last.get("problems")), _str(last.get("summary"), MAX_RECORD_CHARS)
    if not isinstance(last.get("ok"), bool) or problems is None or summary is None:
        return None
    if directory is None or reported is None or checked is None or unix_seconds(reported) is None:
        return None
    step = last.get("step")
    if step is not None and _int(step) is None:
        return None
    verified: Verified | None = None
    if good is not None:
        if not isinstance(good, dict):
            return None
        g_step, g_dir = _int(good.get("step")), _str(good.get("directory"), 253)
        g_reported, g_checked = _str(good.get("reported"), 64), _str(good.get("checked"), 64)
        if g_step is None or g_dir is None or g_reported is None or g_checked is None:
            return None
        if unix_seconds(g_reported) is None:
            return None
        verified = Verified(step=g_step, directory=g_dir, reported=g_reported, checked=g_checked)
    return Record(
        verified=verified,
        last=LastCheck(
            ok=last["ok"],
            step=_int(step),
            directory=directory,
            reported=reported,
            checked=checked,
            problems=problems,
            summary=summary,
        ),
    )


def next_record(previous: Record | None, verdict: CheckVerdict, reported: str, now: float) -> Record:
    """The record after ``verdict`` on the checkpoint reported at ``reported``: a pass moves ``verified`` on (never
    back: the check refuses a step not newer than the last verified), a refusal keeps it."""
    checked = rfc3339(now)
    verified = previous.verified if previous is not None else None
    if verdict.ok and verdict.step is not None and (verified is None or verdict.step > verified.step):
        verified = Verified(step=verdict.step, directory=verdict.directory, reported=reported, checked=checked)
    last = LastCheck(
        ok=verdict.ok,
        step=verdict.step,
        directory=verdict.directory,
        reported=reported,
        checked=checked,
        problems=verdict.problems,
        summary=verdict.summary,
    )
    return Record(verified=verified, last=last)


def render_record(record: Record) -> str:
    """The annotation's value: compact JSON under :data:`MAX_RECORD_CHARS` (the summary is cut to fit)."""

    def doc(summary: str) -> dict[str, object]:
        v = record.verified
        return {
            "verified": None
            if v is None
            else {"step": v.step, "directory": v.directory, "reported": v.reported, "checked": v.checked},
            "last": {
                "ok": record.last.ok,
                "step": record.last.step,
                "directory": record.last.directory,
                "reported": record.last.reported,
                "checked": record.last.checked,
                "problems": list(record.last.problems),
                "summary": summary,
            },
        }

    summary = record.last.summary
    text = json.dumps(doc(summary), separators=(",", ":"), ensure_ascii=False)
    while len(text) > MAX_RECORD_CHARS and summary:
        summary = summary[: max(0, len(summary) - (len(text) - MAX_RECORD_CHARS) - 1)]
        text = json.dumps(doc(summary + "…"), separators=(",", ":"), ensure_ascii=False)
    return text
