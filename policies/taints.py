"""The burst taint is NoSchedule, never NoExecute: a NoExecute taint evicts every inference replica at once."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import yaml
from pulumi_policy import ResourceValidationArgs, ResourceValidationPolicy

from contract.constants import DEFAULT_BURST_TAINT_KEY
from policies.common import MANDATORY, Report, config_value, schema


def _taints(value: Any, path: str = "") -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every taint-shaped object ({key, effect}) below `value`, skipping tolerations, which only tolerate."""
    if isinstance(value, Mapping):
        if "key" in value and "effect" in value and "toleration" not in path.lower():
            yield path, value
        for k, v in value.items():
            yield from _taints(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _taints(v, f"{path}[{i}]")
    elif isinstance(value, str) and "\n" in value and "effect" in value:
        # Configuration embedded as YAML/JSON text (a controller's ConfigMap).
        try:
            doc = yaml.safe_load(value)
        except yaml.YAMLError:
            return
        yield from _taints(doc, path)


def _validate(args: ResourceValidationArgs, report: Report) -> None:
    key = config_value(args.get_config(), "burstTaintKey", DEFAULT_BURST_TAINT_KEY)
    for path, taint in _taints(dict(args.props)):
        if taint.get("key") == key and taint.get("effect") == "NoExecute":
            report(
                f"{path}: the burst taint {key} has effect NoExecute; use NoSchedule so the descheduler moves "
                "inference back a few pods at a time instead of evicting every replica at once"
            )


burst_taint_never_noexecute = ResourceValidationPolicy(
    name="burst-taint-never-noexecute",
    description="The virtual node's burst taint is NoSchedule, never NoExecute.",
    enforcement_level=MANDATORY,
    validate=_validate,
    config_schema=schema(burstTaintKey={"type": "string", "default": DEFAULT_BURST_TAINT_KEY}),
)
