"""Parsers and verdict for the nvlink_acceptance role.

Reads ``nvidia-smi nvlink --status`` (link speed per GPU), ``nvidia-smi topo -m`` (NV# between GPU
pairs) and ``nvidia-smi nvlink -e`` (per-link error counters, read before and after the load).
"""

from __future__ import annotations

import re
from typing import Any

_GPU = re.compile(r"^GPU\s+(\d+):\s*(.*?)\s*(?:\(UUID:\s*([^)]+)\))?\s*$")
_LINK_SPEED = re.compile(r"^\s*Link\s+(\d+):\s*(.+?)\s*$")
_LINK_COUNTER = re.compile(r"^\s*Link\s+(\d+):\s*([A-Za-z][A-Za-z ]*?)\s*:\s*(\d+)\s*$")
_SPEED = re.compile(r"^([0-9.]+)\s*GB/s$")


def parse_nvlink_status(stdout: str) -> dict[int, dict[str, Any]]:
    """{gpu: {"uuid": str, "links": {link: speed_gbs or None when inactive}}}."""
    gpus: dict[int, dict[str, Any]] = {}
    current: dict[str, Any] | None = None
    for line in (stdout or "").splitlines():
        if not line.strip():
            continue
        m = _GPU.match(line.strip())
        if m:
            current = {"uuid": m.group(3) or "", "links": {}}
            gpus[int(m.group(1))] = current
            continue
        m = _LINK_SPEED.match(line)
        if m and current is not None:
            speed = _SPEED.match(m.group(2))
            current["links"][int(m.group(1))] = float(speed.group(1)) if speed else None
            continue
        raise ValueError(f"unexpected line in nvlink --status output: {line.strip()!r}")
    if not gpus:
        raise ValueError("nvlink --status printed no GPUs")
    return gpus


def parse_nvlink_errors(stdout: str) -> dict[str, int]:
    """Flatten ``nvidia-smi nvlink -e`` into {"GPU g link l <counter>": value}."""
    counters: dict[str, int] = {}
    gpu: int | None = None
    for line in (stdout or "").splitlines():
        if not line.strip():
            continue
        m = _GPU.match(line.strip())
        if m:
            gpu = int(m.group(1))
            continue
        m = _LINK_COUNTER.match(line)
        if m and gpu is not None:
            counters[f"GPU {gpu} link {m.group(1)} {m.group(2)}"] = int(m.group(3))
            continue
        raise ValueError(f"unexpected line in nvlink -e output: {line.strip()!r}")
    if not counters:
        raise ValueError("nvlink -e printed no counters")
    return counters


def parse_topo_matrix(stdout: str) -> dict[tuple[int, int], str]:
    """GPU-to-GPU cells of ``nvidia-smi topo -m`` ({(i, j): "NV18" | "SYS" | ...})."""
    lines = [ln for ln in (stdout or "").splitlines() if ln.strip()]
    if not lines:
        raise ValueError("topo -m printed nothing")
    header = lines[0].split()
    gpu_cols = [i for i, h in enumerate(header) if re.fullmatch(r"GPU\d+", h)]
    if not gpu_cols:
        raise ValueError("topo -m header names no GPU columns")
    cells: dict[tuple[int, int], str] = {}
    for line in lines[1:]:
        parts = line.split()
        if not parts or not re.fullmatch(r"GPU\d+", parts[0]):
            continue
        row = int(parts[0][3:])
        for col in gpu_cols:
            if col + 1 >= len(parts):
                raise ValueError(f"topo -m row {parts[0]} is short: {line.strip()!r}")
            cells[(row, int(header[col][3:]))] = parts[col + 1]
    return cells


def _run_error(what: str, result: dict[str, Any]) -> str | None:
    if result.get("rc", 0) == 0:
        return None
    err = (result.get("stderr") or result.get("msg") or "").strip()
    return f"{what} exited rc={result.get('rc')}: {err}"


def nvlink_topology_verdict(
    status: dict[str, Any],
    topo: dict[str, Any],
    expected_gpus: int,
    links_per_gpu: int,
    min_speed_gbs: float,
    topo_links: int,
) -> dict[str, Any]:
    """Link count and speed per GPU, and NV# between every GPU pair."""
    reasons: list[str] = []
    details: dict[str, Any] = {
        "expected_links_per_gpu": links_per_gpu,
        "min_link_speed_gbs": min_speed_gbs,
    }
    if status.get("skipped"):
        return {"status": "skipped", "reasons": ["not run (check mode)"], "details": details}
    err = _run_error("nvidia-smi nvlink --status", status)
    if err:
        reasons.append(err)
    else:
        try:
            gpus = parse_nvlink_status(status.get("stdout", ""))
        except ValueError as exc:
            gpus = {}
            reasons.append(f"nvidia-smi nvlink --status: {exc}")
        if gpus and len(gpus) != expected_gpus:
            reasons.append(f"nvlink --status lists {len(gpus)} GPUs, expected {expected_gpus}")
        summary = {}
        for gpu, info in sorted(gpus.items()):
            links = info["links"]
            active = {k: v for k, v in links.items() if v is not None}
            summary[str(gpu)] = {"active_links": len(active), "uuid": info["uuid"]}
            if len(active) != links_per_gpu:
                down = sorted(k for k, v in links.items() if v is None)
                reasons.append(
                    f"GPU {gpu}: {len(active)} active NVLinks, expected {links_per_gpu}"
                    + (f" (inactive: link {', '.join(map(str, down))})" if down else "")
                )
            for link, speed in sorted(active.items()):
                if speed < min_speed_gbs:
                    reasons.append(f"GPU {gpu} link {link}: {speed:g} GB/s, below {min_speed_gbs:g} GB/s")
        details["gpus"] = summary
    if topo_links > 0:
        err = _run_error("nvidia-smi topo -m", topo)
        if err:
            reasons.append(err)
        else:
            try:
                cells = parse_topo_matrix(topo.get("stdout", ""))
            except ValueError as exc:
                cells = {}
                reasons.append(f"nvidia-smi topo -m: {exc}")
            for (i, j), cell in sorted(cells.items()):
                if i >= j:
                    continue
                m = re.fullmatch(r"NV(\d+)", cell)
                if not m or int(m.group(1)) < topo_links:
                    reasons.append(f"topo -m: GPU{i} to GPU{j} is {cell}, expected NV{topo_links} or more")
    return {"status": "fail" if reasons else "pass", "reasons": reasons, "details": details}


def nvlink_counters_verdict(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Any NVLink error counter that grew between the two reads fails."""
    if before.get("skipped") or after.get("skipped"):
        return {"status": "skipped", "reasons": ["not run (check mode)"], "details": {}}
    reasons: list[str] = []
    parsed = []
    for label, res in (("before", before), ("after", after)):
        err = _run_error(f"nvidia-smi nvlink -e ({label} the load)", res)
        if err:
            reasons.append(err)
            continue
        try:
            parsed.append(parse_nvlink_errors(res.get("stdout", "")))
        except ValueError as exc:
            reasons.append(f"nvidia-smi nvlink -e ({label} the load): {exc}")
    grown: dict[str, list[int]] = {}
    if len(parsed) == 2:
        first, second = parsed
        for key, value in second.items():
            if key not in first:
                reasons.append(f"{key}: counter missing from the first read")
            elif value > first[key]:
                grown[key] = [first[key], value]
                reasons.append(f"{key} grew from {first[key]} to {value} during the load")
    return {"status": "fail" if reasons else "pass", "reasons": reasons, "details": {"grown": grown}}


def nvlink_verdict(topology: dict[str, Any], counters: dict[str, Any]) -> dict[str, Any]:
    """Merge topology and counter verdicts into the role verdict."""
    statuses = {topology["status"], counters["status"]}
    status = "fail" if "fail" in statuses else ("skipped" if "skipped" in statuses else "pass")
    reasons = [*topology["reasons"], *counters["reasons"]] if status != "pass" else []
    if status == "skipped":
        reasons = ["not run (check mode)"]
    return {
        "status": status,
        "reasons": reasons,
        "details": {**topology["details"], "counters": counters["details"]},
    }


class FilterModule:
    """nvlink_acceptance filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "nvlink_topology_verdict": nvlink_topology_verdict,
            "nvlink_counters_verdict": nvlink_counters_verdict,
            "nvlink_verdict": nvlink_verdict,
        }
