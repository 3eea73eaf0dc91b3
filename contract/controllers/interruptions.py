"""Interruptions, declared for the kit: the daemon that accounts for every interruption of the training JobSets
and bounds their restarts.

The daemon (``gpucluster-interruptions``) reads the training JobSets, their pods, the nodes, the Kueue Workloads
they own, the Events on them and the checkpoint times the jobs report on their teams' ``checkpoints`` claims; it
keeps each job's ledger in an annotation on the JobSet, exports interruptions by cause, recovery time, work lost and
ETTR per job and for the cluster, deactivates the Workload of a job past its restart bound (with a
``RestartBoundReached`` Event saying how to resume) and writes the measured reliability ConfigMap the next
submission's checkpoint interval follows. Extra replicas stand by behind a Lease; only the leader writes.

Least privilege (the rules below): cluster-wide read of JobSets, pods, nodes, Workloads, Events and claims; patch
JobSets and Workloads; create Events; in its own namespace the reliability ConfigMap and one Lease.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contract.bounds import JobSetAnnotationOnly
from contract.constants import INTERRUPTIONS_LEDGER_ANNOTATION, KUEUE_GROUP
from contract.interruptions_settings import APP, FILLED, STACK_KEY, InterruptionsSettings
from contract.rbac import Grant, Rule, lease_rules
from contract.spec import AFTER_JOBSET, AFTER_KUEUE, APP_PREFIX, ControllerSpec
from contract.stack_facts import StackFacts

# The daemon's least-privilege RBAC rules, as data (the deploying component renders the same lists).
#
# * :data:`CLUSTER_RULES` (a ClusterRole: training JobSets live in every team's namespace): get, list and watch
#   JobSets, pods, nodes, Kueue Workloads, Events and PersistentVolumeClaims; patch JobSets (its ledger annotation)
#   and Workloads (``spec.active: false`` at the restart bound); create Events (on the JobSets).
# * :func:`namespace_rules` (a Role in its own namespace): the reliability ConfigMap (create cannot name an object,
#   then get and update that one only) and its Lease.

READ = ("get", "list", "watch")
CLUSTER_RULES: tuple[Rule, ...] = (
    Rule(("jobset.x-k8s.io",), ("jobsets",), (*READ, "patch")),
    Rule((KUEUE_GROUP,), ("workloads",), (*READ, "patch")),
    Rule(("",), ("pods", "nodes", "persistentvolumeclaims"), READ),
    Rule(("",), ("events",), (*READ, "create")),
)


def namespace_rules(config_map: str, lease_name: str) -> tuple[Rule, ...]:
    return (
        Rule(("",), ("configmaps",), ("create",)),
        Rule(("",), ("configmaps",), ("get", "update"), (config_map,)),
        *lease_rules(lease_name),
    )


#: The prefix of every series the controller exports (its metrics module names them with it).
TRAINING = "gpucluster_training"
PREFIX = "gpucluster_interruptions"

NAME = APP.removeprefix(APP_PREFIX)


def grants(s: InterruptionsSettings, _context: Mapping[str, Any]) -> tuple[Grant, ...]:
    return (
        Grant("clusterrole", APP, CLUSTER_RULES),
        Grant("role", APP, namespace_rules(s.reliability_config_map, s.lease_name), s.namespace),
    )


def outputs(s: InterruptionsSettings) -> dict[str, object]:
    return {
        "reliabilityConfigMap": f"{s.namespace}/{s.reliability_config_map}",
        "defaultMaxRestartsPerHour": s.default_max_restarts_per_hour,
    }


def fill(s: InterruptionsSettings, facts: StackFacts) -> InterruptionsSettings:
    """Only verified checkpoints count where the stack runs the checkpoint verifier."""
    return s.model_copy(update={"verified_checkpoints_only": facts.checkpoints_verified})


SPEC: ControllerSpec[InterruptionsSettings] = ControllerSpec(
    name=NAME,
    component_type="gpucluster:interruptions:Interruptions",
    part_of="training",
    namespace_role="accounting",
    metrics_port=9112,
    metrics_prefix=PREFIX,
    stack_key=STACK_KEY,
    settings_model=InterruptionsSettings,
    grants=grants,
    outputs=outputs,
    description=(
        "Account for every interruption of the training JobSets (label gpucluster.io/training-job): its cause "
        "(node, program, preemption, requeue, unknown), the time to running again and the work lost since the "
        "last checkpoint, rebuilt from the API server's objects and kept in the annotation "
        "gpucluster.io/interruptions; export per-job and cluster ETTR; stop a job restarting more often than "
        "gpucluster.io/max-restarts-per-hour (its Kueue Workload deactivated, a RestartBoundReached Event on the "
        "JobSet); write the measured reliability ConfigMap. Only the holder of the Lease writes. Metrics are "
        f"prefixed {TRAINING}_ and {PREFIX}_."
    ),
    once_help="run one cycle (taking the Lease if it is free, releasing it after), print each job's counts, "
    "ETTR and what was written as JSON on stdout and exit; no HTTP server",
    dry_run_help="read, account and log, but write nothing: no annotation, no Workload change, no Event, no "
    "ConfigMap, no Lease",
    after=(AFTER_KUEUE, AFTER_JOBSET),
    filled_by_stack=FILLED,
    fill=fill,
    # its record of a job's interruptions (stopping a job at its bound is a rule of its own: a Workload's field)
    bounds=(
        JobSetAnnotationOnly(
            "interruptions-writes-only-its-ledger", "interruption accounting daemon", INTERRUPTIONS_LEDGER_ANNOTATION
        ),
    ),
    # its series name the training job's namespace and job
    honor_labels=True,
)
