"""Kueue objects are written at ``v1beta2``, the version every Kueue from 0.20 on still serves.

Kueue 0.20 stops serving ``kueue.x-k8s.io/v1beta1``: a stack that writes a ClusterQueue, LocalQueue, flavor,
AdmissionCheck or priority class at that version previews cleanly against 0.19 and fails halfway through
``pulumi up`` on the first cluster that upgraded. Refused here, in CI, naming the object and the version to use.
"""

from __future__ import annotations

from pulumi_policy import ResourceValidationArgs, ResourceValidationPolicy

from policies.common import MANDATORY, Report, object_ref

GROUP = "kueue.x-k8s.io"
#: The one version of ``kueue.x-k8s.io`` a stack may write.
SERVED = "v1beta2"


def _group_version(args: ResourceValidationArgs) -> tuple[str, str] | None:
    """``(kind, apiVersion)`` of a Kueue object: from its type token, or from ``apiVersion`` where the object is
    a generic custom resource."""
    parts = args.resource_type.split(":")
    if len(parts) == 3 and parts[1].startswith(f"{GROUP}/"):
        return parts[2], parts[1]
    api_version = args.props.get("apiVersion")
    if isinstance(api_version, str) and api_version.startswith(f"{GROUP}/"):
        return str(args.props.get("kind") or parts[-1]), api_version
    return None


def _validate(args: ResourceValidationArgs, report: Report) -> None:
    found = _group_version(args)
    if found is None:
        args.not_applicable("not a Kueue object")
        return
    kind, api_version = found
    if api_version.removeprefix(f"{GROUP}/") == SERVED:
        return
    report(
        f"{kind} {object_ref(args.props, args.name)} is written at {api_version}, which Kueue 0.20 and later do "
        f"not serve (v1beta1 was removed in 0.20): write it at {GROUP}/{SERVED}"
    )


kueue_objects_are_v1beta2 = ResourceValidationPolicy(
    name="kueue-objects-are-v1beta2",
    description=f"Every {GROUP} object is written at {SERVED}, the version current Kueue releases serve.",
    enforcement_level=MANDATORY,
    validate=_validate,
)
