"""Parsers and verdict for the storage_acceptance role.

The mount comes from /proc/mounts (``device mountpoint fstype options dump pass``, with space, tab,
newline and backslash in a field written as the octal escapes ``\\040 \\011 \\012 \\134``, proc(5)); throughput
from ``fio --output-format=json`` direct-I/O jobs: ``jobs[].<dir>.bw_bytes`` in B/s where fio writes it (3.x),
else ``jobs[].<dir>.bw`` in KiB/s (the only figure fio 2.x gives).
"""

from __future__ import annotations

import base64
import json
import math
import re
from typing import Any

_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")


def unescape_mount_field(field: str) -> str:
    """Undo the kernel's octal escaping of a /proc/mounts field (``\\011`` is a tab, ``\\134`` a backslash)."""
    return _OCTAL_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse_mounts(content: str) -> list[dict[str, Any]]:
    mounts = []
    for lineno, line in enumerate((content or "").splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split()
        if len(fields) < 4:
            raise ValueError(f"mounts line {lineno} has {len(fields)} fields: {line!r}")
        mounts.append(
            {
                "device": unescape_mount_field(fields[0]),
                "mountpoint": unescape_mount_field(fields[1]),
                "fstype": fields[2],
                "options": fields[3].split(","),
            }
        )
    return mounts


def _job_bandwidth(job: dict[str, Any], direction: str, where: str) -> float:
    """One job's bandwidth for ``direction`` in B/s: ``bw_bytes`` (fio 3.x), else ``bw`` KiB/s (fio 2.x)."""
    side = job.get(direction)
    if side is None:
        return 0.0
    if not isinstance(side, dict):
        raise ValueError(f"{where} > {direction} is {type(side).__name__}, not an object")
    for key, scale in (("bw_bytes", 1.0), ("bw", 1024.0)):
        if key in side:
            value = side[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{where} > {direction} > {key} is {value!r}, not a bandwidth")
            return float(value) * scale
    return 0.0


def fio_bandwidth(stdout: str, direction: str) -> float:
    """Sum over all jobs of the ``direction`` ("read"/"write") bandwidth, in bytes/s.

    fio may print notes before its JSON document; parsing starts at the first brace.
    """
    text = stdout or ""
    start = text.find("{")
    if start < 0:
        raise ValueError("fio printed no JSON document")
    try:
        doc = json.loads(text[start:])
    except json.JSONDecodeError as exc:
        raise ValueError(f"fio output is not valid JSON: {exc}") from exc
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    if not jobs or not isinstance(jobs, list):
        raise ValueError("fio JSON has no jobs")
    total = 0.0
    for index, job in enumerate(jobs):
        where = f"jobs[{index}]"
        if not isinstance(job, dict):
            raise ValueError(f"{where} is {type(job).__name__}, not an object")
        if job.get("error", 0):
            raise ValueError(f"fio job {job.get('jobname')} reported error {job['error']}")
        total += _job_bandwidth(job, direction, where)
    if total <= 0:
        raise ValueError(f"fio reported no {direction} bandwidth")
    return total


def checkpoint_plan(per_node_bps: float, writers: int, checkpoint_bytes: float, mtbf_s: float) -> dict[str, float]:
    """Young's interval sqrt(2 * C * MTBF), C = full-checkpoint write time at the aggregate speed."""
    aggregate = per_node_bps * writers
    write_time = checkpoint_bytes / aggregate
    return {
        "aggregate_write_gbs": round(aggregate / 1e9, 3),
        "checkpoint_write_s": round(write_time, 2),
        "recommended_interval_s": round(math.sqrt(2.0 * write_time * mtbf_s), 1),
    }


def storage_verdict(
    mounts: dict[str, Any],
    write: dict[str, Any],
    read: dict[str, Any],
    mountpoint: str,
    fstype: str,
    required_options: list[str],
    checkpoint_bytes: float,
    checkpoint_target_s: float,
    writers: int,
    mtbf_s: float,
) -> dict[str, Any]:
    """Mount present with type and options; direct-I/O write and read above the per-node floor."""
    floor = checkpoint_bytes / checkpoint_target_s / writers
    details: dict[str, Any] = {
        "mountpoint": mountpoint,
        "floor_gbs": round(floor / 1e9, 3),
        "writers": writers,
        "checkpoint_bytes": checkpoint_bytes,
        "checkpoint_target_s": checkpoint_target_s,
    }
    reasons: list[str] = []
    if mounts.get("failed") or "content" not in mounts:
        reasons.append(f"cannot read mounts file: {mounts.get('msg', 'no content')}")
        entries: list[dict[str, Any]] = []
    else:
        try:
            entries = parse_mounts(base64.b64decode(mounts["content"]).decode())
        except ValueError as exc:
            entries = []
            reasons.append(f"mounts file: {exc}")
    matches = [m for m in entries if m["mountpoint"] == mountpoint]
    if not reasons and not matches:
        reasons.append(f"{mountpoint} is not mounted")
    if matches:
        entry = matches[-1]  # the last mount on a path is the visible one
        details["mount"] = entry
        if entry["fstype"] != fstype:
            reasons.append(f"{mountpoint} is {entry['fstype']}, expected {fstype}")
        missing = [o for o in required_options if o not in entry["options"]]
        if missing:
            reasons.append(f"{mountpoint} lacks mount option(s) {', '.join(missing)}")
    if write.get("skipped"):
        if not reasons:
            return {"status": "skipped", "reasons": ["not run (check mode)"], "details": details}
    else:
        measured: dict[str, float] = {}
        for direction, res in (("write", write), ("read", read)):
            if res.get("rc", 0) != 0:
                err = (res.get("stderr") or res.get("msg") or "").strip()
                reasons.append(f"fio direct {direction} on {mountpoint} exited rc={res.get('rc')}: {err}")
                continue
            try:
                bps = fio_bandwidth(res.get("stdout", ""), direction)
            except ValueError as exc:
                reasons.append(f"fio direct {direction} on {mountpoint}: {exc}")
                continue
            measured[direction] = bps
            details[f"{direction}_gbs"] = round(bps / 1e9, 3)
            if bps < floor:
                reasons.append(
                    f"direct {direction} on {mountpoint}: {bps / 1e9:.3f} GB/s, below the per-node floor "
                    f"{floor / 1e9:.3f} GB/s (1 checkpoint of {checkpoint_bytes / 1e12:g} TB in "
                    f"{checkpoint_target_s:g} s across {writers} writers)"
                )
        if "write" in measured:
            details["checkpoint"] = checkpoint_plan(measured["write"], writers, checkpoint_bytes, mtbf_s)
    return {"status": "fail" if reasons else "pass", "reasons": reasons, "details": details}


class FilterModule:
    """storage_acceptance filters."""

    def filters(self) -> dict[str, Any]:
        return {"storage_verdict": storage_verdict}
