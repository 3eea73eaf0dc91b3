"""Checkpoint claims are ReadWriteMany on the parallel filesystem's class, which retains them."""

from __future__ import annotations

from pulumi_policy import StackValidationArgs, StackValidationPolicy

from contract.constants import CLAIM_LABEL, STORAGE_DRIVER_LABEL
from policies.common import MANDATORY, Report, dig, labels_of

STORAGE_CLASS = "kubernetes:storage.k8s.io/v1:StorageClass"
PVC = "kubernetes:core/v1:PersistentVolumeClaim"


def _validate(args: StackValidationArgs, report: Report) -> None:
    parallel_classes: dict[str, str | None] = {}
    for r in args.resources:
        if r.resource_type == STORAGE_CLASS and STORAGE_DRIVER_LABEL in labels_of(r.props):
            parallel_classes[str(dig(r.props, "metadata", "name") or r.name)] = r.props.get("reclaimPolicy")
    claims = [
        r
        for r in args.resources
        if r.resource_type == PVC
        and (labels_of(r.props).get(CLAIM_LABEL) == "checkpoints" or dig(r.props, "metadata", "name") == "checkpoints")
    ]
    if not claims:
        args.not_applicable("no checkpoint claim in the stack")
    for r in claims:
        ref = f"{dig(r.props, 'metadata', 'namespace')}/{dig(r.props, 'metadata', 'name')}"
        modes = dig(r.props, "spec", "accessModes") or []
        if "ReadWriteMany" not in modes:
            report(f"checkpoint claim {ref} has accessModes {modes}: every rank writes, it must be ReadWriteMany")
        cls = dig(r.props, "spec", "storageClassName")
        if cls not in parallel_classes:
            report(
                f"checkpoint claim {ref} uses storage class {cls!r}, not a parallel-filesystem class "
                f"(labelled {STORAGE_DRIVER_LABEL}: {sorted(parallel_classes)})"
            )
        elif parallel_classes[cls] != "Retain":
            report(f"checkpoint claim {ref}: class {cls} has reclaimPolicy {parallel_classes[cls]}, not Retain")


checkpoint_claims_rwx = StackValidationPolicy(
    name="checkpoint-claims-rwx-on-parallel-fs",
    description="Checkpoint claims are ReadWriteMany on a retained parallel-filesystem StorageClass.",
    enforcement_level=MANDATORY,
    validate=_validate,
)
