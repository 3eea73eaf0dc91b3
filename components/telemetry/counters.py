"""The DCGM exporter counters CSV we ship, and the policy helpers that check a CSV keeps what we need.

Field names are DCGM's (``DCGM_FI_*``), as in dcgm-exporter's ``etc/default-counters.csv`` and
``etc/dcp-metrics-included.csv``; the exporter publishes each under the same name.
"""

from __future__ import annotations

from components.telemetry.settings import TelemetrySettings

# (field, prometheus type, help). Order is the order in the CSV.
DCGM_COUNTERS: tuple[tuple[str, str, str], ...] = (
    # Temperatures
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    # Clocks, power
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    # Utilisation and profiling (DCP) activity
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active."),
    ("DCGM_FI_PROF_SM_ACTIVE", "gauge", "Ratio of cycles an SM has at least 1 warp assigned."),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Ratio of cycles the tensor (HMMA) pipe is active."),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge", "Ratio of cycles the device memory interface is active."),
    # Memory
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    # NVLink
    ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "counter", "Total NVLink flow-control CRC errors."),
    ("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "counter", "Total NVLink data CRC errors."),
    ("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "counter", "Total NVLink retries."),
    ("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "counter", "Total NVLink recovery errors."),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", "Total NVLink bandwidth counters for all lanes."),
    # Errors, clock events (throttling), violations
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gauge", "Current clock event (throttle) reasons bitmask."),
    ("DCGM_FI_DEV_THERMAL_VIOLATION", "counter", "Throttling duration due to thermal constraints (in us)."),
    ("DCGM_FI_DEV_POWER_VIOLATION", "counter", "Throttling duration due to power constraints (in us)."),
    # ECC and row remapping
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "Total single-bit volatile ECC errors."),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Total double-bit volatile ECC errors."),
    ("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "counter", "Total single-bit persistent ECC errors."),
    ("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "counter", "Total double-bit persistent ECC errors."),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Remapped rows for uncorrectable errors."),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Remapped rows for correctable errors."),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed."),
    # Static information, as labels on the other metrics
    ("DCGM_FI_DRIVER_VERSION", "label", "Driver version."),
    # the serial a replacement request names (GpuNodeQuarantined)
    ("DCGM_FI_DEV_SERIAL", "label", "Device serial number."),
)

#: Fields the dashboard reads, besides those the alerts need.
_DASHBOARD_FIELDS = (
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_THERMAL_VIOLATION",
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_XID_ERRORS",
)
_ALERT_FIELDS = (
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_DEV_XID_ERRORS",
)


class CsvFormatError(ValueError):
    """A counters CSV line that dcgm-exporter would reject."""


def counters_csv() -> str:
    """The CSV text mounted into dcgm-exporter (``-f``)."""
    lines = [
        "# gpucluster DCGM exporter counters (DCGM field, Prometheus type, help).",
        "# Policy: must keep every field of components.telemetry.required_dcgm_fields().",
    ]
    width = max(len(f) for f, _, _ in DCGM_COUNTERS) + 1
    lines += [f"{(field + ','):<{width}} {kind + ',':<8} {doc}" for field, kind, doc in DCGM_COUNTERS]
    return "\n".join(lines) + "\n"


def csv_fields(csv_text: str) -> set[str]:
    """The DCGM fields a counters CSV turns on (comments and blank lines skipped).

    Raises ``CsvFormatError`` naming the line for a line dcgm-exporter would not accept.
    """
    fields: set[str] = set()
    for number, raw in enumerate(csv_text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split(",", 2)]
        if len(parts) < 3 or not parts[0].startswith("DCGM_FI_"):
            raise CsvFormatError(f"line {number}: expected 'DCGM_FI_<FIELD>, <type>, <help>', got {raw!r}")
        if parts[1] not in {"gauge", "counter", "label"}:
            raise CsvFormatError(f"line {number}: type {parts[1]!r} is not gauge, counter or label")
        fields.add(parts[0])
    return fields


def required_dcgm_fields(settings: TelemetrySettings) -> frozenset[str]:
    """Fields the alerts and the dashboard read; a counters CSV must keep every one of them.

    ``settings`` is taken so the set can follow configuration (today every alert is always on).
    """
    del settings
    return frozenset(_ALERT_FIELDS) | frozenset(_DASHBOARD_FIELDS)
