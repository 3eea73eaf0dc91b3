"""What a team's pod may mount and where it may run: its own claims, through the scheduler, never aimed at another
gang's reserved nodes.

Pod Security baseline allows inline ``nfs`` and ``csi`` volumes: a team pod could mount the shared filesystem's
server at another team's path. A pod created with ``spec.nodeName`` skips the scheduler (and with it every
placement and quota decision). A pod that selects the make-before-break reservation label picks nodes held for
another gang. Checked on the pods themselves at creation, whoever creates them (the Job controller from a team's
JobSet, an admin).
"""

from __future__ import annotations

from components.guardrails_policies.model import (
    JOB_CREATES,
    JOBSET_CREATES,
    GuardrailInputs,
    Policy,
    Validation,
    cel,
    is_in,
    owned_by,
    team_pod_rule,
)
from contract.constants import (
    PODSET_PREFERRED_TOPOLOGY,
    PODSET_REQUIRED_TOPOLOGY,
    PODSET_UNCONSTRAINED_TOPOLOGY,
)
from contract.jobset_settings import JOBSET_API

#: The volume sources a team pod may use: its namespace's claims (and ephemeral ones from a StorageClass), its own
#: config and tokens, scratch space, read-only images. Everything else names storage by address (``nfs``,
#: ``iscsi``, ``cephfs``, inline ``csi`` ...) or the host.
TEAM_VOLUME_SOURCES = (
    "configMap",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "image",
    "persistentVolumeClaim",
    "projected",
    "secret",
)


def team_pods_mount_only_claims(inputs: GuardrailInputs) -> Policy:
    allowed = " || ".join(f"has(v.{source})" for source in TEAM_VOLUME_SOURCES)
    volumes = "(has(object.spec.volumes) ? object.spec.volumes : [])"
    return team_pod_rule(
        inputs,
        "team-pods-mount-only-claims",
        "A pod in a team namespace mounts storage only through its namespace's claims: no inline nfs, csi, "
        "iscsi or other volume that names storage by address.",
        Validation(
            expression=f"{volumes}.all(v, {allowed})",
            message="a team pod may mount only " + ", ".join(TEAM_VOLUME_SOURCES) + " volumes",
            message_expression=f"'volume ' + {volumes}.filter(v, !({allowed})).map(v, v.name).join(', ') + "
            "' names storage by address (nfs, csi, iscsi, ...), which would reach other teams\\' data; "
            "mount your namespace\\'s claims (persistentVolumeClaim) instead'",
        ),
    )


def _selects(spec: str, key: str) -> str:
    """CEL: the pod spec at ``spec`` selects nodes by the label ``key`` (nodeSelector, or node affinity, required or
    preferred)."""
    node_affinity = f"{spec}.affinity.nodeAffinity"
    required = f"{node_affinity}.requiredDuringSchedulingIgnoredDuringExecution"
    preferred = f"{node_affinity}.preferredDuringSchedulingIgnoredDuringExecution"
    return (
        f"((has({spec}.nodeSelector) && {cel(key)} in {spec}.nodeSelector)"
        f" || (has({spec}.affinity) && has({node_affinity}) && ("
        f"(has({required}) && {required}.nodeSelectorTerms.exists(t, has(t.matchExpressions) && "
        f"t.matchExpressions.exists(e, e.key == {cel(key)}))) || "
        f"(has({preferred}) && {preferred}.exists(p, has(p.preference.matchExpressions) && "
        f"p.preference.matchExpressions.exists(e, e.key == {cel(key)}))))))"
    )


def _names_node(spec: str) -> str:
    return f"(has({spec}.nodeName) && {spec}.nodeName != '')"


def team_pods_name_no_node(inputs: GuardrailInputs) -> Policy:
    return team_pod_rule(
        inputs,
        "team-pods-name-no-node",
        "A pod in a team namespace is placed by the scheduler: it names no node (spec.nodeName).",
        Validation(
            expression=f"!{_names_node('object.spec')}",
            message="a team pod may not name its node (spec.nodeName): it would skip the scheduler, and with it "
            "Kueue's placement and every other team's claim on that node",
        ),
    )


#: Kueue's pod-set annotations that place a gang by topology (on the pod template of each pod set).
TOPOLOGY_ANNOTATIONS = (PODSET_REQUIRED_TOPOLOGY, PODSET_PREFERRED_TOPOLOGY, PODSET_UNCONSTRAINED_TOPOLOGY)


def _tolerates(spec: str, key: str) -> str:
    """CEL: the pod spec at ``spec`` tolerates the taint ``key`` (by its key, or by a toleration of every taint)."""
    return (
        f"(has({spec}.tolerations) && {spec}.tolerations.exists(x, has(x.key) && x.key != '' ? x.key == {cel(key)} "
        ": has(x.operator) && x.operator == 'Exists'))"
    )


def _placed_by_topology(template: str) -> str:
    """CEL: the pod template at ``template`` carries one of Kueue's pod-set topology annotations: Kueue assigns its
    pods their nodes, the gang's own reserved ones among them."""
    annotations = f"{template}.metadata.annotations"
    keys = " || ".join(f"{cel(k)} in {annotations}" for k in TOPOLOGY_ANNOTATIONS)
    return f"(has({template}.metadata) && has({annotations}) && ({keys}))"


def team_jobs_aim_at_no_node(inputs: GuardrailInputs) -> Policy:
    """On what a team submits (a JobSet; a Job that no JobSet owns), as submitted: make-before-break's own pod set
    update selects the gang's reservation later, through Kueue, which is why the pods themselves cannot be held to
    it. A gang placed by topology tolerates any reservation (Kueue pins each pod to its assigned node); one that is
    not may not tolerate it, or the scheduler could put it on another gang's reserved nodes."""
    # A JobSet's own Jobs carry its pod template as Kueue last updated it (make-before-break's reservation selector
    # included) when JobSet creates them again on a restart: they are the JobSet's, held when it was submitted.
    jobsets_job = f"(object.kind == 'Job' && {owned_by('JobSet', JOBSET_API)})"
    templates = (
        f"({jobsets_job} ? [] : object.kind == 'JobSet' ? (has(object.spec.replicatedJobs) ? "
        "object.spec.replicatedJobs.map(r, r.template.spec.template) : []) : [object.spec.template])"
    )
    checks = [_names_node("t.spec")]
    message = "a team's job may not name a node (nodeName)"
    mbb = inputs.make_before_break
    if mbb is not None:
        checks.append(_selects("t.spec", mbb.reservation_key))
        checks.append(f"({_tolerates('t.spec', mbb.reservation_key)} && !{_placed_by_topology('t')})")
        message += (
            f", select nodes by {mbb.reservation_key} (held for the gang make-before-break reserved them for), or "
            f"tolerate the {mbb.reservation_key} taint unless Kueue places it by topology "
            f"({' or '.join(TOPOLOGY_ANNOTATIONS)} on its pod template)"
        )
    return Policy(
        name="team-jobs-aim-at-no-node",
        summary="A team's JobSets and Jobs name no node and, with make-before-break, select no reserved node and "
        "tolerate no reservation unless Kueue places them by topology: the scheduler and Kueue place them.",
        resource_rules=(JOBSET_CREATES, JOB_CREATES),
        namespace_selector=is_in(inputs.training_namespaces),
        validations=(
            Validation(
                expression=f"{templates}.all(t, !({' || '.join(checks)}))",
                message=message,
            ),
        ),
    )
