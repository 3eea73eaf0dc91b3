"""Training always wins: PriorityClass tiers and the order of Kueue WorkloadPriorityClasses."""

from __future__ import annotations

import itertools

from pulumi_policy import StackValidationArgs, StackValidationPolicy

from contract.constants import TIER_LABEL
from policies.common import MANDATORY, Report, config_value, dig, labels_of, schema

PRIORITY_CLASS = "kubernetes:scheduling.k8s.io/v1:PriorityClass"
WORKLOAD_PRIORITY_CLASS = "kubernetes:kueue.x-k8s.io/v1beta2:WorkloadPriorityClass"
DEFAULT_ORDER = ["research-urgent", "research-default", "research-scavenger"]


def _training_above_inference(args: StackValidationArgs, report: Report) -> None:
    tiers: dict[str, list[tuple[str, int]]] = {"training": [], "inference": []}
    for r in args.resources:
        if r.resource_type != PRIORITY_CLASS:
            continue
        tier = labels_of(r.props).get(TIER_LABEL)
        if tier in tiers:
            tiers[tier].append((str(dig(r.props, "metadata", "name") or r.name), int(r.props.get("value", 0))))
    if not tiers["training"] and not tiers["inference"]:
        args.not_applicable("no PriorityClass labelled with a gpucluster tier")
    for t_name, t_value in tiers["training"]:
        for i_name, i_value in tiers["inference"]:
            if t_value <= i_value:
                report(
                    f"PriorityClass {t_name} (training, {t_value}) must be above {i_name} (inference, {i_value}): "
                    "training preempts inference, never the other way round"
                )


training_above_inference = StackValidationPolicy(
    name="training-priority-above-inference",
    description="Every training PriorityClass has a higher value than every inference PriorityClass.",
    enforcement_level=MANDATORY,
    validate=_training_above_inference,
)


def _workload_priorities_ordered(args: StackValidationArgs, report: Report) -> None:
    order: list[str] = list(config_value(args.get_config(), "order", DEFAULT_ORDER))
    values: dict[str, int] = {}
    for r in args.resources:
        if r.resource_type == WORKLOAD_PRIORITY_CLASS:
            values[str(dig(r.props, "metadata", "name") or r.name)] = int(r.props.get("value", 0))
    if not values:
        args.not_applicable("no WorkloadPriorityClass in the stack")
    present = [name for name in order if name in values]
    for higher, lower in itertools.pairwise(present):
        if values[higher] <= values[lower]:
            report(
                f"WorkloadPriorityClass {higher} ({values[higher]}) must be above {lower} ({values[lower]}), "
                f"as the configured order {order} says"
            )


workload_priorities_ordered = StackValidationPolicy(
    name="workload-priorities-ordered",
    description="Kueue WorkloadPriorityClasses have strictly decreasing values in the configured order.",
    enforcement_level=MANDATORY,
    validate=_workload_priorities_ordered,
    config_schema=schema(order={"type": "array", "items": {"type": "string"}, "default": DEFAULT_ORDER}),
)
