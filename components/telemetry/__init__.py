"""GPU and fabric telemetry: DCGM exporter, the fabric exporter daemon, alert rules and a dashboard."""

from components.telemetry.alerts import QUARANTINE_SIGNAL_LABEL, QUARANTINE_SIGNAL_VALUE, rule_groups
from components.telemetry.counters import CsvFormatError, counters_csv, csv_fields, required_dcgm_fields
from components.telemetry.dashboard import dashboard, panel_queries
from components.telemetry.resources import (
    DCGM_COUNTERS_CONFIGMAP,
    DCGM_COUNTERS_KEY,
    DcgmExporter,
    DcgmExporterArgs,
    FabricExporter,
    FabricExporterArgs,
    GpuAlerts,
    GpuAlertsArgs,
    GpuDashboard,
    GpuDashboardArgs,
    Telemetry,
    TelemetryArgs,
)
from components.telemetry.settings import (
    STACK_KEY,
    TelemetrySettings,
    TelemetrySettingsError,
    parse_telemetry_settings,
)

__all__ = [
    "DCGM_COUNTERS_CONFIGMAP",
    "DCGM_COUNTERS_KEY",
    "QUARANTINE_SIGNAL_LABEL",
    "QUARANTINE_SIGNAL_VALUE",
    "STACK_KEY",
    "CsvFormatError",
    "DcgmExporter",
    "DcgmExporterArgs",
    "FabricExporter",
    "FabricExporterArgs",
    "GpuAlerts",
    "GpuAlertsArgs",
    "GpuDashboard",
    "GpuDashboardArgs",
    "Telemetry",
    "TelemetryArgs",
    "TelemetrySettings",
    "TelemetrySettingsError",
    "counters_csv",
    "csv_fields",
    "dashboard",
    "panel_queries",
    "parse_telemetry_settings",
    "required_dcgm_fields",
    "rule_groups",
]
