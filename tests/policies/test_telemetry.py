"""dcgm-counters-complete: the counters ConfigMap keeps every field the alerts read."""

from __future__ import annotations

from typing import Any

from components.telemetry import DCGM_COUNTERS_CONFIGMAP, DCGM_COUNTERS_KEY, counters_csv
from policies.telemetry import dcgm_counters_complete
from tests.policies.support import (
    CM,
    NA,
    check_resource,
)


def _counters(text: str) -> dict[str, Any]:
    return {
        "metadata": {"name": DCGM_COUNTERS_CONFIGMAP, "namespace": "gpu-telemetry"},
        "data": {DCGM_COUNTERS_KEY: text},
    }


def test_dcgm_counters_keep_the_alert_fields() -> None:
    assert check_resource(dcgm_counters_complete, CM, _counters(counters_csv())) == []
    without_temp = "\n".join(line for line in counters_csv().splitlines() if "DCGM_FI_DEV_GPU_TEMP" not in line)
    (violation,) = check_resource(dcgm_counters_complete, CM, _counters(without_temp))
    assert "drops fields the alerts and dashboard need: ['DCGM_FI_DEV_GPU_TEMP']" in violation
    (violation,) = check_resource(dcgm_counters_complete, CM, _counters("DCGM_FI_DEV_GPU_TEMP gauge\n"))
    assert "line 1: expected" in violation
    assert check_resource(dcgm_counters_complete, CM, {"metadata": {"name": "other"}, "data": {}}) == NA
