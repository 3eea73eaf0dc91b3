"""The taint controller, declared for the kit: the NoSchedule burst taint on the virtual node while in-cluster GPUs
are free.

Least privilege: Nodes only, cluster-wide (list and watch cannot be narrowed to a name; get and patch touch the
virtual node only, so its ClusterRole is named after that node); leader election on one Lease in its own namespace;
Events about the virtual node where the API server takes Events about cluster-scoped objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contract.constants import CLUSTER_EVENTS_NAMESPACE
from contract.rbac import Grant, Rule
from contract.spec import ControllerSpec
from contract.taint_controller_settings import STACK_KEY, TAINT_EFFECT, TaintControllerSettings

#: The prefix of every series the controller exports (its metrics module names them with it).
PREFIX = "gpucluster_taint_controller"

NAME = "taint-controller"
APP = f"gpucluster-{NAME}"

LEASES = "coordination.k8s.io"


def cluster_rules(node_name: str) -> tuple[Rule, ...]:
    return (
        Rule(("",), ("nodes",), ("list", "watch")),
        Rule(("",), ("nodes",), ("get", "patch"), (node_name,)),
    )


def namespace_rules(lease_name: str) -> tuple[Rule, ...]:
    return (
        # A Lease that does not exist yet can only be created without a name restriction.
        Rule((LEASES,), ("leases",), ("create",)),
        Rule((LEASES,), ("leases",), ("get", "update", "patch"), (lease_name,)),
    )


#: Events about the virtual node (what it decided, and why it could not).
EVENT_RULES: tuple[Rule, ...] = (Rule(("", "events.k8s.io"), ("events",), ("create", "patch")),)


def grants(s: TaintControllerSettings, _context: Mapping[str, Any]) -> tuple[Grant, ...]:
    return (
        Grant("clusterrole", f"{APP}-{s.node_name}", cluster_rules(s.node_name)),
        Grant("role", APP, namespace_rules(s.lease_name), s.namespace),
        Grant("events-role", f"{APP}-events", EVENT_RULES, CLUSTER_EVENTS_NAMESPACE),
    )


def check(s: TaintControllerSettings, _context: Mapping[str, Any]) -> None:
    where = f"ControllerArgs({NAME}).settings"
    if s.taint_effect != TAINT_EFFECT:
        raise ValueError(f"{where}.taint_effect: {s.taint_effect!r}; only NoSchedule")
    if s.taint_key.startswith("virtual-kubelet.io/"):
        raise ValueError(
            f"{where}.taint_key: {s.taint_key!r} is the virtual node's own taint; give the burst taint key"
        )


def outputs(s: TaintControllerSettings) -> dict[str, object]:
    return {"nodeName": s.node_name, "taintKey": s.taint_key}


#: What the burst section fills in (its parser, ``components/config/stack.py``), so the provider service, the
#: descheduler and this controller can never disagree about the node or the taint.
FILLED = {"nodeName": "burst.virtualNode.nodeName", "taintKey": "gpucluster:burstTaintKey"}


SPEC: ControllerSpec[TaintControllerSettings] = ControllerSpec(
    name=NAME,
    component_type="gpucluster:burst:TaintController",
    part_of="burst",
    namespace_role="burst",
    metrics_port=9102,
    metrics_prefix=PREFIX,
    stack_key=STACK_KEY,
    settings_model=TaintControllerSettings,
    grants=grants,
    outputs=outputs,
    check=check,
    filled_by_stack=FILLED,
    description=(
        "Add the NoSchedule burst taint to the virtual node while in-cluster GPU headroom stays at or above "
        "highMark for holdAdd where the burst replicas would come home; remove it while the headroom of some GPU "
        "type (or of the whole cluster) stays below lowMark with inference pods of that type Pending for "
        f"holdRemove; otherwise change nothing. Only the holder of the Lease acts. Metrics are prefixed {PREFIX}_."
    ),
    once_help="run one tick (acquiring the Lease if it is free, releasing it after), print the inputs and the "
    "decision as JSON on stdout and exit; no HTTP server. A hold time cannot pass within one tick, so this never adds "
    "or removes the taint; it does repair a hand-edited one",
    dry_run_help="query, decide and log what would change, but write nothing to the API server: no taint, no Event, "
    "no Lease (the replica behaves as leader for its decisions)",
    settings_help="JSON settings file (the TaintControllerSettings model, camelCase keys; see the README)",
)
