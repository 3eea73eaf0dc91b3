"""Parsers and verdict for the ib_acceptance role.

Port state comes from ``ibstat``; error counters from
``<sysfs_root>/class/infiniband/<hca>/ports/<port>/counters/<counter>`` read with ``grep -H``;
optional bandwidth from ``ib_write_bw --report_gbits`` loopback.
"""

from __future__ import annotations

import re
from typing import Any

_CA = re.compile(r"^CA\s+'([^']+)'\s*$")
_PORT = re.compile(r"^\s+Port\s+(\d+):\s*$")
_KV = re.compile(r"^\s+([A-Za-z][A-Za-z ]*?):\s*(.*?)\s*$")
_BW_HEADER = re.compile(r"BW average\[(Gb/sec|MB/sec)\]")


def parse_ibstat(stdout: str) -> dict[str, dict[int, dict[str, str]]]:
    """{hca: {port: {"State": ..., "Physical state": ..., "Rate": ..., ...}}}."""
    cas: dict[str, dict[int, dict[str, str]]] = {}
    ca: str | None = None
    port: dict[str, str] | None = None
    port_indent = 0
    for raw in (stdout or "").splitlines():
        line = raw.expandtabs(8)
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        m = _CA.match(line)
        if m:
            ca, port = m.group(1), None
            cas[ca] = {}
            continue
        m = _PORT.match(line)
        if m and ca is not None:
            port, port_indent = {}, indent
            cas[ca][int(m.group(1))] = port
            continue
        m = _KV.match(line)
        if m and ca is not None:
            if port is not None and indent > port_indent:
                port[m.group(1)] = m.group(2)
            continue
        raise ValueError(f"unexpected line in ibstat output: {line.strip()!r}")
    if not cas:
        raise ValueError("ibstat listed no CAs")
    return cas


def parse_sysfs_counters(stdout: str) -> dict[str, int]:
    """``grep -H . <files>`` output ("<path>:<value>") to {"<hca> port <p> <counter>": value}."""
    counters: dict[str, int] = {}
    for line in (stdout or "").splitlines():
        if not line.strip():
            continue
        path, sep, value = line.rpartition(":")
        m = re.search(r"/infiniband/([^/]+)/ports/(\d+)/counters/([^/]+)$", path)
        if not sep or not m:
            raise ValueError(f"unexpected counter line: {line!r}")
        try:
            counters[f"{m.group(1)} port {m.group(2)} {m.group(3)}"] = int(value.strip())
        except ValueError:
            raise ValueError(f"counter {path} holds {value.strip()!r}, not a number") from None
    return counters


def parse_ib_write_bw(stdout: str) -> float:
    """Average bandwidth in GB/s (bytes) from the result row under the BW header."""
    lines = (stdout or "").splitlines()
    for i, line in enumerate(lines):
        m = _BW_HEADER.search(line)
        if not m:
            continue
        for row in lines[i + 1 :]:
            fields = row.split()
            if len(fields) >= 4 and all(re.fullmatch(r"[0-9.]+", f) for f in fields[:4]):
                avg = float(fields[3])
                # Gb/sec is decimal gigabits; perftest's MB/sec is 2^20 bytes.
                return avg / 8.0 if m.group(1) == "Gb/sec" else avg * 1048576 / 1e9
        break
    raise ValueError("no bandwidth result row in ib_write_bw output")


def _err(what: str, res: dict[str, Any]) -> str | None:
    if res.get("rc", 0) == 0:
        return None
    text = (res.get("stderr") or res.get("msg") or "").strip()
    return f"{what} exited rc={res.get('rc')}: {text}"


def ib_verdict(
    ibstat: dict[str, Any],
    before: dict[str, Any],
    after: dict[str, Any],
    bw_results: list[dict[str, Any]],
    hcas: list[str],
    port: int,
    rate_gbps: int,
    bw_floor_gbs: float,
) -> dict[str, Any]:
    """Every expected HCA port Active/LinkUp at rate, no counter growth, bandwidth above floor."""
    details: dict[str, Any] = {"expected_rate_gbps": rate_gbps, "hcas": hcas, "port": port}
    if ibstat.get("skipped"):
        return {"status": "skipped", "reasons": ["not run (check mode)"], "details": details}
    reasons: list[str] = []
    err = _err("ibstat", ibstat)
    if err:
        reasons.append(err)
    else:
        try:
            cas = parse_ibstat(ibstat.get("stdout", ""))
        except ValueError as exc:
            cas = {}
            reasons.append(f"ibstat: {exc}")
        ports = {}
        for hca in hcas:
            info = cas.get(hca, {}).get(port)
            name = f"{hca} port {port}"
            if cas and info is None:
                reasons.append(f"{name}: not listed by ibstat")
                continue
            if info is None:
                continue
            ports[name] = info
            if info.get("State") != "Active":
                reasons.append(f"{name}: State {info.get('State')}, expected Active")
            if info.get("Physical state") != "LinkUp":
                reasons.append(f"{name}: Physical state {info.get('Physical state')}, expected LinkUp")
            rate = info.get("Rate", "")
            if rate != str(rate_gbps):
                reasons.append(f"{name}: Rate {rate} Gb/s, expected {rate_gbps} Gb/s")
        details["ports"] = ports
    reads = []
    for label, res in (("before", before), ("after", after)):
        if res.get("skipped"):
            continue
        e = _err(f"reading IB counters ({label} traffic)", res)
        if e:
            reasons.append(e)
            continue
        try:
            reads.append(parse_sysfs_counters(res.get("stdout", "")))
        except ValueError as exc:
            reasons.append(f"IB counters ({label} traffic): {exc}")
    if len(reads) == 2:
        first, second = reads
        details["counters_after"] = second
        for key, value in sorted(second.items()):
            if key in first and value > first[key]:
                reasons.append(f"{key} grew from {first[key]} to {value} during traffic")
    bws = {}
    for res in bw_results:
        hca = str(res.get("item", "?"))
        if res.get("skipped"):
            continue
        e = _err(f"ib_write_bw loopback on {hca}", res)
        if e:
            reasons.append(e)
            continue
        try:
            gbs = parse_ib_write_bw(res.get("stdout", ""))
        except ValueError as exc:
            reasons.append(f"ib_write_bw loopback on {hca}: {exc}")
            continue
        bws[hca] = round(gbs, 3)
        if gbs < bw_floor_gbs:
            reasons.append(f"ib_write_bw loopback on {hca}: {gbs:.2f} GB/s, below floor {bw_floor_gbs:g} GB/s")
    details["write_bw_gbs"] = bws
    return {"status": "fail" if reasons else "pass", "reasons": reasons, "details": details}


class FilterModule:
    """ib_acceptance filters."""

    def filters(self) -> dict[str, Any]:
        return {"ib_verdict": ib_verdict}
