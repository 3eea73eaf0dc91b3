"""Make-before-break, declared for the kit: the Kueue AdmissionCheck controller that holds a training gang until the
inference it displaces is Ready elsewhere.

Its component (``components/make_before_break.py``) adds the AdmissionCheck itself to what the kit deploys.
Least privilege (the rules below): the ClusterRole without Events; its Lease in its own namespace; in each inference
namespace, Pods (deletion cost) and Deployments (roll them); Events only where their objects live: about Nodes and
the check where the API server takes Events about cluster-scoped objects, about Workloads in the team namespaces
(``context["workload_namespaces"]``), about Deployments in the inference namespaces.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from contract.constants import CLUSTER_EVENTS_NAMESPACE, KUEUE_GROUP
from contract.make_before_break_settings import (
    CHECK_NAME,
    CONTROLLER_NAME,
    FILLED,
    STACK_KEY,
    MakeBeforeBreakSettings,
)
from contract.model import check_dns_label
from contract.rbac import Grant, Rule, lease_rules
from contract.spec import AFTER_KUEUE, WORKLOAD_NAMESPACES, ControllerSpec
from contract.stack_facts import StackFacts

# The controller's least-privilege RBAC rules, as data (the deploying component renders the same lists).
#
# Three scopes:
#
# * :data:`CLUSTER_RULES` (a ClusterRole): what is cluster-scoped or may be in any namespace: Nodes (read and
#   patch the reservation), Pods (list: GPU pods of every namespace count), Kueue Workloads (read; apply our check
#   entry on the status subresource), ResourceFlavors (read), the AdmissionCheck (read; apply Active on its status),
#   Events (create: on Nodes in ``default``, on Workloads in their namespace).
# * :func:`inference_rules` (a Role in each inference namespace): patch Pods (deletion cost) and list and patch
#   (server-side apply) Deployments.
# * :func:`lease_rules` (a Role in the controller's namespace): its Lease only.
#
# Nothing else: no Secrets, no deletes, no writes to a Deployment's scale.

CLUSTER_RULES: tuple[Rule, ...] = (
    Rule(("",), ("nodes",), ("get", "list", "patch")),
    Rule(("",), ("pods",), ("list",)),
    Rule(("",), ("events",), ("create",)),
    Rule((KUEUE_GROUP,), ("workloads",), ("get", "list")),
    Rule((KUEUE_GROUP,), ("workloads/status",), ("patch",)),
    Rule((KUEUE_GROUP,), ("resourceflavors",), ("list",)),
)


def admission_check_rules(check_name: str) -> tuple[Rule, ...]:
    """Read the one AdmissionCheck and apply its Active condition (cluster-scoped, so in the ClusterRole)."""
    return (
        Rule((KUEUE_GROUP,), ("admissionchecks",), ("get",), (check_name,)),
        Rule((KUEUE_GROUP,), ("admissionchecks/status",), ("patch",), (check_name,)),
    )


def inference_rules() -> tuple[Rule, ...]:
    """A Role in each inference namespace."""
    return (
        Rule(("",), ("pods",), ("patch",)),
        Rule(("apps",), ("deployments",), ("list", "patch")),
    )


def cluster_rules(check_name: str) -> tuple[Rule, ...]:
    """Everything the ClusterRole holds."""
    return (*CLUSTER_RULES, *admission_check_rules(check_name))


#: Deployment annotation: the uids of the workloads it was moved for, comma-separated.
FLIPS_ANNOTATION = "gpucluster.io/flips"
#: Deployment annotation: where its placement stands (a :class:`Phase` value; absent: at home).
PHASE_ANNOTATION = "gpucluster.io/flip-phase"
#: Deployment annotation: the same in a sentence for people.
NOTE_ANNOTATION = "gpucluster.io/flip-note"
#: Pod-template annotation whose change rolls the Deployment out; pods carry it too.
EPOCH_ANNOTATION = "gpucluster.io/placement-epoch"
#: Pod-template annotation that keeps the descheduler (noEvictionPolicy: Mandatory) off a moved replica.
NO_EVICTION_ANNOTATION = "descheduler.alpha.kubernetes.io/prefer-no-eviction"
#: Pod annotation ranking which pods a ReplicaSet removes first (lower first).
DELETION_COST_ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"


#: The prefix of every series the controller exports (its metrics module names them with it).
PREFIX = "gpucluster_make_before_break"

NAME = "make-before-break"
APP = f"gpucluster-{NAME}"
#: What it writes besides its reservations and its check, for the admission rules that hold it to them: its
#: annotations on a Deployment, on a Deployment's pod template, and on a pod.
DEPLOYMENT_ANNOTATIONS = (FLIPS_ANNOTATION, PHASE_ANNOTATION, NOTE_ANNOTATION)
TEMPLATE_ANNOTATIONS = (EPOCH_ANNOTATION, NO_EVICTION_ANNOTATION)
POD_ANNOTATION = DELETION_COST_ANNOTATION


def workload_namespaces(context: Mapping[str, Any]) -> Sequence[str]:
    return tuple(context.get(WORKLOAD_NAMESPACES, ()))


def grants(s: MakeBeforeBreakSettings, context: Mapping[str, Any]) -> tuple[Grant, ...]:
    events = tuple(r for r in CLUSTER_RULES if "events" in r.resources)
    return (
        Grant("clusterrole", APP, tuple(r for r in cluster_rules(CHECK_NAME) if "events" not in r.resources)),
        Grant("role", APP, lease_rules(s.lease_name), s.namespace),
        *(Grant(f"role-{ns}", APP, inference_rules(), ns) for ns in s.inference_namespaces),
        *(
            Grant(f"events-role-{ns}", f"{APP}-events", events, ns)
            for ns in dict.fromkeys((CLUSTER_EVENTS_NAMESPACE, *workload_namespaces(context), *s.inference_namespaces))
        ),
    )


def check(s: MakeBeforeBreakSettings, context: Mapping[str, Any]) -> None:
    where = f"ControllerArgs({NAME})"
    namespaces = workload_namespaces(context)
    if not namespaces:
        raise ValueError(f"{where}.context.{WORKLOAD_NAMESPACES}: name the team namespaces training runs in")
    for ns in namespaces:
        check_dns_label(ns)
    if s.reservation_key == s.burst_taint_key:
        raise ValueError(f"{where}.settings.reservation_key: {s.reservation_key!r} is the burst taint key")
    overlap = sorted(set(namespaces) & set(s.inference_namespaces))
    if overlap:
        raise ValueError(f"{where}.context.{WORKLOAD_NAMESPACES}: also inference namespaces: {overlap}")


def outputs(s: MakeBeforeBreakSettings) -> dict[str, object]:
    return {
        "admissionCheck": CHECK_NAME,
        "controllerName": CONTROLLER_NAME,
        "maxHold": s.max_hold,
        "reservationKey": s.reservation_key,
    }


def fill(s: MakeBeforeBreakSettings, facts: StackFacts) -> MakeBeforeBreakSettings:
    """It acts on the stack's virtual node (none without burst) and burst taint, and moves Deployments in the stack's
    inference namespaces unless told fewer."""
    filled: dict[str, Any] = {"virtual_node_name": facts.virtual_node_name, "burst_taint_key": facts.burst_taint_key}
    if "inference_namespaces" not in s.model_fields_set:
        filled["inference_namespaces"] = list(facts.inference_namespaces)
    return s.model_copy(update=filled)


SPEC: ControllerSpec[MakeBeforeBreakSettings] = ControllerSpec(
    name=NAME,
    component_type="gpucluster:burst:MakeBeforeBreak",
    part_of="burst",
    namespace_role="burst",
    metrics_port=9104,
    metrics_prefix=PREFIX,
    stack_key=STACK_KEY,
    settings_model=MakeBeforeBreakSettings,
    grants=grants,
    outputs=outputs,
    check=check,
    filled_by_stack=FILLED,
    fill=fill,
    description=(
        f"The Kueue AdmissionCheck controller for controllerName {CONTROLLER_NAME}: before a training gang is "
        "admitted, reserve the nodes it needs, roll the inference Deployments in the way off them "
        "make-before-break, and set the check Ready (with podSetUpdates for the reservation) once the GPUs are "
        "free; after maxHold, Ready anyway. Only the holder of the Lease writes. Metrics are prefixed "
        f"{PREFIX}_."
    ),
    once_help="run one cycle (taking the Lease if it is free, releasing it after), print the "
    "observation's problems, the decided actions and what was written as JSON on stdout and exit; no HTTP server",
    dry_run_help="observe, decide and log what would change, but write nothing: no patch, no apply, no "
    "Event, no Lease (the replica behaves as leader for its decisions)",
    after=(AFTER_KUEUE,),
)
