"""What a workload may be, whoever sends it: GPU visibility, confinement, priorities held to queues and teams,
Pod Security baseline for training pods on a fabric.

Pods are checked at creation, whoever creates them (a Job's controller, an admin), so a rule holds even for an
object that never went through ``gpucluster submit``. Jobs and JobSets are checked at creation and whenever the
field a rule reads changes, so an object from before a policy is not stuck on its next unrelated update.

What they do not see: a value that arrives through ``envFrom`` (a ConfigMap's keys are not in the pod), and
ephemeral containers added later through ``pods/ephemeralcontainers`` (only ``kubectl debug`` does that, and
the team role does not grant it).
"""

from __future__ import annotations

from components.guardrails_policies.model import (
    JOBS,
    JOBSETS,
    POD_CONTAINERS,
    PODS,
    GuardrailInputs,
    Policy,
    Validation,
    cel,
    is_in,
    label,
    not_in,
    owned_by,
    team_pod_rule,
    unchanged_on_update,
)
from contract.constants import KUEUE_GROUP, KUEUE_VERSION, PRIORITY_LABEL, QUEUE_LABEL
from contract.guardrails_settings import (
    BASELINE_CAPABILITIES,
    CONFINEMENT_ANNOTATION_PREFIXES,
    GPU_VISIBILITY_ENV,
    UNCONFINED,
)
from contract.jobset_settings import JOBSET_API

#: The capability a pod on an RDMA fabric adds beyond baseline's (``fabric_settings.RDMA_CAPABILITY``).
IPC_LOCK = "IPC_LOCK"

#: A pod's containers and init containers, as a policy variable.
CONTAINERS = {"name": "containers", "expression": POD_CONTAINERS.format(spec="object.spec")}


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


def _in_team(inputs: GuardrailInputs) -> str:
    return f"namespaceObject.metadata.name in {cel(sorted(inputs.training_namespaces))}"


def _why(inputs: GuardrailInputs) -> str:
    return f"{inputs.training_priority_class} preempts inference: only jobs Kueue admits in a team namespace take it"


def team_pods_belong_to_jobs(inputs: GuardrailInputs) -> Policy:
    """Kueue manages every Job in a team namespace; a bare pod there would take GPUs around the queues."""
    return team_pod_rule(
        inputs,
        "team-pods-belong-to-jobs",
        "Every pod in a team namespace is a Job's (Kueue manages every Job there): none runs around the queues.",
        Validation(
            expression=owned_by("Job", "batch/v1"),
            message="a pod in a team namespace that no Job owns would run around the queues; submit a job "
            "(gpucluster submit)",
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
                expression=f"{priority} != {cls} || ({_in_team(inputs)} && {owned_by('Job', 'batch/v1')})",
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
                f"({queued} || {owned_by('JobSet', JOBSET_API)}))",
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


def _fallback_why(inputs: GuardrailInputs) -> str:
    return (
        "Kueue would rank it by its pods' PriorityClass (" + inputs.training_priority_class + "), above every "
        "research priority of every team"
    )


def _allowed_or_none(inputs: GuardrailInputs, value: str) -> str:
    """CEL message: what a team named (``value``, may be empty) and what it may name instead."""
    allowed = cel({ns: sorted(names) for ns, names in inputs.priorities_by_namespace.items()})
    may = f"({allowed}[namespaceObject.metadata.name]).join(', ')"
    return (
        f"({value} == '' ? 'no research priority named: ' + {cel(_fallback_why(inputs))} + '; name one team ' + "
        f"namespaceObject.metadata.name + ' may name (' + {may} + ')' : {value} + ' is not one team ' + "
        f"namespaceObject.metadata.name + ' may name (' + {may} + ')') + '; the stack lists the teams of each "
        "priority (gpucluster:priorities.workload[].teams)'"
    )


def research_priority_by_team(inputs: GuardrailInputs) -> Policy | None:
    """Every Job and JobSet of a team names one of the research priorities the stack allows that team. One that
    names none is refused too: Kueue would take its priority from its pods' PriorityClass, the training one, a
    hundred times every research priority (Kueue's fallback, ``jobframework.ExtractPriority``). A Job a JobSet
    owns is the JobSet's (Kueue manages the JobSet, whose label is held here)."""
    if not inputs.priorities_by_namespace:
        return None
    allowed = cel({ns: sorted(names) for ns, names in inputs.priorities_by_namespace.items()})
    value = label("object", PRIORITY_LABEL)
    jobsets_job = f"(object.kind == 'Job' && {owned_by('JobSet', JOBSET_API)})"
    return Policy(
        name="research-priority-by-team",
        summary=f"A team's Jobs and JobSets each name a research priority ({PRIORITY_LABEL}) the stack allows that "
        "team; none may go without one.",
        resource_rules=(JOBS, JOBSETS),
        namespace_selector=is_in(list(inputs.priorities_by_namespace)),
        validations=(
            Validation(
                expression=f"({value} == '' && {jobsets_job}) || {unchanged_on_update(value)} || "
                f"(namespaceObject.metadata.name in {allowed} && {value} in {allowed}[namespaceObject.metadata.name])",
                message=f"a team's job names no {PRIORITY_LABEL}, or one this team may not name",
                message_expression=f"'{PRIORITY_LABEL}: ' + " + _allowed_or_none(inputs, value),
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
    """The same rule on the Workloads themselves, whoever creates them: Kueue copies a job's research priority into
    the Workload it makes (held above), a Workload sent by hand could name any, and a Workload whose priority comes
    from a pod PriorityClass (Kueue's fallback for a job that names no research priority) would outrank every team.
    Its ``spec.priority`` is the value of the class it names (the stack's), so a hand-set number cannot either."""
    if not inputs.priorities_by_namespace:
        return None
    allowed = cel({ns: sorted(names) for ns, names in inputs.priorities_by_namespace.items()})
    ref = "object.spec.priorityClassRef"
    value = f"((has({ref}) && {ref}.kind == 'WorkloadPriorityClass') ? {ref}.name : '')"
    source = f"(has({ref}) ? {ref}.kind + '/' + {ref}.name : '')"
    values = cel(dict(inputs.workload_priority_values))
    priority = "(has(object.spec.priority) ? object.spec.priority : 0)"
    validations = [
        Validation(
            expression=f"{unchanged_on_update(source)} || "
            f"(namespaceObject.metadata.name in {allowed} && {value} in {allowed}[namespaceObject.metadata.name])",
            message="a team's Workload names no WorkloadPriorityClass, or one this team may not name",
            message_expression="'WorkloadPriorityClass: ' + " + _allowed_or_none(inputs, value),
        )
    ]
    if inputs.workload_priority_values:
        validations.append(
            Validation(
                expression=f"{unchanged_on_update(priority)} || !({value} in {values}) || "
                f"!has(object.spec.priority) || object.spec.priority == {values}[{value}]",
                message="a team's Workload sets spec.priority to another value than its WorkloadPriorityClass has",
                message_expression=f"'spec.priority ' + string({priority}) + ' is not the value of "
                f"WorkloadPriorityClass ' + {value} + ' (' + string({values}[{value}]) + ')'",
            )
        )
    return Policy(
        name="research-priority-by-team-on-workloads",
        summary="A team's Workloads take their priority from a research priority (WorkloadPriorityClass) the stack "
        "allows that team, at that class's value.",
        resource_rules=(WORKLOADS,),
        namespace_selector=is_in(list(inputs.priorities_by_namespace)),
        validations=tuple(validations),
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
