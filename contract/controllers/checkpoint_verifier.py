"""The checkpoint verifier, declared for the kit: the controller by which a checkpoint counts only once an
independent check has read it.

The controller (``gpucluster-checkpoint-verifier``) reads each team namespace's ``checkpoints`` claim. For a job's
checkpoint report (``checkpoint.gpucluster.io/<job>``) newer than the last it checked, it creates a check Job in the
team's namespace: CPU only, the team's LocalQueue and lowest research priority, the claim mounted read-only, the
daemons' image running ``python -m daemons.checkpoint_verifier.check`` on the job's newest ``step-<N>`` directory. It
reads the verdict from the pod's termination message and records it on the claim
(``verified.checkpoint.gpucluster.io/<job>``), in an Event (``CheckpointVerified`` or ``CheckpointRejected``) and in
its metrics (the ``CheckpointVerificationFailed`` alert). Extra replicas stand by behind a Lease; only the leader
writes.

Each job's latest verified checkpoint is also its entry in the team's ``checkpoint-resume`` ConfigMap, which the
job's pods mount as ``GPUCLUSTER_RESUME_FILE``: a restart is told where to resume.

Least privilege (the rules below): in each team namespace the checkpoints claim and the checkpoint-resume ConfigMap
(get, patch), Jobs (read, create, delete: one Kueue never admitted), pods (read: the termination message) and Events
(create); in its own namespace its Lease. Two admission rules hold
the rest (``components/guardrails_policies/checkpoints.py``): it changes the claim only by its records, and every Job
it creates is a check Job (its image, its command, the claim read-only, no GPU); nobody else writes its records.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contract.checkpoint_verifier_settings import FILLED, STACK_KEY, CheckpointVerifierSettings, TeamQueue
from contract.constants import CHECKPOINT_CLAIM, RESUME_CONFIGMAP, VERIFIED_ANNOTATION_PREFIX
from contract.rbac import Grant, Rule, lease_rules
from contract.spec import ControllerSpec, check_team_namespaces
from contract.stack_facts import StackFacts

READ = ("get", "list", "watch")


def team_rules() -> tuple[Rule, ...]:
    """A Role in each team namespace: no Secret; delete only for Jobs (a finished one goes by its TTL; the verifier
    deletes one Kueue never admitted within its deadline, and an admission rule holds it to its own)."""
    return (
        Rule(("",), ("persistentvolumeclaims",), ("get", "patch"), (CHECKPOINT_CLAIM,)),
        Rule(("",), ("configmaps",), ("get", "patch"), (RESUME_CONFIGMAP,)),
        Rule(("batch",), ("jobs",), (*READ, "create", "delete")),
        Rule(("",), ("pods",), READ),
        Rule(("",), ("events",), ("create",)),
    )


#: The prefix of every series the controller exports (its metrics module names them with it).
PREFIX = "gpucluster_checkpoint_verifier"

NAME = "checkpoint-verifier"
APP = f"gpucluster-{NAME}"
#: On every check and drill Job and its pods: that the verifier made it (what it may delete by).
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
#: On every check Job and its pods: the training job whose checkpoint it checks (what the controller lists by).
CHECK_OF_LABEL = "checkpoint.gpucluster.io/check-of"
#: On every check Job: the report it checks (the report's RFC 3339 time) and the last verified step it must beat.
CHECK_REPORT_ANNOTATION = "checkpoint.gpucluster.io/report"
CHECK_LAST_VERIFIED_ANNOTATION = "checkpoint.gpucluster.io/last-verified-step"
#: The check's container, and the module its command runs.
CHECK_CONTAINER = "check"
CHECK_MODULE = "daemons.checkpoint_verifier.check"
#: Where the check writes its verdict for the controller to read (the kubelet's termination message).
TERMINATION_LOG = "/dev/termination-log"
#: On every restore drill Job (beside ``CHECK_OF_LABEL``): what kind of Job of the verifier it is.
KIND_LABEL = "checkpoint.gpucluster.io/kind"
DRILL_KIND = "restore-drill"
#: On every drill Job: the drill it follows (the record's ``drill.finished``, or ``none``): the drills of one turn.
DRILL_AFTER_ANNOTATION = "checkpoint.gpucluster.io/drill-after"
#: The drill's container, and the module its command runs.
DRILL_CONTAINER = "drill"
DRILL_MODULE = "daemons.checkpoint_verifier.drill"
#: On a team's claim: a job's own drill interval (``restore-drill.checkpoint.gpucluster.io/<job>: 6h``), which the
#: team may write.
DRILL_EVERY_ANNOTATION_PREFIX = "restore-drill.checkpoint.gpucluster.io/"


def grants(s: CheckpointVerifierSettings, _context: Mapping[str, Any]) -> tuple[Grant, ...]:
    return (
        Grant("role", APP, lease_rules(s.lease_name), s.namespace),
        *(Grant(f"role-{ns}", APP, team_rules(), ns) for ns in s.workload_namespaces),
    )


def check(s: CheckpointVerifierSettings, context: Mapping[str, Any]) -> None:
    check_team_namespaces(f"ControllerArgs({NAME})", "teams", s.workload_namespaces, context)


def outputs(s: CheckpointVerifierSettings) -> dict[str, object]:
    return {"namespaces": s.workload_namespaces, "checkDeadline": s.check_deadline, "maxRunning": s.max_running}


def fill(s: CheckpointVerifierSettings, facts: StackFacts) -> CheckpointVerifierSettings:
    """Each team's check Jobs queue in its namespace's LocalQueue of CPU-only work (never a GPU queue: they ask for
    no GPU) at the lowest research priority the team may name."""
    value = {p.name: p.value for p in facts.priorities.workload}
    teams: dict[str, TeamQueue] = {}
    for team in facts.teams:
        allowed = facts.priorities.allowed_for(team.name)
        if not allowed or team.namespace in teams:
            continue
        lowest = min(allowed, key=lambda name: value[name])
        teams[team.namespace] = TeamQueue(namespace=team.namespace, local_queue=facts.cpu_queue, priority=lowest)
    return s.model_copy(update={"teams": list(teams.values())})


SPEC: ControllerSpec[CheckpointVerifierSettings] = ControllerSpec(
    name=NAME,
    component_type="gpucluster:training:CheckpointVerifier",
    part_of="training",
    namespace_role="accounting",
    metrics_port=9115,
    metrics_prefix=PREFIX,
    stack_key=STACK_KEY,
    settings_model=CheckpointVerifierSettings,
    grants=grants,
    outputs=outputs,
    check=check,
    filled_by_stack=FILLED,
    fill=fill,
    description=(
        "Count a checkpoint only once it is verified: for each checkpoint report "
        "(checkpoint.gpucluster.io/<job> on a team's checkpoints claim) newer than the last it checked, run a "
        "CPU-only check Job in the team's namespace (its LocalQueue, its lowest research priority) that mounts the "
        "claim read-only and checks the job's newest step directory (every shard DCP's metadata names is there and "
        "long enough; the manifest's sizes and hashes match; the step is newer than the last verified), read the "
        "verdict from the pod's termination message and record it beside the report "
        f"({VERIFIED_ANNOTATION_PREFIX}<job>), in a CheckpointVerified or CheckpointRejected Event and in its "
        f"metrics. At most maxRunning checks at once. Only the holder of the Lease writes. Metrics are prefixed "
        f"{PREFIX}_."
    ),
    once_help="run one cycle (taking the Lease if it is free, releasing it after), print each job's state and "
    "action as JSON on stdout and exit; no HTTP server",
    dry_run_help="read, decide and log, but write nothing: no check Job, no record, no Event, no Lease; the "
    "settings' dryRun does the same",
    # its series name the checked job's namespace and job
    honor_labels=True,
)
