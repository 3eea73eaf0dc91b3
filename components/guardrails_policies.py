"""The ValidatingAdmissionPolicies the API server holds, one small named function per rule, listed in :data:`RULES`.

Pure: each rule takes :class:`GuardrailInputs` (what of the stack it reads) and returns a :class:`Policy`, or None
when the stack has nothing for it to hold; :func:`manifests` renders each as a ``ValidatingAdmissionPolicy`` and
its ``ValidatingAdmissionPolicyBinding`` (``Deny``). ``components/guardrails.py`` applies them; the tests apply the
very same dicts to a real kube-apiserver and send it what each rule refuses and what it lets through.

Pods are checked at creation, whoever creates them (a Job's controller, an admin), so a rule holds even for an
object that never went through ``gpucluster submit``. Jobs and JobSets are checked at creation and whenever the
field a rule reads changes, so an object from before a policy is not stuck on its next unrelated update.

What they do not see: a value that arrives through ``envFrom`` (a ConfigMap's keys are not in the pod), and
ephemeral containers added later through ``pods/ephemeralcontainers`` (only ``kubectl debug`` does that, and
the team role does not grant it).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from components.constants import (
    INTERRUPTIONS_LEDGER_ANNOTATION,
    KUEUE_GROUP,
    KUEUE_VERSION,
    NAMESPACE_NAME_LABEL,
    QUARANTINE_REASON_ANNOTATION,
    QUARANTINE_TAINT_EFFECT,
    QUARANTINE_TAINT_KEY,
    QUARANTINED_AT_ANNOTATION,
    QUARANTINED_LABEL,
    RELEASED_AT_ANNOTATION,
    STALL_RESTART_ANNOTATION,
)
from components.guardrails_settings import (
    BASELINE_CAPABILITIES,
    CONFINEMENT_ANNOTATION_PREFIXES,
    GPU_VISIBILITY_ENV,
    UNCONFINED,
)
from components.jobset_settings import JOBSET_API

ADMISSION_API = "admissionregistration.k8s.io/v1"
NAME_PREFIX = "gpucluster-"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
#: The capability a pod on an RDMA fabric adds beyond baseline's (``fabric_settings.RDMA_CAPABILITY``).
IPC_LOCK = "IPC_LOCK"

#: What the quarantine controller writes on a Node besides its taint and label (daemons/quarantine/kube.py).
QUARANTINE_ANNOTATIONS = (QUARANTINE_REASON_ANNOTATION, QUARANTINED_AT_ANNOTATION, RELEASED_AT_ANNOTATION)

PODS = {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]}
JOBS = {"apiGroups": ["batch"], "apiVersions": ["v1"], "resources": ["jobs"], "operations": ["CREATE", "UPDATE"]}
JOBSETS = {
    "apiGroups": ["jobset.x-k8s.io"],
    "apiVersions": [JOBSET_API.split("/")[1]],
    "resources": ["jobsets"],
    "operations": ["CREATE", "UPDATE"],
}
#: A pod's containers and init containers (one CEL type, so one list).
CONTAINERS = {
    "name": "containers",
    "expression": "object.spec.containers + (has(object.spec.initContainers) ? object.spec.initContainers : [])",
}


@dataclass(frozen=True)
class MakeBeforeBreakMarks:
    """The make-before-break controller's user and the keys it owns (daemons/make_before_break/)."""

    user: str
    reservation_key: str
    check_name: str
    deployment_annotations: tuple[str, ...]
    template_annotations: tuple[str, ...]
    pod_annotation: str


@dataclass(frozen=True)
class GuardrailInputs:
    """What of the stack the rules read."""

    #: The team namespaces: the only place training runs.
    training_namespaces: tuple[str, ...]
    #: Team namespace -> the research (Kueue workload) priorities its jobs may name.
    priorities_by_namespace: Mapping[str, tuple[str, ...]]
    #: The Kubernetes PriorityClass that preempts inference.
    training_priority_class: str
    #: Namespaces the GPU-visibility and confinement rules leave alone (the telemetry namespace, system agents).
    exempt_namespaces: tuple[str, ...]
    #: A flavor's fabric adds IPC_LOCK, so the team namespaces enforce ``privileged`` and a policy holds baseline.
    ipc_lock: bool = False
    #: Team namespace -> the group whose members submit for it (``teams[].group``).
    team_groups: Mapping[str, str] = field(default_factory=dict)
    #: Where ``gpucluster submit`` reads the measured reliability: (namespace, ConfigMap name); None: nowhere.
    reliability: tuple[str, str] | None = None
    #: The quarantine controller's user (``system:serviceaccount:<ns>:<name>``); None: the stack runs none.
    quarantine_user: str | None = None
    #: The quota controller's user; None: the stack runs none.
    quota_user: str | None = None
    #: The interruption accounting daemon's user; None: the stack runs none.
    interruptions_user: str | None = None
    #: The stall detector's user; None: the stack runs none.
    stall_detector_user: str | None = None
    #: What the make-before-break controller writes, and as whom; None: the stack runs none.
    make_before_break: MakeBeforeBreakMarks | None = None
    #: The virtual node's user and the one Node it may register; None: the stack does not burst.
    virtual_node: tuple[str, str] | None = None


@dataclass(frozen=True)
class Validation:
    expression: str
    message: str
    #: CEL naming what is wrong in this object (the container, the annotation); ``message`` when it fails.
    message_expression: str | None = None


@dataclass(frozen=True)
class Policy:
    """One rule: what it matches, where, and what must hold."""

    name: str
    #: One sentence for ``kubectl describe`` and the docs.
    summary: str
    resource_rules: tuple[Mapping[str, Any], ...]
    validations: tuple[Validation, ...]
    namespace_selector: Mapping[str, Any] = field(default_factory=dict)
    variables: tuple[Mapping[str, str], ...] = ()
    #: CEL conditions a request must meet to be judged at all (whose request it is).
    match_conditions: tuple[Mapping[str, str], ...] = ()


def cel(value: object) -> str:
    """A CEL literal of a string, a list of strings or a map of them (JSON's syntax is CEL's for these)."""
    return json.dumps(value, sort_keys=True)


def label(obj: str, key: str) -> str:
    """CEL: ``obj``'s label ``key``, or ``''``."""
    labels = f"{obj}.metadata.labels"
    return f"((has({labels}) && {cel(key)} in {labels}) ? {labels}[{cel(key)}] : '')"


def unchanged_on_update(expression: str) -> str:
    """CEL: true on an update that leaves ``expression``'s value as it was."""
    return f"(request.operation == 'UPDATE' && {expression.replace('object.', 'oldObject.')} == {expression})"


def not_in(names: Sequence[str]) -> dict[str, Any]:
    return {"matchExpressions": [{"key": NAMESPACE_NAME_LABEL, "operator": "NotIn", "values": sorted(names)}]}


def is_in(names: Sequence[str]) -> dict[str, Any]:
    return {"matchExpressions": [{"key": NAMESPACE_NAME_LABEL, "operator": "In", "values": sorted(names)}]}


# --- the rules -----------------------------------------------------------------------------------------------------


def gpu_visibility_is_requested(inputs: GuardrailInputs) -> Policy:
    names = cel(list(GPU_VISIBILITY_ENV))
    sets_one = f"has(c.env) && c.env.exists(e, e.name in {names})"
    return Policy(
        name="gpu-visibility-is-requested",
        summary="No container outside the exempt namespaces sets the env the NVIDIA runtime reads to pick GPUs "
        f"({', '.join(GPU_VISIBILITY_ENV)}): a pod sees the GPUs it asked for, not every GPU of its node.",
        resource_rules=(PODS,),
        namespace_selector=not_in(inputs.exempt_namespaces),
        variables=(CONTAINERS,),
        validations=(
            Validation(
                expression=f"!variables.containers.exists(c, {sets_one})",
                message=f"a container sets {', '.join(GPU_VISIBILITY_ENV)}; ask for GPUs with nvidia.com/gpu",
                message_expression="'container ' + variables.containers.filter(c, "
                + sets_one
                + ").map(c, c.name).join(', ') + ' sets "
                + "/".join(GPU_VISIBILITY_ENV)
                + ", which would show it GPUs it did not ask for; ask for GPUs with nvidia.com/gpu'",
            ),
        ),
    )


def confinement_stays_on(inputs: GuardrailInputs) -> Policy:
    prefixes = cel(list(CONFINEMENT_ANNOTATION_PREFIXES))
    annotations = "object.metadata.annotations"
    opted_out = f"{prefixes}.exists(p, k.startsWith(p)) && {annotations}[k].lowerAscii() == {cel(UNCONFINED)}"

    def profiles_kept(ctx: str) -> str:
        return (
            f"(!has({ctx}) || ((!has({ctx}.seccompProfile) || {ctx}.seccompProfile.type != 'Unconfined') && "
            f"(!has({ctx}.appArmorProfile) || {ctx}.appArmorProfile.type != 'Unconfined')))"
        )

    return Policy(
        name="confinement-stays-on",
        summary="No pod outside the exempt namespaces turns AppArmor or seccomp off, by field or by annotation.",
        resource_rules=(PODS,),
        namespace_selector=not_in(inputs.exempt_namespaces),
        variables=(CONTAINERS,),
        validations=(
            Validation(
                expression=f"!has({annotations}) || !{annotations}.exists(k, {opted_out})",
                message="a pod annotation sets AppArmor or seccomp to unconfined",
                message_expression=f"'annotation ' + {annotations}.filter(k, {opted_out}).join(', ') + "
                "' turns confinement off; leave it to the runtime default'",
            ),
            Validation(
                expression=profiles_kept("object.spec.securityContext"),
                message="spec.securityContext sets a seccomp or AppArmor profile of type Unconfined",
            ),
            Validation(
                expression=f"variables.containers.all(c, {profiles_kept('c.securityContext')})",
                message="a container's securityContext sets a seccomp or AppArmor profile of type Unconfined",
                message_expression="'container ' + variables.containers.filter(c, !"
                + profiles_kept("c.securityContext")
                + ").map(c, c.name).join(', ') + ' sets a seccomp or AppArmor profile of type Unconfined'",
            ),
        ),
    )


def _owned_by(kind: str, api: str) -> str:
    return (
        "has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(r, "
        f"r.kind == {cel(kind)} && r.apiVersion == {cel(api)} && has(r.controller) && r.controller)"
    )


def _in_team(inputs: GuardrailInputs) -> str:
    return f"namespaceObject.metadata.name in {cel(sorted(inputs.training_namespaces))}"


def _why(inputs: GuardrailInputs) -> str:
    return f"{inputs.training_priority_class} preempts inference: only jobs Kueue admits in a team namespace take it"


def team_pods_belong_to_jobs(inputs: GuardrailInputs) -> Policy:
    """Kueue manages every Job in a team namespace; a bare pod there would take GPUs around the queues."""
    return Policy(
        name="team-pods-belong-to-jobs",
        summary="Every pod in a team namespace is a Job's (Kueue manages every Job there): none runs around the "
        "queues.",
        resource_rules=(PODS,),
        namespace_selector=is_in(inputs.training_namespaces),
        validations=(
            Validation(
                expression=_owned_by("Job", "batch/v1"),
                message="a pod in a team namespace that no Job owns would run around the queues; submit a job "
                "(gpucluster submit)",
            ),
        ),
    )


def training_priority_pods_belong_to_jobs(inputs: GuardrailInputs) -> Policy:
    cls = cel(inputs.training_priority_class)
    priority = "(has(object.spec.priorityClassName) ? object.spec.priorityClassName : '')"
    return Policy(
        name="training-priority-pods-belong-to-jobs",
        summary=f"Only a Job's pods in a team namespace take the PriorityClass {inputs.training_priority_class}.",
        resource_rules=(PODS,),
        validations=(
            Validation(
                expression=f"{priority} != {cls} || ({_in_team(inputs)} && {_owned_by('Job', 'batch/v1')})",
                message=f"a pod that is not a Job's in a team namespace names {inputs.training_priority_class}; "
                + _why(inputs),
            ),
        ),
    )


def training_priority_jobs_are_queued(inputs: GuardrailInputs) -> Policy:
    cls = cel(inputs.training_priority_class)
    priority = "(has(object.spec.template.spec.priorityClassName) ? object.spec.template.spec.priorityClassName : '')"
    queued = f"{label('object', QUEUE_LABEL)} != ''"
    return Policy(
        name="training-priority-jobs-are-queued",
        summary=f"Only Jobs Kueue manages in a team namespace (a {QUEUE_LABEL} label, or a JobSet's own Job) "
        f"name the PriorityClass {inputs.training_priority_class}.",
        resource_rules=(JOBS,),
        validations=(
            Validation(
                expression=f"{priority} != {cls} || {unchanged_on_update(priority)} || ({_in_team(inputs)} && "
                f"({queued} || {_owned_by('JobSet', JOBSET_API)}))",
                message=f"a Job without the {QUEUE_LABEL} label, or outside a team namespace, names "
                f"{inputs.training_priority_class}; " + _why(inputs),
            ),
        ),
    )


def training_priority_jobsets_are_queued(inputs: GuardrailInputs) -> Policy:
    cls = cel(inputs.training_priority_class)
    uses = (
        "(has(object.spec.replicatedJobs) && object.spec.replicatedJobs.exists(r, "
        "has(r.template.spec.template.spec.priorityClassName) && "
        f"r.template.spec.template.spec.priorityClassName == {cls}))"
    )
    return Policy(
        name="training-priority-jobsets-are-queued",
        summary=f"Only JobSets Kueue manages in a team namespace name the PriorityClass "
        f"{inputs.training_priority_class}.",
        resource_rules=(JOBSETS,),
        validations=(
            Validation(
                expression=f"!{uses} || ({_in_team(inputs)} && {label('object', QUEUE_LABEL)} != '')",
                message=f"a JobSet without the {QUEUE_LABEL} label, or outside a team namespace, names "
                f"{inputs.training_priority_class}; " + _why(inputs),
            ),
        ),
    )


def research_priority_by_team(inputs: GuardrailInputs) -> Policy | None:
    if not inputs.priorities_by_namespace:
        return None
    allowed = cel({ns: sorted(names) for ns, names in inputs.priorities_by_namespace.items()})
    value = label("object", PRIORITY_LABEL)
    return Policy(
        name="research-priority-by-team",
        summary=f"A team's Jobs and JobSets name only the research priorities ({PRIORITY_LABEL}) the stack "
        "allows that team.",
        resource_rules=(JOBS, JOBSETS),
        namespace_selector=is_in(list(inputs.priorities_by_namespace)),
        validations=(
            Validation(
                expression=f"{value} == '' || {unchanged_on_update(value)} || "
                f"(namespaceObject.metadata.name in {allowed} && {value} in {allowed}[namespaceObject.metadata.name])",
                message=f"this team may not name that {PRIORITY_LABEL}",
                message_expression=f"'{PRIORITY_LABEL} ' + {value} + ' is not one team ' + "
                "namespaceObject.metadata.name + ' may name (' + "
                f"({allowed}[namespaceObject.metadata.name]).join(', ') + '); the stack lists the teams of each "
                "priority (gpucluster:priorities.workload[].teams)'",
            ),
        ),
    )


WORKLOADS = {
    "apiGroups": [KUEUE_GROUP],
    "apiVersions": [KUEUE_VERSION],
    "resources": ["workloads"],
    "operations": ["CREATE", "UPDATE"],
}


def research_priority_by_team_on_workloads(inputs: GuardrailInputs) -> Policy | None:
    """The same rule on a Workload sent straight to the API server: Kueue copies a job's priority into the
    Workload it creates (held above), but one created by hand would reach the queue with any priority."""
    if not inputs.priorities_by_namespace:
        return None
    allowed = cel({ns: sorted(names) for ns, names in inputs.priorities_by_namespace.items()})
    ref = "object.spec.priorityClassRef"
    value = f"((has({ref}) && {ref}.kind == 'WorkloadPriorityClass') ? {ref}.name : '')"
    return Policy(
        name="research-priority-by-team-on-workloads",
        summary="A team's Workloads name only the research priorities (WorkloadPriorityClass) the stack allows that "
        "team.",
        resource_rules=(WORKLOADS,),
        namespace_selector=is_in(list(inputs.priorities_by_namespace)),
        validations=(
            Validation(
                expression=f"{value} == '' || {unchanged_on_update(value)} || "
                f"(namespaceObject.metadata.name in {allowed} && {value} in {allowed}[namespaceObject.metadata.name])",
                message="this team may not name that WorkloadPriorityClass",
                message_expression=f"'WorkloadPriorityClass ' + {value} + ' is not one team ' + "
                "namespaceObject.metadata.name + ' may name (' + "
                f"({allowed}[namespaceObject.metadata.name]).join(', ') + '); the stack lists the teams of each "
                "priority (gpucluster:priorities.workload[].teams)'",
            ),
        ),
    )


def training_pods_stay_baseline(inputs: GuardrailInputs) -> Policy | None:
    """Where the team namespaces enforce ``privileged`` (IPC_LOCK), the rest of ``baseline`` held by policy: no
    privileged container, no host namespaces, no hostPath volume, no host port, no capability beyond baseline's
    and IPC_LOCK. (Baseline's sysctl, /proc mount and Windows host-process controls are not repeated here.)"""
    if not inputs.ipc_lock:
        return None
    allowed = cel([*BASELINE_CAPABILITIES, IPC_LOCK])
    spec = "object.spec"
    return Policy(
        name="training-pods-stay-baseline",
        summary="Pods in team namespaces hold Pod Security baseline with one addition, IPC_LOCK for RDMA.",
        resource_rules=(PODS,),
        namespace_selector=is_in(inputs.training_namespaces),
        variables=(CONTAINERS,),
        validations=(
            Validation(
                expression=" && ".join(
                    f"!(has({spec}.{host}) && {spec}.{host})" for host in ("hostNetwork", "hostPID", "hostIPC")
                ),
                message="a training pod may not share the node's network, PID or IPC namespace",
            ),
            Validation(
                expression=f"!has({spec}.volumes) || {spec}.volumes.all(v, !has(v.hostPath))",
                message="a training pod may not mount a hostPath volume (other teams' data and the node live there)",
            ),
            Validation(
                expression="variables.containers.all(c, !has(c.securityContext) || !has(c.securityContext.privileged)"
                " || !c.securityContext.privileged)",
                message="a training container may not be privileged",
            ),
            Validation(
                expression="variables.containers.all(c, !has(c.ports) || c.ports.all(p, !has(p.hostPort) || "
                "p.hostPort == 0))",
                message="a training container may not take a host port",
            ),
            Validation(
                expression="variables.containers.all(c, !has(c.securityContext) || "
                "!has(c.securityContext.capabilities) || !has(c.securityContext.capabilities.add) || "
                f"c.securityContext.capabilities.add.all(a, a in {allowed}))",
                message=f"a training container may add only baseline's capabilities and {IPC_LOCK}",
            ),
        ),
    )


#: Every rule, in the order they are applied and documented.
# --- what a controller of ours may write --------------------------------------------------------------------------

NODE_UPDATES = {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["nodes"], "operations": ["UPDATE"]}
#: A Node's spec fields besides its taints (``configSource`` is long deprecated and still a field).
NODE_SPEC_FIELDS = ("podCIDR", "podCIDRs", "providerID", "unschedulable", "configSource")


def map_unchanged_but(obj: str, old: str, keys: Sequence[str]) -> str:
    """CEL: the map ``obj`` holds what ``old`` held, key for key and value for value, except ``keys``."""
    allowed = cel(list(keys))
    return (
        f"(!has({obj}) || {obj}.all(k, k in {allowed} || (has({old}) && k in {old} && {old}[k] == {obj}[k])))"
        f" && (!has({old}) || {old}.all(k, k in {allowed} || (has({obj}) && k in {obj})))"
    )


def field_unchanged(obj: str, old: str) -> str:
    """CEL: the optional field is absent in both, or present in both and equal."""
    return f"(has({obj}) == has({old}) && (!has({obj}) || {obj} == {old}))"


def node_marks(
    name: str, who: str, user: str, *, taint: tuple[str, str], labels: Sequence[str], annotations: Sequence[str]
) -> Policy:
    """A controller that may patch every Node (RBAC cannot name them) held to its own marks: ``taint`` (key,
    effect) added or removed, ``labels`` and ``annotations`` set or removed; every other taint, label, annotation,
    spec field, finalizer and owner as it was."""
    key, effect = taint
    others = "(has({o}.spec.taints) ? {o}.spec.taints : []).filter(t, t.key != " + cel(key) + ")"
    spec_fields = " && ".join(field_unchanged(f"object.spec.{f}", f"oldObject.spec.{f}") for f in NODE_SPEC_FIELDS)
    marks = ", ".join([*labels, *annotations])
    return Policy(
        name=name,
        summary=f"The {who} changes a Node only by its taint ({key}, {effect}) and its marks ({marks}).",
        resource_rules=(NODE_UPDATES,),
        match_conditions=_is_user("is-" + who.replace(" ", "-"), user),
        validations=(
            Validation(
                expression=f"{others.format(o='object')} == {others.format(o='oldObject')}"
                f" && (!has(object.spec.taints) || object.spec.taints.all(t, t.key != {cel(key)}"
                f" || t.effect == {cel(effect)}))",
                message=f"the {who} may add or remove only its own taint ({key}, {effect}); every other taint stays "
                "as it was",
            ),
            Validation(
                expression=map_unchanged_but("object.metadata.labels", "oldObject.metadata.labels", labels),
                message=f"the {who} may set only its label(s) {', '.join(labels) or '(none)'}",
            ),
            Validation(
                expression=map_unchanged_but(
                    "object.metadata.annotations", "oldObject.metadata.annotations", annotations
                ),
                message=f"the {who} may set only its annotations ({', '.join(annotations) or 'none'})",
            ),
            Validation(
                expression=f"{spec_fields}"
                f" && {field_unchanged('object.metadata.finalizers', 'oldObject.metadata.finalizers')}"
                f" && {field_unchanged('object.metadata.ownerReferences', 'oldObject.metadata.ownerReferences')}",
                message=f"the {who} may not change a Node's spec (but its taint), finalizers or owners",
            ),
        ),
    )


def quarantine_writes_only_its_marks(inputs: GuardrailInputs) -> Policy | None:
    """The quarantine controller: its NoExecute taint, its label, its reason and time annotations."""
    if inputs.quarantine_user is None:
        return None
    return node_marks(
        "quarantine-writes-only-its-marks",
        "quarantine controller",
        inputs.quarantine_user,
        taint=(QUARANTINE_TAINT_KEY, QUARANTINE_TAINT_EFFECT),
        labels=[QUARANTINED_LABEL],
        annotations=QUARANTINE_ANNOTATIONS,
    )


def make_before_break_writes_only_its_reservations(inputs: GuardrailInputs) -> Policy | None:
    """Make-before-break reserves a gang's nodes: its NoSchedule taint and label under the reservation key."""
    if inputs.make_before_break is None:
        return None
    mbb = inputs.make_before_break
    return node_marks(
        "make-before-break-writes-only-its-reservations",
        "make-before-break controller",
        mbb.user,
        taint=(mbb.reservation_key, "NoSchedule"),
        labels=[mbb.reservation_key],
        annotations=[],
    )


DEPLOYMENT_UPDATES = {
    "apiGroups": ["apps"],
    "apiVersions": ["v1"],
    "resources": ["deployments"],
    "operations": ["UPDATE"],
}
#: A Deployment's spec fields besides its pod template.
DEPLOYMENT_SPEC_FIELDS = (
    "replicas",
    "selector",
    "strategy",
    "minReadySeconds",
    "revisionHistoryLimit",
    "paused",
    "progressDeadlineSeconds",
)
POD_UPDATES = {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["UPDATE"]}
WORKLOAD_STATUS_UPDATES = {
    "apiGroups": [KUEUE_GROUP],
    "apiVersions": [KUEUE_VERSION],
    "resources": ["workloads/status"],
    "operations": ["UPDATE"],
}
#: A Workload's status fields besides ``admissionChecks`` (Kueue's v1beta2 schema).
WORKLOAD_STATUS_FIELDS = (
    "accumulatedPastExecutionTimeSeconds",
    "admission",
    "clusterName",
    "conditions",
    "nominatedClusterNames",
    "preemptionGates",
    "reclaimablePods",
    "requeueState",
    "resourceRequests",
    "schedulingStats",
    "unhealthyNodes",
)


def make_before_break_moves_only_by_annotations(inputs: GuardrailInputs) -> Policy | None:
    """It moves a Deployment by its annotations and its template's placement epoch; the rest is its owner's."""
    if inputs.make_before_break is None:
        return None
    mbb = inputs.make_before_break
    spec_fields = " && ".join(
        field_unchanged(f"object.spec.{f}", f"oldObject.spec.{f}") for f in DEPLOYMENT_SPEC_FIELDS
    )
    template = "object.spec.template.metadata"
    old_template = "oldObject.spec.template.metadata"
    placement = mbb.template_annotations
    return Policy(
        name="make-before-break-moves-only-by-annotations",
        summary="The make-before-break controller changes a Deployment only by its own annotations and its "
        "template's placement annotations.",
        resource_rules=(DEPLOYMENT_UPDATES,),
        match_conditions=_is_user("is-make-before-break", mbb.user),
        validations=(
            Validation(
                expression=f"{spec_fields} && object.spec.template.spec == oldObject.spec.template.spec"
                f" && {map_unchanged_but(f'{template}.labels', f'{old_template}.labels', [])}"
                f" && {map_unchanged_but(f'{template}.annotations', f'{old_template}.annotations', placement)}"
                f" && {_metadata_unchanged_but(mbb.deployment_annotations)}",
                message="the make-before-break controller may change only its annotations on a Deployment ("
                + ", ".join(mbb.deployment_annotations)
                + ") and on its pod template ("
                + ", ".join(mbb.template_annotations)
                + ")",
            ),
        ),
    )


def make_before_break_marks_pods_only_for_removal(inputs: GuardrailInputs) -> Policy | None:
    """It marks the replica to remove first by the pod-deletion-cost annotation; nothing else of a pod."""
    if inputs.make_before_break is None:
        return None
    mbb = inputs.make_before_break
    return Policy(
        name="make-before-break-marks-pods-only-for-removal",
        summary=f"The make-before-break controller changes a pod only by its annotation {mbb.pod_annotation}.",
        resource_rules=(POD_UPDATES,),
        match_conditions=_is_user("is-make-before-break", mbb.user),
        validations=(
            Validation(
                expression=f"object.spec == oldObject.spec && {_metadata_unchanged_but([mbb.pod_annotation])}",
                message=f"the make-before-break controller may change only a pod's annotation {mbb.pod_annotation}",
            ),
        ),
    )


def make_before_break_writes_only_its_check(inputs: GuardrailInputs) -> Policy | None:
    """It sets its own AdmissionCheck's entry in a Workload's status; Kueue's fields and other checks' are Kueue's."""
    if inputs.make_before_break is None:
        return None
    mbb = inputs.make_before_break
    status_fields = " && ".join(
        field_unchanged(f"object.status.{f}", f"oldObject.status.{f}") for f in WORKLOAD_STATUS_FIELDS
    )
    others = (
        "(has({o}.status.admissionChecks) ? {o}.status.admissionChecks : []).filter(c, c.name != "
        + cel(mbb.check_name)
        + ")"
    )
    return Policy(
        name="make-before-break-writes-only-its-check",
        summary=f"The make-before-break controller changes a Workload's status only by its check {mbb.check_name}.",
        resource_rules=(WORKLOAD_STATUS_UPDATES,),
        match_conditions=_is_user("is-make-before-break", mbb.user),
        validations=(
            Validation(
                expression=f"{status_fields} && {others.format(o='object')} == {others.format(o='oldObject')}",
                message=f"the make-before-break controller may set only its own check ({mbb.check_name}) in a "
                "Workload's status",
            ),
        ),
    )


CLUSTER_QUEUE_UPDATES = {
    "apiGroups": [KUEUE_GROUP],
    "apiVersions": [KUEUE_VERSION],
    "resources": ["clusterqueues"],
    "operations": ["UPDATE"],
}
#: A ClusterQueue's spec fields besides ``resourceGroups`` (Kueue's v1beta2 schema).
CLUSTER_QUEUE_SPEC_FIELDS = (
    "admissionChecksStrategy",
    "admissionScope",
    "cohortName",
    "fairSharing",
    "flavorFungibility",
    "namespaceSelector",
    "preemption",
    "queueingStrategy",
    "stopPolicy",
)


def quota_controller_writes_only_quotas(inputs: GuardrailInputs) -> Policy | None:
    """The quota controller applies ``spec.resourceGroups`` of its ClusterQueues (RBAC names them); this holds it to
    the quantities there: the groups, their resources and flavors, and everything else stay as they were."""
    if inputs.quota_user is None:
        return None
    groups = "{o}.spec.resourceGroups"
    shape = (
        "g.coveredResources",
        "g.flavors.map(f, f.name)",
        "g.flavors.map(f, f.resources.map(r, r.name))",
    )
    same_shape = " && ".join(
        f"{groups.format(o='object')}.map(g, {part}) == {groups.format(o='oldObject')}.map(g, {part})" for part in shape
    )
    spec_fields = " && ".join(
        field_unchanged(f"object.spec.{f}", f"oldObject.spec.{f}") for f in CLUSTER_QUEUE_SPEC_FIELDS
    )
    return Policy(
        name="quota-controller-writes-only-quotas",
        summary="The quota controller changes a ClusterQueue only by the quantities of its resource groups.",
        resource_rules=(CLUSTER_QUEUE_UPDATES,),
        match_conditions=_is_user("is-quota-controller", inputs.quota_user),
        validations=(
            Validation(
                expression=f"{spec_fields} && {_metadata_unchanged_but()}",
                message="the quota controller may change only spec.resourceGroups of a ClusterQueue",
            ),
            Validation(
                expression=f"has(object.spec.resourceGroups) == has(oldObject.spec.resourceGroups)"
                f" && (!has(object.spec.resourceGroups) || ({same_shape}))",
                message="the quota controller may change only the quantities in spec.resourceGroups (nominalQuota, "
                "borrowingLimit, lendingLimit): the groups, their resources and flavors stay as they are",
            ),
        ),
    )


WORKLOAD_UPDATES = {
    "apiGroups": [KUEUE_GROUP],
    "apiVersions": [KUEUE_VERSION],
    "resources": ["workloads"],
    "operations": ["UPDATE"],
}
JOBSET_UPDATES = {**JOBSETS, "operations": ["UPDATE"]}
#: A Workload's spec fields besides ``active`` (Kueue's v1beta2 schema).
WORKLOAD_SPEC_FIELDS = (
    "maximumExecutionTimeSeconds",
    "podSets",
    "preemptionGates",
    "priority",
    "priorityClassRef",
    "queueName",
)


def _is_user(name: str, user: str) -> tuple[Mapping[str, str], ...]:
    return ({"name": name, "expression": f"request.userInfo.username == {cel(user)}"},)


def _metadata_unchanged_but(annotations: Sequence[str] = ()) -> str:
    return (
        f"{map_unchanged_but('object.metadata.labels', 'oldObject.metadata.labels', [])}"
        f" && {map_unchanged_but('object.metadata.annotations', 'oldObject.metadata.annotations', annotations)}"
    )


def jobset_annotation_only(name: str, who: str, user: str, annotation: str) -> Policy:
    """A daemon that patches every JobSet of the team namespaces (RBAC cannot name them) held to one annotation."""
    return Policy(
        name=name,
        summary=f"The {who} changes a JobSet only by its annotation {annotation}.",
        resource_rules=(JOBSET_UPDATES,),
        match_conditions=_is_user("is-" + who.replace(" ", "-"), user),
        validations=(
            Validation(
                expression=f"object.spec == oldObject.spec && {_metadata_unchanged_but([annotation])}",
                message=f"the {who} may change only a JobSet's annotation {annotation}",
            ),
        ),
    )


def interruptions_writes_only_its_ledger(inputs: GuardrailInputs) -> Policy | None:
    """The interruption accounting daemon's record of a job's interruptions."""
    if inputs.interruptions_user is None:
        return None
    return jobset_annotation_only(
        "interruptions-writes-only-its-ledger",
        "interruption accounting daemon",
        inputs.interruptions_user,
        INTERRUPTIONS_LEDGER_ANNOTATION,
    )


def stall_detector_writes_only_its_restart_record(inputs: GuardrailInputs) -> Policy | None:
    """The stall detector's record of the in-place restart it started (it evicts the gang's pods for the rest)."""
    if inputs.stall_detector_user is None:
        return None
    return jobset_annotation_only(
        "stall-detector-writes-only-its-restart-record",
        "stall detector",
        inputs.stall_detector_user,
        STALL_RESTART_ANNOTATION,
    )


def interruptions_only_stops_workloads(inputs: GuardrailInputs) -> Policy | None:
    """It stops a job at its restart bound by ``spec.active: false``; it may not resume one or change anything else."""
    if inputs.interruptions_user is None:
        return None
    spec_fields = " && ".join(field_unchanged(f"object.spec.{f}", f"oldObject.spec.{f}") for f in WORKLOAD_SPEC_FIELDS)
    active = "(!has({o}.spec.active) || {o}.spec.active)"
    return Policy(
        name="interruptions-only-stops-workloads",
        summary="The interruption accounting daemon changes a Workload only by setting spec.active to false.",
        resource_rules=(WORKLOAD_UPDATES,),
        match_conditions=_is_user("is-interruptions", inputs.interruptions_user),
        validations=(
            Validation(
                expression=f"{spec_fields} && {_metadata_unchanged_but()}"
                f" && (!{active.format(o='object')} || {active.format(o='oldObject')})",
                message="the interruption accounting daemon may only set a Workload's spec.active to false",
            ),
        ),
    )


NODE_CREATES = {**NODE_UPDATES, "operations": ["CREATE"]}


def virtual_node_registers_only_its_node(inputs: GuardrailInputs) -> Policy | None:
    """RBAC cannot name the object of a create: the virtual node's identity may create Nodes, this holds it to its
    own (a second Node would take pods the scheduler thinks are placed)."""
    if inputs.virtual_node is None:
        return None
    user, node = inputs.virtual_node
    return Policy(
        name="virtual-node-registers-only-its-node",
        summary=f"The virtual node registers only the Node {node}.",
        resource_rules=(NODE_CREATES,),
        match_conditions=_is_user("is-virtual-node", user),
        validations=(
            Validation(
                expression=f"object.metadata.name == {cel(node)}",
                message=f"the virtual node may register only the Node {node}",
            ),
        ),
    )


RULES: list[Callable[[GuardrailInputs], Policy | None]] = [
    gpu_visibility_is_requested,
    confinement_stays_on,
    team_pods_belong_to_jobs,
    training_priority_pods_belong_to_jobs,
    training_priority_jobs_are_queued,
    training_priority_jobsets_are_queued,
    research_priority_by_team,
    research_priority_by_team_on_workloads,
    training_pods_stay_baseline,
    quarantine_writes_only_its_marks,
    quota_controller_writes_only_quotas,
    interruptions_writes_only_its_ledger,
    interruptions_only_stops_workloads,
    stall_detector_writes_only_its_restart_record,
    make_before_break_writes_only_its_reservations,
    make_before_break_moves_only_by_annotations,
    make_before_break_marks_pods_only_for_removal,
    make_before_break_writes_only_its_check,
    virtual_node_registers_only_its_node,
]


def policies(inputs: GuardrailInputs) -> list[Policy]:
    return [p for rule in RULES if (p := rule(inputs)) is not None]


def manifests(policy: Policy) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``ValidatingAdmissionPolicy`` and its ``Deny`` binding."""
    name = NAME_PREFIX + policy.name
    validations = []
    for v in policy.validations:
        out: dict[str, Any] = {"expression": v.expression, "message": v.message, "reason": "Forbidden"}
        if v.message_expression:
            out["messageExpression"] = v.message_expression
        validations.append(out)
    spec: dict[str, Any] = {
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": [dict(r) for r in policy.resource_rules]},
        "validations": validations,
    }
    if policy.variables:
        spec["variables"] = [dict(v) for v in policy.variables]
    if policy.match_conditions:
        spec["matchConditions"] = [dict(c) for c in policy.match_conditions]
    doc = {
        "apiVersion": ADMISSION_API,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "annotations": {"gpucluster.io/summary": policy.summary}},
        "spec": spec,
    }
    match: dict[str, Any] = {}
    if policy.namespace_selector:
        match["namespaceSelector"] = dict(policy.namespace_selector)
    binding_spec: dict[str, Any] = {"policyName": name, "validationActions": ["Deny"]}
    if match:
        binding_spec["matchResources"] = match
    binding = {
        "apiVersion": ADMISSION_API,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": binding_spec,
    }
    return doc, binding


# --- what a team may do ----------------------------------------------------------------------------------------------

#: A team's Role in its namespace: submit JobSets and delete its own, read what follows from them. No pod, Job or
#: Workload is written by hand, no exec, no Secret, no other namespace.
TEAM_RULES: tuple[dict[str, Any], ...] = (
    {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["get", "list", "watch", "create", "delete"]},
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "list", "watch"]},
    {
        "apiGroups": [""],
        "resources": ["pods", "pods/log", "events", "persistentvolumeclaims"],
        "verbs": ["get", "list", "watch"],
    },
    {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads", "localqueues"], "verbs": ["get", "list", "watch"]},
)
TEAM_ROLE = "gpucluster-team"
RELIABILITY_READER = "gpucluster-teams-read-reliability"


def team_role(namespace: str, group: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The team's Role and the RoleBinding that gives it to ``group``, in ``namespace``."""
    role = {"metadata": {"name": TEAM_ROLE, "namespace": namespace}, "rules": [dict(r) for r in TEAM_RULES]}
    binding = {
        "metadata": {"name": TEAM_ROLE, "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": TEAM_ROLE},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}],
    }
    return role, binding


def reliability_reader(namespace: str, configmap: str, groups: Sequence[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Every team reads the one ConfigMap ``gpucluster submit`` sizes the checkpoint interval from, nothing else."""
    role = {
        "metadata": {"name": RELIABILITY_READER, "namespace": namespace},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"], "resourceNames": [configmap]}],
    }
    binding = {
        "metadata": {"name": RELIABILITY_READER, "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": RELIABILITY_READER},
        "subjects": [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g} for g in sorted(set(groups))
        ],
    }
    return role, binding
