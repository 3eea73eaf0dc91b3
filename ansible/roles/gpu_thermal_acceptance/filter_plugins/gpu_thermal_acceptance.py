"""Parsers and verdict for the gpu_thermal_acceptance role.

Samples come from
``nvidia-smi --query-gpu=index,uuid,temperature.gpu,clocks_event_reasons.active --format=csv,noheader,nounits``.
"""

from __future__ import annotations

import statistics
from typing import Any

# NVML clocks event reason bits (nvmlClocksEventReason*), as printed in clocks_event_reasons.active.
CLOCK_EVENT_BITS: dict[str, int] = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clock_setting": 0x100,
}


def parse_thermal_csv(stdout: str) -> list[dict[str, Any]]:
    """One dict per GPU line; raises ValueError naming the line that cannot be read."""
    rows: list[dict[str, Any]] = []
    for lineno, line in enumerate((stdout or "").splitlines(), start=1):
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 4:
            raise ValueError(f"line {lineno} has {len(fields)} fields, expected 4: {line!r}")
        index, uuid, temp, reasons = fields
        try:
            gpu = int(index)
        except ValueError:
            raise ValueError(f"line {lineno}: GPU index {index!r} is not a number") from None
        try:
            temp_c = float(temp)
        except ValueError:
            raise ValueError(f"GPU {gpu} ({uuid}): temperature {temp!r} is not a number") from None
        try:
            mask = int(reasons, 16)
        except ValueError:
            raise ValueError(f"GPU {gpu} ({uuid}): clocks_event_reasons {reasons!r} is not a bitmask") from None
        rows.append({"index": gpu, "uuid": uuid, "temp_c": temp_c, "clock_event_mask": mask})
    if not rows:
        raise ValueError("nvidia-smi printed no GPU rows")
    return rows


def clock_event_names(mask: int) -> list[str]:
    return [name for name, bit in CLOCK_EVENT_BITS.items() if mask & bit]


def gpu_thermal_verdict(
    samples: list[dict[str, Any]],
    limit_c: float,
    outlier_c: float,
    expected_gpus: int,
    fail_clock_events: list[str],
    under_load: bool = True,
) -> dict[str, Any]:
    """Judge every GPU on its peak temperature across the samples.

    A GPU fails when its peak is above ``limit_c``, when its peak is more than ``outlier_c`` above
    the median of all GPUs' peaks, or when any sample shows one of ``fail_clock_events`` active.
    """
    unknown = [n for n in fail_clock_events if n not in CLOCK_EVENT_BITS]
    if unknown:
        raise ValueError(f"unknown clock event reason(s) {unknown}; known: {sorted(CLOCK_EVENT_BITS)}")
    details: dict[str, Any] = {
        "limit_c": limit_c,
        "outlier_c": outlier_c,
        "samples": len(samples),
        "under_load": under_load,
    }
    if samples and all(s.get("skipped") for s in samples):
        return {"status": "skipped", "reasons": ["not run (check mode)"], "details": details}
    reasons: list[str] = []
    peaks: dict[int, float] = {}
    uuids: dict[int, str] = {}
    events: dict[int, set[str]] = {}
    for n, sample in enumerate(samples, start=1):
        if sample.get("rc", 0) != 0:
            err = (sample.get("stderr") or sample.get("msg") or "").strip()
            reasons.append(f"nvidia-smi sample {n} exited rc={sample.get('rc')}: {err}")
            continue
        try:
            rows = parse_thermal_csv(sample.get("stdout", ""))
        except ValueError as exc:
            reasons.append(f"nvidia-smi sample {n}: {exc}")
            continue
        for row in rows:
            gpu = row["index"]
            uuids[gpu] = row["uuid"]
            peaks[gpu] = max(peaks.get(gpu, row["temp_c"]), row["temp_c"])
            events.setdefault(gpu, set()).update(clock_event_names(row["clock_event_mask"]))
    if not samples:
        reasons.append("no temperature samples were taken")
    if peaks and len(peaks) != expected_gpus:
        reasons.append(f"nvidia-smi reports {len(peaks)} GPUs, expected {expected_gpus}")
    median = statistics.median(peaks.values()) if peaks else None
    details["median_peak_c"] = median
    details["gpus"] = [
        {
            "index": gpu,
            "uuid": uuids[gpu],
            "peak_c": peaks[gpu],
            "clock_events": sorted(events[gpu]),
        }
        for gpu in sorted(peaks)
    ]
    for gpu in sorted(peaks):
        name = f"GPU {gpu} ({uuids[gpu]})"
        if peaks[gpu] > limit_c:
            reasons.append(f"{name} reached {peaks[gpu]:g} C, above thermal_limit_c {limit_c:g} C")
        if median is not None and peaks[gpu] - median > outlier_c:
            reasons.append(
                f"{name} peaked at {peaks[gpu]:g} C, {peaks[gpu] - median:g} C above the node median "
                f"{median:g} C (thermal_outlier_c {outlier_c:g} C)"
            )
        bad = sorted(events[gpu] & set(fail_clock_events))
        if bad:
            reasons.append(f"{name} clocks slowed by {', '.join(bad)}")
    return {"status": "fail" if reasons else "pass", "reasons": reasons, "details": details}


class FilterModule:
    """gpu_thermal_acceptance filters."""

    def filters(self) -> dict[str, Any]:
        return {"gpu_thermal_verdict": gpu_thermal_verdict}
