"""No hostPath volume or privileged container, except for the node agents on the allow-list."""

from __future__ import annotations

from fnmatch import fnmatch

from pulumi_policy import ResourceValidationArgs, ResourceValidationPolicy

from policies.common import MANDATORY, Report, config_value, containers, object_ref, pod_spec, schema

#: namespace/name patterns of node agents that may read the host (telemetry exporters, CSI node plugins).
DEFAULT_NODE_AGENTS = ["gpu-telemetry/*"]


def _validate(args: ResourceValidationArgs, report: Report) -> None:
    spec = pod_spec(args.resource_type, args.props)
    if spec is None:
        args.not_applicable("no pod template")
        return
    ref = object_ref(args.props, args.name)
    allowed = list(config_value(args.get_config(), "nodeAgents", DEFAULT_NODE_AGENTS))
    if any(fnmatch(ref, pattern) for pattern in allowed):
        return
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
