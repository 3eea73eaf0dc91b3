"""The DCGM counters CSV keeps every field the GPU alerts and the dashboard read.

Drop ``DCGM_FI_DEV_GPU_TEMP`` from the CSV and the 78 °C alert silently never fires; this policy refuses that.
"""

from __future__ import annotations

from pulumi_policy import ResourceValidationArgs, ResourceValidationPolicy

from components.telemetry import (
    DCGM_COUNTERS_CONFIGMAP,
    DCGM_COUNTERS_KEY,
    CsvFormatError,
    TelemetrySettings,
    csv_fields,
    required_dcgm_fields,
)
from policies.common import MANDATORY, Report, dig, object_ref

CONFIG_MAP = "kubernetes:core/v1:ConfigMap"


def _validate(args: ResourceValidationArgs, report: Report) -> None:
    if args.resource_type != CONFIG_MAP or dig(args.props, "metadata", "name") != DCGM_COUNTERS_CONFIGMAP:
        args.not_applicable("not the DCGM counters ConfigMap")
        return
    ref = object_ref(args.props, args.name)
    text = (args.props.get("data") or {}).get(DCGM_COUNTERS_KEY)
    if not isinstance(text, str):
        report(f"ConfigMap {ref} has no {DCGM_COUNTERS_KEY}: dcgm-exporter would export its defaults only")
        return
    try:
        present = csv_fields(text)
    except CsvFormatError as err:
        report(f"ConfigMap {ref} {DCGM_COUNTERS_KEY}: {err}")
        return
    missing = sorted(required_dcgm_fields(TelemetrySettings()) - present)
    if missing:
        report(f"ConfigMap {ref} {DCGM_COUNTERS_KEY} drops fields the alerts and dashboard need: {missing}")


dcgm_counters_complete = ResourceValidationPolicy(
    name="dcgm-counters-keep-alert-fields",
    description="The DCGM exporter counters CSV keeps every field the alerts and dashboard need.",
    enforcement_level=MANDATORY,
    validate=_validate,
)
