"""What holds the verified-checkpoint record true: only the verifier writes it, and the verifier writes nothing else.

RBAC lets the verifier patch the ``checkpoints`` claim and create Jobs in every team namespace; a stolen token of it
could otherwise rewrite the job's own reports or run any image there. And a trainer's ServiceAccount may annotate
the claim (its reports): without a rule it could write its own record and call a corrupt checkpoint verified.
"""

from __future__ import annotations

from components.guardrails_policies.controllers import KEEPS, field_unchanged, map_unchanged_but
from components.guardrails_policies.model import JOB_CREATES, JOBS, GuardrailInputs, Policy, Validation, cel, is_in
from contract.checkpoints import CHECKPOINTS_MOUNT
from contract.constants import CHECKPOINT_CLAIM, RESUME_CONFIGMAP, VERIFIED_ANNOTATION_PREFIX
from contract.controllers.checkpoint_verifier import (
    APP,
    CHECK_MODULE,
    CHECK_OF_LABEL,
    DRILL_MODULE,
    MANAGED_BY_LABEL,
    NAME,
)
from contract.spec import PYTHON

CLAIM_WRITES = {
    "apiGroups": [""],
    "apiVersions": ["v1"],
    "resources": ["persistentvolumeclaims"],
    "operations": ["CREATE", "UPDATE"],
}
CLAIM_UPDATES = {**CLAIM_WRITES, "operations": ["UPDATE"]}
CONFIGMAP_WRITES = {
    "apiGroups": [""],
    "apiVersions": ["v1"],
    "resources": ["configmaps"],
    "operations": ["CREATE", "UPDATE"],
}


ANNOTATIONS, OLD_ANNOTATIONS = "object.metadata.annotations", "oldObject.metadata.annotations"
#: CEL: an annotation key ``k`` is a verifier's record.
IS_RECORD = f"k.startsWith({cel(VERIFIED_ANNOTATION_PREFIX)})"


def _kept(pick: str) -> str:
    """CEL: every annotation whose key ``k`` meets ``pick`` is as it was (none added, changed or removed)."""
    obj, old = ANNOTATIONS, OLD_ANNOTATIONS
    return f"{_none_new(pick)} && (!has({old}) || {old}.all(k, !({pick}) || (has({obj}) && k in {obj})))"


def _none_new(pick: str) -> str:
    """CEL: no annotation whose key ``k`` meets ``pick`` is added or changed (one may be removed)."""
    obj, old = ANNOTATIONS, OLD_ANNOTATIONS
    return f"(!has({obj}) || {obj}.all(k, !({pick}) || (has({old}) && k in {old} && {old}[k] == {obj}[k])))"


def verified_records_are_the_verifiers(inputs: GuardrailInputs) -> Policy | None:
    """Nobody but the verifier adds or changes a ``verified.checkpoint.gpucluster.io/`` annotation on a team's claim:
    a job reports its checkpoints, it never vouches for them. Removing one is allowed (an operator starting a job
    afresh): without its record nothing of the job counts as verified, which vouches for nothing."""
    user = inputs.user_of(NAME)
    if user is None or not inputs.training_namespaces:
        return None
    created = f"(!has({ANNOTATIONS}) || {ANNOTATIONS}.all(k, !({IS_RECORD})))"
    return Policy(
        name="verified-checkpoint-records-are-the-verifiers",
        summary=f"Only the checkpoint verifier writes the {VERIFIED_ANNOTATION_PREFIX}<job> records on a team's "
        "claims.",
        resource_rules=(CLAIM_WRITES,),
        namespace_selector=is_in(list(inputs.training_namespaces)),
        match_conditions=({"name": "not-the-verifier", "expression": f"request.userInfo.username != {cel(user)}"},),
        validations=(
            Validation(
                expression=f"request.operation == 'CREATE' ? {created} : {_none_new(IS_RECORD)}",
                message=f"only the checkpoint verifier writes {VERIFIED_ANNOTATION_PREFIX}<job>: a job reports its "
                f"checkpoints (checkpoint.gpucluster.io/<job>), it does not vouch for them",
            ),
        ),
    )


def resume_entries_are_the_verifiers(inputs: GuardrailInputs) -> Policy | None:
    """Nobody but the verifier writes the entries of a team's ``checkpoint-resume`` ConfigMap, which a restart resumes
    from: it is created empty (by the stack) and only the verifier's token changes what it holds. A team's account
    that could write it would point a restart at a checkpoint nobody verified."""
    user = inputs.user_of(NAME)
    if user is None or not inputs.training_namespaces:
        return None
    data, old = "object.data", "oldObject.data"
    empty = f"(!has({data}) || size({data}) == 0) && !has(object.binaryData)"
    unchanged = (
        f"((!has({data}) && !has({old})) || (has({data}) && has({old}) && {data} == {old}))"
        " && (!has(object.binaryData) || (has(oldObject.binaryData) && object.binaryData == oldObject.binaryData))"
    )
    return Policy(
        name="checkpoint-resume-entries-are-the-verifiers",
        summary=f"Only the checkpoint verifier writes the entries of a team's {RESUME_CONFIGMAP} ConfigMap.",
        resource_rules=(CONFIGMAP_WRITES,),
        namespace_selector=is_in(list(inputs.training_namespaces)),
        match_conditions=(
            {"name": "the-resume-configmap", "expression": f"object.metadata.name == {cel(RESUME_CONFIGMAP)}"},
            {"name": "not-the-verifier", "expression": f"request.userInfo.username != {cel(user)}"},
        ),
        validations=(
            Validation(
                expression=f"request.operation == 'CREATE' ? {empty} : {unchanged}",
                message=f"only the checkpoint verifier writes the entries of {RESUME_CONFIGMAP}: a restart resumes "
                "from the checkpoint it names, and only a verified one may be named",
            ),
        ),
    )


def checkpoint_verifier_deletes_only_its_jobs(inputs: GuardrailInputs) -> Policy | None:
    """The verifier's token deletes a Job only when it is one of its own (a check or drill Job Kueue never admitted):
    never a team's training."""
    user = inputs.user_of(NAME)
    if user is None:
        return None
    labels = "oldObject.metadata.labels"
    return Policy(
        name="checkpoint-verifier-deletes-only-its-jobs",
        summary="The checkpoint verifier deletes only its own check and drill Jobs.",
        resource_rules=({**JOBS, "operations": ["DELETE"]},),
        match_conditions=({"name": "is-the-verifier", "expression": f"request.userInfo.username == {cel(user)}"},),
        validations=(
            Validation(
                expression=f"has({labels}) && {cel(CHECK_OF_LABEL)} in {labels}"
                f" && {cel(MANAGED_BY_LABEL)} in {labels} && {labels}[{cel(MANAGED_BY_LABEL)}] == {cel(APP)}",
                message=f"the checkpoint verifier may delete only its own Jobs ({CHECK_OF_LABEL}, "
                f"{MANAGED_BY_LABEL}: {APP})",
            ),
        ),
    )


def checkpoint_verifier_changes_claims_only_by_its_records(inputs: GuardrailInputs) -> Policy | None:
    """The verifier's token changes a claim only by its record annotations: not the job's reports, not the claim's
    spec, labels, owners or finalizers."""
    user = inputs.user_of(NAME)
    if user is None:
        return None
    return Policy(
        name="checkpoint-verifier-changes-claims-only-by-its-records",
        summary=f"The checkpoint verifier changes a claim only by its {VERIFIED_ANNOTATION_PREFIX}<job> records.",
        resource_rules=(CLAIM_UPDATES,),
        match_conditions=({"name": "is-the-verifier", "expression": f"request.userInfo.username == {cel(user)}"},),
        validations=(
            Validation(
                expression=f"object.spec == oldObject.spec"
                f" && {_kept('!' + IS_RECORD)}"
                f" && {map_unchanged_but('object.metadata.labels', 'oldObject.metadata.labels', [])}"
                f" && {field_unchanged('object.metadata.ownerReferences', 'oldObject.metadata.ownerReferences')}"
                f" && {field_unchanged('object.metadata.finalizers', 'oldObject.metadata.finalizers')}",
                message=f"the checkpoint verifier may change only a claim's {VERIFIED_ANNOTATION_PREFIX}<job> "
                "annotations" + KEEPS,
            ),
        ),
    )


def checkpoint_verifier_creates_only_check_jobs(inputs: GuardrailInputs) -> Policy | None:
    """Every Job the verifier's token creates is a check or a restore drill: its image (the stack's), its command
    (the check of a job's directory, or the drill of one checkpoint under it), one container, the ``checkpoints``
    claim read-only and nothing else mounted, no GPU, no service-account token, labelled as the verifier's."""
    user = inputs.user_of(NAME)
    if user is None or inputs.checkpoint_verifier_image is None:
        return None
    pod = "object.spec.template.spec"
    container = f"{pod}.containers[0]"
    command = cel([PYTHON, "-m", CHECK_MODULE, "--newest-under"])
    drill = cel([PYTHON, "-m", DRILL_MODULE])
    under = cel(CHECKPOINTS_MOUNT + "/")
    resources = f"{container}.resources"
    no_gpu = "(!has({r}) || !has({r}.{k}) || {r}.{k}.all(x, !(x in {gpu})))"
    gpu = cel(list(inputs.gpu_resources))
    volume = f"{pod}.volumes[0]"
    return Policy(
        name="checkpoint-verifier-creates-only-check-jobs",
        summary="The checkpoint verifier creates only its check Jobs: its image and command, the checkpoints claim "
        "read-only, no GPU, no token.",
        resource_rules=(JOB_CREATES,),
        match_conditions=({"name": "is-the-verifier", "expression": f"request.userInfo.username == {cel(user)}"},),
        validations=(
            Validation(
                expression=f"has(object.metadata.labels) && {cel(CHECK_OF_LABEL)} in object.metadata.labels"
                f" && size({pod}.containers) == 1 && !has({pod}.initContainers)"
                f" && !has({pod}.ephemeralContainers)"
                f" && {container}.image == {cel(inputs.checkpoint_verifier_image)}"
                f" && has({container}.command) && size({container}.command) >= 5"
                f" && (({container}.command.slice(0, 4) == {command}"
                f" && {container}.command[4].startsWith({under}))"
                f" || ({container}.command.slice(0, 3) == {drill}"
                f" && {container}.command[3].startsWith({under}) && !{container}.command[3].contains('/..')))"
                f" && !has({container}.args)",
                message=f"the checkpoint verifier may create only its check and drill Jobs ({CHECK_OF_LABEL}): one "
                f"container of {inputs.checkpoint_verifier_image} running {PYTHON} -m {CHECK_MODULE} --newest-under "
                f"{CHECKPOINTS_MOUNT}/<job> or {PYTHON} -m {DRILL_MODULE} {CHECKPOINTS_MOUNT}/<job>/<step>",
            ),
            Validation(
                expression=f"has({pod}.volumes) && size({pod}.volumes) == 1"
                f" && has({volume}.persistentVolumeClaim)"
                f" && {volume}.persistentVolumeClaim.claimName == {cel(CHECKPOINT_CLAIM)}"
                f" && has({volume}.persistentVolumeClaim.readOnly) && {volume}.persistentVolumeClaim.readOnly"
                f" && (!has({container}.volumeMounts) || {container}.volumeMounts.all(m,"
                " has(m.readOnly) && m.readOnly))",
                message=f"a check Job mounts the {CHECKPOINT_CLAIM} claim, read-only, and nothing else",
            ),
            Validation(
                expression=f"{no_gpu.format(r=resources, k='limits', gpu=gpu)}"
                f" && {no_gpu.format(r=resources, k='requests', gpu=gpu)}"
                f" && has({pod}.automountServiceAccountToken) && !{pod}.automountServiceAccountToken"
                f" && (!has({pod}.hostNetwork) || !{pod}.hostNetwork) && (!has({pod}.hostPID) || !{pod}.hostPID)",
                message="a check Job takes no GPU, no service-account token and nothing of its node's",
            ),
        ),
    )
