"""The gradual return is gradual: the descheduler policy bounds evictions and runs RemovePodsViolatingNodeTaints
on the burst taint."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml
from pulumi_policy import ResourceValidationArgs, ResourceValidationPolicy

from contract.constants import DEFAULT_BURST_TAINT_KEY
from policies.common import MANDATORY, Report, config_value, dig, schema

PLUGIN = "RemovePodsViolatingNodeTaints"


def _policies_in(resource_type: str, props: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """DeschedulerPolicy documents carried by a resource: a rendered ConfigMap, or a chart's values."""
    found: list[tuple[str, Mapping[str, Any]]] = []
    if resource_type == "kubernetes:core/v1:ConfigMap":
        for key, text in (props.get("data") or {}).items():
            if not isinstance(text, str) or "DeschedulerPolicy" not in text:
                continue
            try:
                doc = yaml.safe_load(text)
            except yaml.YAMLError:
                continue
            if isinstance(doc, Mapping) and doc.get("kind") == "DeschedulerPolicy":
                found.append((f"data.{key}", doc))
    elif resource_type.startswith("kubernetes:helm.sh/"):
        policy = dig(props, "values", "deschedulerPolicy")
        if isinstance(policy, Mapping):
            found.append(("values.deschedulerPolicy", policy))
    return found


def check_policy(policy: Mapping[str, Any], config: Mapping[str, Any]) -> list[str]:
    """What is wrong with a DeschedulerPolicy for the burst return (empty when nothing is)."""
    problems = []
    key = config_value(config, "burstTaintKey", DEFAULT_BURST_TAINT_KEY)
    limits = {
        "maxNoOfPodsToEvictPerNode": int(config_value(config, "maxEvictionsPerNode", 5)),
        "maxNoOfPodsToEvictTotal": int(config_value(config, "maxEvictionsTotal", 20)),
    }
    for field, limit in limits.items():
        value = policy.get(field)
        if value is None:
            problems.append(f"{field} is not set: evictions would be unbounded")
        elif int(value) > limit:
            problems.append(f"{field} is {value}, above the allowed {limit}")
    enabled = False
    included: list[str] = []
    for profile in policy.get("profiles") or []:
        if PLUGIN in (dig(profile, "plugins", "deschedule", "enabled") or []):
            enabled = True
            for pc in profile.get("pluginConfig") or []:
                if pc.get("name") == PLUGIN:
                    included.extend(dig(pc, "args", "includedTaints") or [])
    if not enabled:
        problems.append(f"no profile enables {PLUGIN} in its deschedule plugins")
    elif key not in included:
        problems.append(f"{PLUGIN} does not include the burst taint {key} in includedTaints (has {included})")
    return problems


def _validate(args: ResourceValidationArgs, report: Report) -> None:
    docs = _policies_in(args.resource_type, args.props)
    if not docs:
        args.not_applicable("carries no DeschedulerPolicy")
    for where, policy in docs:
        for problem in check_policy(policy, args.get_config()):
            report(f"{where}: {problem}")


descheduler_bounded = ResourceValidationPolicy(
    name="descheduler-bounded-burst-return",
    description="The descheduler policy bounds evictions and runs RemovePodsViolatingNodeTaints on the burst taint.",
    enforcement_level=MANDATORY,
    validate=_validate,
    config_schema=schema(
        burstTaintKey={"type": "string", "default": DEFAULT_BURST_TAINT_KEY},
        maxEvictionsPerNode={"type": "integer", "default": 5},
        maxEvictionsTotal={"type": "integer", "default": 20},
    ),
)
