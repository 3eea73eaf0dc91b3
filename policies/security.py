"""No hostPath volume or privileged container, no GPU-visibility env and no confinement opt-out, except for the
node agents on the allow-list."""

from __future__ import annotations

from collections.abc import Mapping
from fnmatch import fnmatch
from typing import Any

from pulumi_policy import ResourceValidationArgs, ResourceValidationPolicy

from contract.guardrails_settings import GPU_VISIBILITY_ENV, confinement_opt_out
from policies.common import (
    _POD_SPEC_PATHS,
    MANDATORY,
    Report,
    config_value,
    containers,
    dig,
    object_ref,
    pod_spec,
    schema,
)

#: namespace/name patterns of node agents that may read the host (telemetry exporters, CSI node plugins).
DEFAULT_NODE_AGENTS = ["gpu-telemetry/*"]


def _workload_pod_spec(args: ResourceValidationArgs) -> tuple[Mapping[str, Any], str, list[str]] | None:
    """The resource's pod spec, its reference and the node agents allowed more; None when it has no pod spec
    (marked not applicable) or is one of those node agents."""
    spec = pod_spec(args.resource_type, args.props)
    if spec is None:
        args.not_applicable("no pod template")
        return None
    ref = object_ref(args.props, args.name)
    allowed = list(config_value(args.get_config(), "nodeAgents", DEFAULT_NODE_AGENTS))
    if any(fnmatch(ref, pattern) for pattern in allowed):
        return None
    return spec, ref, allowed


def _validate(args: ResourceValidationArgs, report: Report) -> None:
    workload = _workload_pod_spec(args)
    if workload is None:
        return
    spec, ref, allowed = workload
    for volume in spec.get("volumes") or []:
        if isinstance(volume, dict) and volume.get("hostPath") is not None:
            path = volume["hostPath"].get("path")
            report(f"{ref}: volume {volume.get('name')} mounts host path {path}; only node agents {allowed} may")
    for field, c in containers(spec):
        sc = c.get("securityContext") or {}
        if sc.get("privileged") is True:
            report(f"{ref} {field}/{c.get('name')}: privileged container; only node agents {allowed} may")


no_privileged_or_host_path = ResourceValidationPolicy(
    name="no-privileged-or-hostpath",
    description="No privileged container or hostPath volume outside the allow-listed node agents.",
    enforcement_level=MANDATORY,
    validate=_validate,
    config_schema=schema(nodeAgents={"type": "array", "items": {"type": "string"}, "default": DEFAULT_NODE_AGENTS}),
)


def _pod_metadata(resource_type: str, props: Mapping[str, Any]) -> Mapping[str, Any]:
    """The pod template's metadata (a Pod's own), beside :func:`policies.common.pod_spec`."""
    path = _POD_SPEC_PATHS.get(resource_type)
    if not path:
        return {}
    meta = dig(props, *path[:-1], "metadata") if len(path) > 1 else dig(props, "metadata")
    return meta if isinstance(meta, Mapping) else {}


def _profiles_off(sc: Mapping[str, Any]) -> list[str]:
    return [
        f"{kind}.type Unconfined"
        for kind in ("seccompProfile", "appArmorProfile")
        if isinstance(sc.get(kind), Mapping) and sc[kind].get("type") == "Unconfined"
    ]


def _validate_gpus_and_confinement(args: ResourceValidationArgs, report: Report) -> None:
    workload = _workload_pod_spec(args)
    if workload is None:
        return
    spec, ref, _ = workload
    annotations = _pod_metadata(args.resource_type, args.props).get("annotations") or {}
    key = confinement_opt_out({str(k): str(v) for k, v in annotations.items()})
    if key is not None:
        report(f"{ref}: pod annotation {key} turns confinement off")
    for off in _profiles_off(spec.get("securityContext") or {}):
        report(f"{ref}: spec.securityContext.{off} turns confinement off")
    for field, c in containers(spec):
        for env in c.get("env") or []:
            if isinstance(env, Mapping) and env.get("name") in GPU_VISIBILITY_ENV:
                report(f"{ref} {field}/{c.get('name')}: sets {env['name']}; it would see GPUs it did not ask for")
        for off in _profiles_off(c.get("securityContext") or {}):
            report(f"{ref} {field}/{c.get('name')}: securityContext.{off} turns confinement off")


gpus_requested_and_confinement_on = ResourceValidationPolicy(
    name="gpus-requested-and-confinement-on",
    description="Outside the node agents, no container sets the env that picks GPUs, and no pod turns AppArmor or "
    "seccomp off (the rules the API server holds: guardrails_policies).",
    enforcement_level=MANDATORY,
    validate=_validate_gpus_and_confinement,
    config_schema=schema(nodeAgents={"type": "array", "items": {"type": "string"}, "default": DEFAULT_NODE_AGENTS}),
)
