"""Parsers and verdicts for the storage_acceptance role.

The mount comes from /proc/mounts (``device mountpoint fstype options dump pass``, with space, tab,
newline and backslash in a field written as the octal escapes ``\\040 \\011 \\012 \\134``, proc(5)); throughput
from ``fio --output-format=json`` direct-I/O jobs: ``jobs[].<dir>.bw_bytes`` in B/s where fio writes it (3.x),
else ``jobs[].<dir>.bw`` in KiB/s (the only figure fio 2.x gives). Every host writing at once comes from fio's
client/server mode (``fio --client=<host>,<port> ... --output-format=json``): ``client_stats[]``, one entry per job
of each host (``hostname`` is the server's address) and, with more than one host, fio's own ``All clients`` entry
(the bytes of every host over the longest run).
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


def _fio_document(stdout: str) -> Any:
    """fio's JSON document; fio may print notes before it, so parsing starts at the first brace."""
    text = stdout or ""
    start = text.find("{")
    if start < 0:
        raise ValueError("fio printed no JSON document")
    try:
        return json.loads(text[start:])
    except json.JSONDecodeError as exc:
        raise ValueError(f"fio output is not valid JSON: {exc}") from exc


def fio_bandwidth(stdout: str, direction: str) -> float:
    """Sum over all jobs of the ``direction`` ("read"/"write") bandwidth, in bytes/s."""
    doc = _fio_document(stdout)
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


ALL_CLIENTS = "All clients"


def fio_client_bandwidths(stdout: str) -> tuple[dict[str, float], float]:
    """Each host's write bandwidth (B/s, its jobs summed, by the address its server answered on) and the aggregate:
    fio's ``All clients`` figure where it printed one (two hosts or more), else the one host's."""
    doc = _fio_document(stdout)
    stats = doc.get("client_stats") if isinstance(doc, dict) else None
    if not stats or not isinstance(stats, list):
        raise ValueError("fio JSON has no client_stats (was it run with --client?)")
    hosts: dict[str, float] = {}
    aggregate: float | None = None
    for index, entry in enumerate(stats):
        where = f"client_stats[{index}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{where} is {type(entry).__name__}, not an object")
        if entry.get("error", 0):
            job, host = entry.get("jobname"), entry.get("hostname")
            raise ValueError(f"fio job {job} on {host} reported error {entry['error']}")
        bandwidth = _job_bandwidth(entry, "write", where)
        if entry.get("jobname") == ALL_CLIENTS:
            aggregate = bandwidth
            continue
        host = entry.get("hostname")
        if not isinstance(host, str) or not host:
            raise ValueError(f"{where} names no hostname")
        hosts[host] = hosts.get(host, 0.0) + bandwidth
    if not hosts:
        raise ValueError("fio reported no host's write")
    total = aggregate if aggregate is not None else sum(hosts.values())
    if total <= 0:
        raise ValueError("fio reported no write bandwidth")
    return hosts, total


def aggregate_verdict(
    client: dict[str, Any],
    addresses: dict[str, str],
    checkpoint_bytes: float,
    checkpoint_target_s: float,
    mtbf_s: float,
) -> dict[str, Any]:
    """Every host writing at once (``addresses``: inventory host -> the address its fio server listens on): the
    aggregate must write ``checkpoint_bytes`` within ``checkpoint_target_s``; every host must have written. Names the
    slowest host and what a checkpoint takes at the measured aggregate."""
    details: dict[str, Any] = {
        "hosts": len(addresses),
        "checkpoint_bytes": checkpoint_bytes,
        "checkpoint_target_s": checkpoint_target_s,
    }
    if client.get("skipped"):
        return {"status": "skipped", "reasons": ["not run (check mode)"], "details": details}
    reasons: list[str] = []
    if client.get("rc", 0) != 0:
        err = " ".join((client.get("stderr") or client.get("msg") or "").split())[:500]
        return {"status": "fail", "reasons": [f"fio client exited rc={client.get('rc')}: {err}"], "details": details}
    try:
        by_address, total = fio_client_bandwidths(client.get("stdout", ""))
    except ValueError as exc:
        return {"status": "fail", "reasons": [f"fio client: {exc}"], "details": details}
    per_host = {host: by_address[address] for host, address in addresses.items() if address in by_address}
    absent = sorted(set(addresses) - set(per_host))
    if absent:
        reasons.append(f"no write reported by {', '.join(absent)}")
    slowest = min(per_host, key=lambda h: per_host[h]) if per_host else None
    write_s = checkpoint_bytes / total
    details.update(
        {
            "aggregate_write_gbs": round(total / 1e9, 3),
            "aggregate_write_bytes_per_s": int(total),
            "per_host_gbs": {h: round(v / 1e9, 3) for h, v in sorted(per_host.items())},
            "slowest_host": slowest,
            "slowest_gbs": round(per_host[slowest] / 1e9, 3) if slowest else None,
            "slowest_write_bytes_per_s": int(per_host[slowest]) if slowest else None,
            "checkpoint_write_s": round(write_s, 2),
            "recommended_interval_s": round(math.sqrt(2.0 * write_s * mtbf_s), 1),
        }
    )
    if write_s > checkpoint_target_s:
        reasons.append(
            f"{len(per_host)} hosts writing at once: {total / 1e9:.3f} GB/s, so {checkpoint_bytes / 1e12:g} TB would "
            f"take {write_s:.0f} s, above the {checkpoint_target_s:g} s target (slowest: {slowest}, "
            f"{details['slowest_gbs']} GB/s)"
        )
    return {"status": "fail" if reasons else "pass", "reasons": reasons, "details": details}


class FilterModule:
    """storage_acceptance filters."""

    def filters(self) -> dict[str, Any]:
        return {"storage_verdict": storage_verdict, "storage_aggregate_verdict": aggregate_verdict}
