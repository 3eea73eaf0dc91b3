"""The checkpoint verifier's texts: a check's short verdict (the pod's termination message, written by
``daemons.checkpoint_verifier.check.termination_message``) and its record on the claim
(``verified.checkpoint.gpucluster.io/<job>``), which the verifier writes and the interruption accounting reads.

The record, one JSON object per job::

    {"verified": {"step": 1200, "directory": "step-1200", "reported": "<RFC 3339>", "checked": "<RFC 3339>"},
     "last": {"ok": false, "step": 1500, "directory": "step-1500", "reported": "<RFC 3339>",
              "checked": "<RFC 3339>", "problems": ["truncated-shard"], "summary": "..."}}

``verified`` is the newest checkpoint that passed (null until one has): what a restart resumes from and what the
accounting counts. ``last`` is the last check, passed or not: what the alert and ``kubectl describe`` read.
``drill``, once a restore drill has run (absent before), is the last drill of the verified checkpoint::

    "drill": {"ok": true, "step": 1200, "directory": "step-1200", "job": "restore-drill-…-0",
              "finished": "<RFC 3339>", "seconds": 41.2, "bytes": 1073741824, "problems": [], "summary": "...",
              "lastGood": "<RFC 3339>"}

``lastGood`` is when the last drill that restored its checkpoint whole was recorded (null until one has): what the
``CheckpointRestoreDrillStale`` alert ages. Pure:
every function here takes text and gives values, or None for text it cannot read (the caller counts it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from contract.checkpoints import CHECKPOINTS_MOUNT
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
class DrillVerdict:
    """What one restore drill said (its termination message)."""

    ok: bool
    step: int | None
    directory: str
    #: Bytes read and how long the load took.
    bytes_read: int
    seconds: float
    problems: tuple[str, ...]
    summary: str


@dataclass(frozen=True)
class Drill:
    """The last restore drill of a job's verified checkpoint, as recorded."""

    ok: bool
    step: int | None
    directory: str
    #: The drill Job whose verdict this is (a finished drill Job of another name is one not yet recorded).
    job: str
    #: When it was recorded (RFC 3339).
    finished: str
    seconds: float
    bytes_read: int
    problems: tuple[str, ...]
    summary: str
    #: When the last drill that restored its checkpoint whole was recorded; None until one has.
    last_good: str | None


@dataclass(frozen=True)
class Record:
    verified: Verified | None
    last: LastCheck
    drill: Drill | None = None

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


def _seconds(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < 1e9
    return float(value) if ok else None


def read_drill_verdict(text: str) -> DrillVerdict | None:
    """A drill's termination message; None when it is not one."""
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("ok"), bool):
        return None
    step, read, seconds = doc.get("step"), _int(doc.get("bytes")), _seconds(doc.get("seconds"))
    directory, summary = _str(doc.get("directory"), 253), _str(doc.get("summary"))
    problems = _strings(doc.get("problems"))
    if (step is not None and _int(step) is None) or directory is None or summary is None or problems is None:
        return None
    if read is None or seconds is None or (doc["ok"] and problems):
        return None
    return DrillVerdict(doc["ok"], _int(step), directory, read, seconds, problems, summary)


def _read_drill(doc: Any) -> Drill | None:
    """The record's ``drill``; None when it does not read (the record is then not read at all)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("ok"), bool):
        return None
    step, read, seconds = doc.get("step"), _int(doc.get("bytes")), _seconds(doc.get("seconds"))
    directory, job, finished = _str(doc.get("directory"), 253), _str(doc.get("job"), 63), _str(doc.get("finished"), 64)
    problems, summary, last_good = _strings(doc.get("problems")), _str(doc.get("summary")), doc.get("lastGood")
    if (step is not None and _int(step) is None) or read is None or seconds is None or problems is None:
        return None
    if directory is None or job is None or finished is None or summary is None or unix_seconds(finished) is None:
        return None
    if last_good is not None and (not isinstance(last_good, str) or unix_seconds(last_good) is None):
        return None
    return Drill(doc["ok"], _int(step), directory, job, finished, seconds, read, problems, summary, last_good)


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
    drill: Drill | None = None
    if doc.get("drill") is not None:
        drill = _read_drill(doc["drill"])
        if drill is None:
            return None
    return Record(
        verified=verified,
        drill=drill,
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
    return Record(verified=verified, last=last, drill=previous.drill if previous is not None else None)


def after_drill(previous: Record, verdict: DrillVerdict, job: str, now: float) -> Record:
    """The record after the drill Job ``job`` said ``verdict``: ``lastGood`` moves on when it restored whole."""
    finished = rfc3339(now)
    last_good = previous.drill.last_good if previous.drill is not None else None
    drill = Drill(
        ok=verdict.ok,
        step=verdict.step,
        directory=verdict.directory,
        job=job,
        finished=finished,
        seconds=verdict.seconds,
        bytes_read=verdict.bytes_read,
        problems=verdict.problems,
        summary=verdict.summary,
        last_good=finished if verdict.ok else last_good,
    )
    return Record(verified=previous.verified, last=previous.last, drill=drill)


def render_record(record: Record) -> str:
    """The annotation's value: compact JSON under :data:`MAX_RECORD_CHARS` (the summary is cut to fit)."""

    def doc(summary: str, drill_summary: str) -> dict[str, object]:
        v, d = record.verified, record.drill
        drill: dict[str, object] = {}
        if d is not None:
            drill["drill"] = {
                "ok": d.ok,
                "step": d.step,
                "directory": d.directory,
                "job": d.job,
                "finished": d.finished,
                "seconds": round(d.seconds, 3),
                "bytes": d.bytes_read,
                "problems": list(d.problems),
                "summary": drill_summary,
                "lastGood": d.last_good,
            }
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
            **drill,
        }

    def text(summary: str, drill_summary: str) -> str:
        return json.dumps(doc(summary, drill_summary), separators=(",", ":"), ensure_ascii=False)

    # Each summary gets at most half the room it would need beyond the rest; the check's is cut first.
    summary, drill_summary = record.last.summary, record.drill.summary if record.drill is not None else ""
    rendered = text(summary, drill_summary)
    for which in ("check", "drill"):
        over = len(rendered) - MAX_RECORD_CHARS
        if over <= 0:
            break
        if which == "check" and summary:
            keep = max(0, len(summary) - over - 1)
            summary = summary[:keep] + "…" if keep < len(summary) else summary
        elif which == "drill" and drill_summary:
            keep = max(0, len(drill_summary) - over - 1)
            drill_summary = drill_summary[:keep] + "…" if keep < len(drill_summary) else drill_summary
        rendered = text(summary, drill_summary)
    return rendered


def resume_key(job: str) -> str:
    """The job's key in the team's ``checkpoint-resume`` ConfigMap."""
    return f"{job}.json"


def resume_entry(job: str, verified: Verified) -> str:
    """What a restart of ``job`` reads from its ``GPUCLUSTER_RESUME_FILE``: its latest verified checkpoint."""
    return json.dumps(
        {
            "job": job,
            "step": verified.step,
            "directory": f"{CHECKPOINTS_MOUNT}/{job}/{verified.directory}",
            "reported": verified.reported,
            "checked": verified.checked,
        },
        separators=(",", ":"),
    )
