"""Training makes room before it takes it: the make-before-break AdmissionCheck on every training queue, and
inference Deployments that roll without losing a replica.

The make-before-break controller (daemons/make_before_break/) moves the inference replicas on the GPUs a gang
needs by rolling their Deployments; with ``maxUnavailable: 0`` an old replica goes only once its replacement is
available, so serving never dips. A burstable GPU inference Deployment that may drop replicas during a rollout
would turn every move into an outage. A ClusterQueue that does not list the check admits its gangs at once, and
the scheduler preempts every inference replica on their GPUs at the same moment.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

from contract.constants import VIRTUAL_NODE_TAINT_KEY, VIRTUAL_NODE_TAINT_VALUE
from contract.make_before_break_settings import CHECK_NAME, CONTROLLER_NAME
from contract.queues_settings import covers_gpus
from policies.common import MANDATORY, Report, dig, object_ref, schema
from policies.inference import _CONFIG, _gpu_inference_deployment, tolerates

ADMISSION_CHECK = "kubernetes:kueue.x-k8s.io/v1beta2:AdmissionCheck"
#: v1beta2 only: an older version is refused by kueue-objects-are-v1beta2.
CLUSTER_QUEUE_TYPES = ("kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue",)
#: What a training queue without the check costs (the advisory policy says it).
COST = (
    "training preempts every inference replica on its GPUs at once, and serving dips until the burst path "
    "(taint controller, virtual node) catches up, or, with bursting off, until training ends"
)


# --- inference Deployments roll make-before-break --------------------------------------------------------------


def _zero(value: Any) -> bool:
    """0, as a count (the engine may hand a number over as 0.0) or a percentage."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return value == 0
    return str(value).strip() in ("0", "0%")


def rollout_problems(props: Mapping[str, Any]) -> list[str]:
    """What lets a Deployment's rollout remove a replica before its replacement is available (empty: nothing)."""
    strategy = dig(props, "spec", "strategy")
    strategy = strategy if isinstance(strategy, Mapping) else {}
    kind = strategy.get("type") or "RollingUpdate"
    if kind != "RollingUpdate":
        return [f"rolls out with strategy {kind}: every replica stops before any replacement starts"]
    unavailable = dig(strategy, "rollingUpdate", "maxUnavailable")
    if unavailable is None:
        return ["leaves maxUnavailable unset (Kubernetes' default is 25%): a rollout drops replicas before it adds"]
    if not _zero(unavailable):
        return [f"rolls with maxUnavailable {unavailable}: a rollout drops replicas before their replacements run"]
    return []


def _validate_rollout(args: ResourceValidationArgs, report: Report) -> None:
    spec = _gpu_inference_deployment(args.resource_type, args.props, args.get_config())
    tolerations = [t for t in (spec or {}).get("tolerations") or [] if isinstance(t, Mapping)]
    if spec is None or not any(tolerates(t, VIRTUAL_NODE_TAINT_KEY, VIRTUAL_NODE_TAINT_VALUE) for t in tolerations):
        args.not_applicable("not a burstable GPU Deployment in an inference namespace")
        return
    for problem in rollout_problems(args.props):
        report(
            f"Deployment {object_ref(args.props, args.name)} {problem}; make-before-break moves replicas by "
            "rolling it, so it must roll with maxUnavailable: 0"
        )


inference_deployments_make_before_break = ResourceValidationPolicy(
    name="inference-deployments-make-before-break",
    description="Burstable GPU inference Deployments roll with maxUnavailable: 0 (a replacement before a removal).",
    enforcement_level=MANDATORY,
    validate=_validate_rollout,
    config_schema=schema(**_CONFIG),
)


# --- training queues carry the check ---------------------------------------------------------------------------


def listed_checks(props: Mapping[str, Any]) -> list[str]:
    """The AdmissionChecks a v1beta2 ClusterQueue lists (its ``admissionChecksStrategy``; v1beta2 has no plain
    list)."""
    return [
        str(entry.get("name"))
        for entry in dig(props, "spec", "admissionChecksStrategy", "admissionChecks") or []
        if isinstance(entry, Mapping)
    ]


def _queues(args: StackValidationArgs) -> list[tuple[str, list[str]]]:
    """The ClusterQueues that can admit training (every one that covers a GPU) and the checks each lists."""
    return [
        (str(dig(r.props, "metadata", "name") or r.name), listed_checks(r.props))
        for r in args.resources
        if r.resource_type in CLUSTER_QUEUE_TYPES and covers_gpus(dig(r.props, "spec", "resourceGroups"))
    ]


def _checks(args: StackValidationArgs) -> set[str]:
    """The names of the stack's AdmissionChecks that the make-before-break controller answers for."""
    return {
        str(dig(r.props, "metadata", "name") or r.name)
        for r in args.resources
        if r.resource_type == ADMISSION_CHECK and dig(r.props, "spec", "controllerName") == CONTROLLER_NAME
    }


def _validate_queues(args: StackValidationArgs, report: Report) -> None:
    queues = _queues(args)
    checks = _checks(args)
    if not queues or (not checks and not any(CHECK_NAME in listed for _, listed in queues)):
        args.not_applicable("no ClusterQueue, or make-before-break is off in this stack")
        return
    if not checks:
        # Kueue keeps a ClusterQueue that lists a missing check inactive: it admits nothing at all.
        names = [q for q, listed in queues if CHECK_NAME in listed]
        report(
            f"ClusterQueue(s) {names} list the AdmissionCheck {CHECK_NAME}, which this stack does not create "
            f"(controllerName {CONTROLLER_NAME}): Kueue keeps them inactive and they admit nothing"
        )
        return
    # Every ClusterQueue of GPUs admits training (inference is no Kueue workload).
    for queue, listed in queues:
        missing = sorted(checks - set(listed))
        if missing:
            report(f"ClusterQueue {queue} admits training without the AdmissionCheck {missing[0]}: {COST}")


training_queues_carry_make_before_break = StackValidationPolicy(
    name="training-queues-carry-make-before-break",
    description="With make-before-break on, every ClusterQueue that admits training lists its AdmissionCheck.",
    enforcement_level=MANDATORY,
    validate=_validate_queues,
)


def _validate_off(args: StackValidationArgs, report: Report) -> None:
    queues = _queues(args)
    if not queues or _checks(args):
        args.not_applicable("no ClusterQueue, or make-before-break is on")
        return
    report(
        f"make-before-break is off in this stack (no AdmissionCheck with controllerName {CONTROLLER_NAME}), so for "
        f"ClusterQueue(s) {sorted(q for q, _ in queues)}: {COST}"
    )


#: Advisory: a stack may run without the controller (the simulated cluster does); this says what that costs.
training_queues_make_before_break_off = StackValidationPolicy(
    name="training-queues-make-before-break-off",
    description="Says what training queues without make-before-break cost (advisory).",
    enforcement_level=EnforcementLevel.ADVISORY,
    validate=_validate_off,
)
