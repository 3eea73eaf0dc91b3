"""ClusterQueue quota per flavor stays within the GPUs the flavor declares."""

from __future__ import annotations

from pulumi_policy import StackValidationArgs, StackValidationPolicy

from contract.constants import DECLARED_GPUS_ANNOTATION
from contract.queues_settings import POD_COUNT_RESOURCE
from policies.common import MANDATORY, Report, annotations_of, dig

RESOURCE_FLAVOR = "kubernetes:kueue.x-k8s.io/v1beta2:ResourceFlavor"
CLUSTER_QUEUE = "kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue"


def _validate(args: StackValidationArgs, report: Report) -> None:
    declared: dict[str, int] = {}
    for r in args.resources:
        if r.resource_type == RESOURCE_FLAVOR:
            name = str(dig(r.props, "metadata", "name") or r.name)
            raw = annotations_of(r.props).get(DECLARED_GPUS_ANNOTATION)
            if raw is None:
                report(f"ResourceFlavor {name} does not declare its GPUs (annotation {DECLARED_GPUS_ANNOTATION})")
                continue
            try:
                declared[name] = int(raw)
            except ValueError:
                report(f"ResourceFlavor {name}: {DECLARED_GPUS_ANNOTATION}={raw!r} is not a whole number")
    queued: dict[str, list[tuple[str, int]]] = {}
    for r in args.resources:
        if r.resource_type != CLUSTER_QUEUE:
            continue
        queue = str(dig(r.props, "metadata", "name") or r.name)
        for group in dig(r.props, "spec", "resourceGroups") or []:
            for flavor in group.get("flavors") or []:
                for res in flavor.get("resources") or []:
                    if res.get("name") == POD_COUNT_RESOURCE:
                        continue  # a count of pods (the queue of CPU-only work), no GPU
                    queued.setdefault(flavor["name"], []).append((queue, int(str(res.get("nominalQuota", 0)))))
    if not queued:
        args.not_applicable("no ClusterQueue in the stack")
    for flavor, entries in queued.items():
        if flavor not in declared:
            report(
                f"ClusterQueue(s) {[q for q, _ in entries]} give quota for flavor {flavor}, which has no ResourceFlavor"
            )
            continue
        total = sum(n for _, n in entries)
        if total > declared[flavor]:
            parts = ", ".join(f"{q}: {n}" for q, n in entries)
            report(
                f"flavor {flavor}: ClusterQueue quota {total} ({parts}) exceeds the {declared[flavor]} GPUs declared"
            )


quota_within_capacity = StackValidationPolicy(
    name="queue-quota-within-capacity",
    description="The nominal GPU quota of all ClusterQueues per flavor does not exceed the flavor's declared GPUs.",
    enforcement_level=MANDATORY,
    validate=_validate,
)
