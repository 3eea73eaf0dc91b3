"""The stall detector, declared for the kit: the controller that restarts a hung training gang in place and names
the node to blame.

The controller (``gpucluster-stall-detector``) reads each team namespace's training JobSets, their pods and the
progress reports on the ``checkpoints`` claim, and asks Prometheus for the gangs' tensor activity (dcgm-exporter's
pod mapping) and their nodes' fabric traffic and errors (the fabric exporter). A gang idle on every GPU and every
node, with no progress, for ``stallAfter`` is restarted in place (a record on the JobSet, then one eviction) with
the evidence in an Event; the nodes to blame are named, and the ones named ``repeatCount`` times are exported for
quarantine. Extra replicas stand by behind a Lease; only the leader writes.

Least privilege (the rules below): in each team namespace JobSets (read, patch), pods (read, evict), the checkpoints
claim (get) and Events (create); in its own namespace its Lease and the suspects ConfigMap.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contract.bounds import JobSetAnnotationOnly
from contract.constants import CHECKPOINT_CLAIM, STALL_RESTART_ANNOTATION
from contract.rbac import Grant, Rule, lease_rules
from contract.spec import AFTER_JOBSET, ControllerSpec, check_team_namespaces
from contract.stack_facts import StackFacts
from contract.stall_detector_settings import FILLED, STACK_KEY, SUSPECTS_CONFIGMAP, StallDetectorSettings

# The stall detector's least-privilege RBAC rules, as data (the deploying component renders the same lists).
#
# * :func:`team_rules` (a Role in each team namespace: it reads and restarts training there and nowhere else): read
#   and patch JobSets (the restart record), read pods and evict them (``pods/eviction``: a PodDisruptionBudget holds,
#   and the pod is marked ``DisruptionTarget``, which JobSet restarts in place), read the ``checkpoints`` claim (the
#   progress reports), create Events (on the JobSets).
# * :func:`namespace_rules` (a Role in its own namespace): its Lease and the suspects ConfigMap.
#
# No node, no Secret, no delete: a node to quarantine is handed to the quarantine controller through a metric and
# its alert, never tainted here.

READ = ("get", "list", "watch")


def team_rules() -> tuple[Rule, ...]:
    return (
        Rule(("jobset.x-k8s.io",), ("jobsets",), (*READ, "patch")),
        Rule(("",), ("pods",), READ),
        Rule(("",), ("pods/eviction",), ("create",)),
        Rule(("",), ("persistentvolumeclaims",), ("get",), (CHECKPOINT_CLAIM,)),
        Rule(("",), ("events",), ("create",)),
    )


def namespace_rules(lease_name: str) -> tuple[Rule, ...]:
    return (
        *lease_rules(lease_name),
        Rule(("",), ("configmaps",), ("create",)),
        Rule(("",), ("configmaps",), ("get", "update"), (SUSPECTS_CONFIGMAP,)),
    )


#: The prefix of every series the controller exports (its metrics module names them with it).
PREFIX = "gpucluster_stall_detector"

NAME = "stall-detector"
APP = f"gpucluster-{NAME}"


def grants(s: StallDetectorSettings, _context: Mapping[str, Any]) -> tuple[Grant, ...]:
    return (
        Grant("role", APP, namespace_rules(s.lease_name), s.namespace),
        *(Grant(f"role-{ns}", APP, team_rules(), ns) for ns in s.workload_namespaces),
    )


def check(s: StallDetectorSettings, context: Mapping[str, Any]) -> None:
    check_team_namespaces(f"ControllerArgs({NAME})", "workload_namespaces", s.workload_namespaces, context)


def outputs(s: StallDetectorSettings) -> dict[str, object]:
    return {
        "stallAfter": s.stall_after,
        "suspects": f"{s.namespace}/{SUSPECTS_CONFIGMAP}",
        "namespaces": list(s.workload_namespaces),
    }


def fill(s: StallDetectorSettings, facts: StackFacts) -> StallDetectorSettings:
    """It watches the teams' namespaces and reads the exporters' own scrape jobs only."""
    return s.model_copy(
        update={
            "workload_namespaces": list(facts.team_namespaces),
            "dcgm_scrape_job": facts.dcgm_scrape_job,
            "fabric_scrape_job": facts.fabric_scrape_job,
        }
    )


SPEC: ControllerSpec[StallDetectorSettings] = ControllerSpec(
    name=NAME,
    component_type="gpucluster:training:StallDetector",
    part_of="training",
    namespace_role="accounting",
    metrics_port=9114,
    metrics_prefix=PREFIX,
    stack_key=STACK_KEY,
    settings_model=StallDetectorSettings,
    grants=grants,
    outputs=outputs,
    check=check,
    filled_by_stack=FILLED,
    fill=fill,
    description=(
        "Restart a hung training gang in place: when, for stallAfter, every GPU of its pods shows tensor activity "
        "below tensorFloor (dcgm-exporter), every one of its nodes moves less than fabricFloor over InfiniBand "
        "and writes less than storageFloor to its filesystems (the fabric exporter) and its progress report "
        "(progress.gpucluster.io/<job> on the team's checkpoints "
        "claim) did not advance, outside the startup grace and a declared quiet phase: record the restart on the "
        "JobSet (gpucluster.io/stall-restart), evict one pod of the attempt (JobSet recreates the gang in place) and "
        "say why in a GangStalled Event. Name the node to blame (NIC timeouts, link errors, a straggler) in a "
        "SuspectNode Event, and export the nodes named repeatCount times within repeatWindow for quarantine. "
        f"Prometheus or the API unreadable: nothing is restarted. Only the holder of the Lease writes. Metrics are "
        f"prefixed {PREFIX}_."
    ),
    once_help="run one cycle (taking the Lease if it is free, releasing it after), print each gang's verdict, "
    "suspects and action as JSON on stdout and exit; no HTTP server",
    dry_run_help="read, judge and log, but write nothing: no record, no eviction, no Event, no ConfigMap, no Lease "
    "(the replica behaves as leader for its decisions); the settings' dryRun does the same",
    after=(AFTER_JOBSET,),
    # its record of the in-place restart it started (it evicts the gang's pods for the rest)
    bounds=(
        JobSetAnnotationOnly(
            "stall-detector-writes-only-its-restart-record", "stall detector", STALL_RESTART_ANNOTATION
        ),
    ),
    # its series name the gang's namespace and job
    honor_labels=True,
)
