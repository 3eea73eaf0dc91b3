"""The quota controller, declared for the kit: every ClusterQueue's quota follows the GPUs that are really there.

Least privilege (the rules below): list Nodes; get and patch the stack's ClusterQueues, by name; Events where Events
about cluster-scoped objects live; one Lease in its own namespace.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from contract.constants import CLUSTER_EVENTS_NAMESPACE, KUEUE_GROUP
from contract.quota_controller_settings import APP, FILLED, STACK_KEY, QuotaControllerSettings, QuotaFlavor, QuotaQueue
from contract.rbac import Grant, Rule, lease_rules
from contract.spec import AFTER_CLUSTER_QUEUES, APP_PREFIX, ControllerSpec
from contract.stack_facts import StackFacts

# The controller's least-privilege RBAC rules, as data (the deploying component renders the same lists).
#
# * :func:`cluster_rules` (a ClusterRole): list Nodes (read only); get and patch (server-side apply) the stack's
#   ClusterQueues, by name, nothing else of Kueue's.
# * :data:`EVENT_RULES` (a Role in ``default``, where Events about cluster-scoped objects live): create Events.
# * :func:`lease_rules` (a Role in the controller's namespace): its Lease only.

EVENT_RULES: tuple[Rule, ...] = (Rule(("",), ("events",), ("create",)),)


def cluster_rules(queues: Sequence[str]) -> tuple[Rule, ...]:
    return (
        Rule(("",), ("nodes",), ("list",)),
        Rule((KUEUE_GROUP,), ("clusterqueues",), ("get", "patch"), tuple(sorted(queues))),
    )


#: The prefix of every series the controller exports (its metrics module names them with it).
PREFIX = "gpucluster_quota_controller"

NAME = APP.removeprefix(APP_PREFIX)


def grants(s: QuotaControllerSettings, _context: Mapping[str, Any]) -> tuple[Grant, ...]:
    return (
        Grant("clusterrole", APP, cluster_rules([q.name for q in s.cluster_queues])),
        Grant("events-role", f"{APP}-events", EVENT_RULES, CLUSTER_EVENTS_NAMESPACE),
        Grant("role", APP, lease_rules(s.lease_name), s.namespace),
    )


def check(s: QuotaControllerSettings, _context: Mapping[str, Any]) -> None:
    if not s.flavors or not s.cluster_queues:
        raise ValueError(f"ControllerArgs({NAME}).settings: no flavors or no clusterQueues to follow (fill them)")


def outputs(s: QuotaControllerSettings) -> dict[str, object]:
    return {
        "clusterQueues": [q.name for q in s.cluster_queues],
        "notReadyGrace": s.not_ready_grace,
        "returnAfter": s.return_after,
    }


def fill(s: QuotaControllerSettings, facts: StackFacts) -> QuotaControllerSettings:
    """The stack's flavors, and the queues' numbers at full capacity as shares."""
    filled = {
        "flavors": [
            QuotaFlavor(
                name=f.name,
                node_labels=dict(f.node_labels),
                gpu_resource=f.gpu_resource,
                declared_gpus=f.capacity,
                require_acceptance=f.require_acceptance,
            )
            for f in facts.flavors
        ],
        "cluster_queues": [
            QuotaQueue(name=name, quota=dict(q.quota), borrowing_limit=dict(q.borrowing_limit))
            for name, q in facts.queues.items()
        ],
    }
    return QuotaControllerSettings.model_validate({**s.model_dump(), **filled})


SPEC: ControllerSpec[QuotaControllerSettings] = ControllerSpec(
    name=NAME,
    component_type="gpucluster:capacity:QuotaController",
    part_of="capacity",
    namespace_role="capacity",
    metrics_port=9106,
    metrics_prefix=PREFIX,
    stack_key=STACK_KEY,
    settings_model=QuotaControllerSettings,
    grants=grants,
    outputs=outputs,
    check=check,
    filled_by_stack=FILLED,
    fill=fill,
    description=(
        "Keep every ClusterQueue's nominalQuota and borrowingLimit in step with the GPUs that are really there: "
        "per flavor, the GPUs of nodes that are Ready, schedulable, accepted and not quarantined, shared among "
        "the queues in the stack's proportions. It owns each queue's spec.resourceGroups (server-side apply). "
        f"Only the holder of the Lease writes. Metrics are prefixed {PREFIX}_."
    ),
    once_help="run one cycle (taking the Lease if it is free, releasing it after), print the capacity, the quotas "
    "and what was written as JSON on stdout and exit; no HTTP server",
    dry_run_help="read, decide and log what would change, but write nothing: no apply, no Event, no Lease",
    after=(AFTER_CLUSTER_QUEUES,),
)
