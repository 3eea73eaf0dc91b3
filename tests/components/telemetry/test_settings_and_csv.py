"""``gpucluster:telemetry`` validation (errors name the field) and the DCGM counters CSV policy helpers."""

from __future__ import annotations

import re
from typing import Any

import pytest

from components.telemetry import (
    CsvFormatError,
    TelemetrySettings,
    TelemetrySettingsError,
    counters_csv,
    csv_fields,
    dashboard,
    panel_queries,
    parse_telemetry_settings,
    required_dcgm_fields,
    rule_groups,
)


def test_defaults() -> None:
    s = parse_telemetry_settings(None)
    assert s.namespace == "gpu-telemetry"
    assert s.alerts.gpu_temp_limit_c == 78
    assert s.alerts.for_minutes == 2
    assert s.fabric_scrape == "serviceMonitor"
    assert s.dashboard_namespace == "gpu-telemetry"


@pytest.mark.parametrize("limit", [78, 77.5, 60])
def test_temperature_limit_at_or_below_ceiling_is_accepted(limit: float) -> None:
    assert parse_telemetry_settings({"alerts": {"gpuTempLimitC": limit}}).alerts.gpu_temp_limit_c == limit


@pytest.mark.parametrize("limit", [78.1, 85])
def test_temperature_limit_above_ceiling_is_refused_naming_the_field(limit: float) -> None:
    with pytest.raises(TelemetrySettingsError, match=r"gpucluster:telemetry\.alerts\.gpuTempLimitC: .*ceiling"):
        parse_telemetry_settings({"alerts": {"gpuTempLimitC": limit}})


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"fabricExporter": {"image": "ghcr.io/x/daemons:latest"}}, "fabricExporter.image"),
        ({"fabricExporter": {"image": "ghcr.io/x/daemons"}}, "fabricExporter.image"),
        ({"dcgmExporter": {"imageTag": "latest"}}, "dcgmExporter.imageTag"),
        ({"dcgmExporter": {"chartVersion": "^4.2"}}, "dcgmExporter.chartVersion"),
        ({"fabricExporter": {"port": 80}}, "fabricExporter.port"),
        ({"fabricExporter": {"scrape": "pull"}}, "fabricExporter.scrape"),
        ({"alerts": {"forMinutes": 0}}, "alerts.forMinutes"),
        ({"alerts": {"tensorActiveLowRatio": 1.5}}, "alerts.tensorActiveLowRatio"),
        ({"alerts": {"utilHighPct": 101}}, "alerts.utilHighPct"),
        ({"alerts": {"ettrLowRatio": 1}}, "alerts.ettrLowRatio"),
        ({"alerts": {"ettrLowForMinutes": 0}}, "alerts.ettrLowForMinutes"),
        ({"alerts": {"recoverySlowSeconds": 0}}, "alerts.recoverySlowSeconds"),
        ({"namespace": "GPU_Telemetry"}, "namespace"),
        ({"gpuNodeSelector": {}}, "gpuNodeSelector"),
        ({"gpuNodeSelector": {"bad key!": "x"}}, "gpuNodeSelector"),
        ({"alerts": {"unknownThreshold": 1}}, "alerts.unknownThreshold"),
        ({"dcgmExporter": {"chart": {"oci": "oci://x/y", "path": "charts/x"}}}, "dcgmExporter.chart"),
    ],
)
def test_bad_values_are_refused_naming_the_field(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(TelemetrySettingsError) as err:
        parse_telemetry_settings(raw)
    assert f"gpucluster:telemetry.{field}" in str(err.value)


def test_pinned_images_are_accepted() -> None:
    digest = "sha256:" + "a" * 64
    for image in ("ghcr.io/x/daemons:0.1.0", f"ghcr.io/x/daemons@{digest}", f"registry:5000/x/d:1@{digest}"):
        assert parse_telemetry_settings({"fabricExporter": {"image": image}}).fabric_exporter.image == image


@pytest.mark.parametrize(
    ("raw", "accepted"),
    [
        # the first exporter and chart that copy pod labels, and later ones
        ({"dcgmExporter": {"imageTag": "4.2.3-4.2.0-ubuntu22.04", "chartVersion": "4.2.0"}}, True),
        ({"dcgmExporter": {"imageTag": "4.5.3-4.8.2-distroless", "chartVersion": "v4.8.2"}}, True),
        # a tag of another shape (a mirror's own build) is not judged
        ({"dcgmExporter": {"imageTag": "mirror-build-7"}}, True),
        # the one before: it attaches namespace, pod and container only
        ({"dcgmExporter": {"imageTag": "4.2.3-4.1.3-ubuntu22.04"}}, False),
        ({"dcgmExporter": {"chartVersion": "4.1.3"}}, False),
    ],
)
def test_a_dcgm_exporter_without_pod_labels_is_refused(raw: dict[str, Any], accepted: bool) -> None:
    if accepted:
        parse_telemetry_settings(raw)
        return
    with pytest.raises(TelemetrySettingsError, match=r"does not copy the pod's labels .* pin 4\.2\.0 or later"):
        parse_telemetry_settings(raw)


def test_service_monitor_needs_the_operator() -> None:
    with pytest.raises(TelemetrySettingsError, match="prometheusOperator is false"):
        parse_telemetry_settings({"prometheusOperator": False, "fabricExporter": {"scrape": "serviceMonitor"}})
    jobs = {"dcgmExporter": {"scrapeJob": "gpus"}, "fabricExporter": {"scrapeJob": "ib"}}
    s = parse_telemetry_settings({"prometheusOperator": False, **jobs})
    assert (s.fabric_scrape, s.dcgm_scrape_job, s.fabric_scrape_job) == ("annotations", "gpus", "ib")
    # under the operator: the ServiceMonitors' jobs (their Services' names)
    s = parse_telemetry_settings({})
    assert (s.fabric_scrape, s.dcgm_scrape_job, s.fabric_scrape_job) == (
        "serviceMonitor",
        "dcgm-exporter",
        "gpucluster-fabric-exporter",
    )


def test_not_a_mapping_is_a_clear_error() -> None:
    with pytest.raises(TelemetrySettingsError, match=r"gpucluster:telemetry: expected a mapping, got list"):
        parse_telemetry_settings(["namespace"])


# --- CSV ----------------------------------------------------------------------------------------------------------


def test_our_csv_keeps_every_required_field() -> None:
    fields = csv_fields(counters_csv())
    missing = required_dcgm_fields(TelemetrySettings()) - fields
    assert not missing
    for needed in (
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_MEMORY_TEMP",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
        "DCGM_FI_DEV_THERMAL_VIOLATION",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    ):
        assert needed in fields, needed


def test_a_csv_that_drops_a_required_field_is_detected() -> None:
    trimmed = "\n".join(
        line for line in counters_csv().splitlines() if not line.startswith("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")
    )
    missing = required_dcgm_fields(TelemetrySettings()) - csv_fields(trimmed)
    assert missing == {"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"}


def test_commented_fields_are_off() -> None:
    assert csv_fields("# DCGM_FI_DEV_GPU_TEMP, gauge, x\n\nDCGM_FI_DEV_GPU_UTIL, gauge, y\n") == {
        "DCGM_FI_DEV_GPU_UTIL"
    }


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("DCGM_FI_DEV_GPU_TEMP gauge help\n", "line 1: expected"),
        ("# ok\nDCGM_FI_DEV_GPU_TEMP, histogram, help\n", "line 2: type 'histogram'"),
        ("GPU_TEMP, gauge, help\n", "line 1: expected"),
    ],
)
def test_malformed_csv_lines_are_named(text: str, match: str) -> None:
    with pytest.raises(CsvFormatError, match=match):
        csv_fields(text)


def test_every_dcgm_metric_the_rules_and_dashboard_use_is_required() -> None:
    s = TelemetrySettings()
    exprs = [r["expr"] for g in rule_groups(s)["groups"] for r in g["rules"]]
    exprs += [q for _, q in panel_queries(dashboard(s))]
    used = {m for e in exprs for m in re.findall(r"DCGM_FI_[A-Z0-9_]+", e)}
    assert used <= required_dcgm_fields(s), used - required_dcgm_fields(s)
