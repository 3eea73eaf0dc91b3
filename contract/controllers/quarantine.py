"""Quarantine, declared for the kit: the controller that takes a hot or erroring GPU node away from training and
leaves it to inference.

The controller (``gpucluster-quarantine``) reads the firing quarantine alerts from Prometheus and puts the NoExecute
taint ``gpucluster.io/quarantine=<reason>`` on the node, with its label and reason and time annotations, in one
patch; Kubernetes' taint manager then evicts the training pods, inference tolerates the taint. A circuit breaker caps
the share of a flavor's nodes it may quarantine within a window. Every quarantined node is listed in the ledger
ConfigMap ``gpucluster-quarantine`` of its namespace. Extra replicas stand by behind a Lease; only the leader writes.

Least privilege (the rules below): cluster-wide it reads and patches Nodes and nothing else; Events about Nodes only
where the API server takes them; in its own namespace its Lease, the one ledger ConfigMap and Events about the
ledger.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contract.bounds import NodeMarksOnly
from contract.constants import (
    CLUSTER_EVENTS_NAMESPACE,
    QUARANTINE_REASON_ANNOTATION,
    QUARANTINE_TAINT_EFFECT,
    QUARANTINE_TAINT_KEY,
    QUARANTINED_AT_ANNOTATION,
    QUARANTINED_LABEL,
    RELEASED_AT_ANNOTATION,
)
from contract.quarantine_settings import FILLED, LEDGER_NAME, STACK_KEY, QuarantineFlavor, QuarantineSettings
from contract.rbac import Grant, Rule, lease_rules
from contract.spec import ControllerSpec
from contract.stack_facts import StackFacts

# The controller's least-privilege RBAC rules, as data (the deploying component renders the same lists).
#
# * :data:`CLUSTER_RULES` (a ClusterRole): Nodes, which are cluster-scoped: read them all (a flavor's share counts
#   every node of it) and patch them (the quarantine taint, label and annotations, in one patch).
# * :data:`NODE_EVENT_RULES` (a Role in ``default``): Events about Nodes, which the API server accepts only there.
# * :func:`namespace_rules` (a Role in the controller's namespace): its Lease, the one ledger ConfigMap, and Events
#   about the ledger (query failures, which concern no node).
#
# ``create`` cannot name an object (the name is not known when it is authorised), so it is granted without
# ``resourceNames``, in the controller's own namespace only. Nothing else: no pods (Kubernetes' taint manager
# evicts what does not tolerate the taint), no Secrets, no deletes.

CLUSTER_RULES: tuple[Rule, ...] = (Rule(("",), ("nodes",), ("get", "list", "watch", "patch")),)

NODE_EVENT_RULES: tuple[Rule, ...] = (Rule(("",), ("events",), ("create",)),)


def namespace_rules(lease_name: str) -> tuple[Rule, ...]:
    """A Role in the controller's namespace."""
    return (
        *lease_rules(lease_name),
        Rule(("",), ("configmaps",), ("create",)),
        Rule(("",), ("configmaps",), ("get", "patch"), (LEDGER_NAME,)),
        Rule(("",), ("events",), ("create",)),
    )


#: The prefix of every series the controller exports (its metrics module names them with it).
PREFIX = "gpucluster_quarantine"

NAME = "quarantine"
APP = f"gpucluster-{NAME}"


def grants(s: QuarantineSettings, _context: Mapping[str, Any]) -> tuple[Grant, ...]:
    return (
        Grant("clusterrole", APP, CLUSTER_RULES),
        Grant("events-role", f"{APP}-events", NODE_EVENT_RULES, CLUSTER_EVENTS_NAMESPACE),
        Grant("role", APP, namespace_rules(s.lease_name), s.namespace),
    )


def check(s: QuarantineSettings, _context: Mapping[str, Any]) -> None:
    if not s.flavors:
        raise ValueError(
            f"ControllerArgs({NAME}).settings.flavors: no GPU flavor to quarantine nodes of (the stack fills it)"
        )


def outputs(s: QuarantineSettings) -> dict[str, object]:
    return {
        "ledger": f"{s.namespace}/{LEDGER_NAME}",
        "maxShare": s.max_share,
        "breakerWindow": s.breaker_window,
        "flavors": [f.name for f in s.flavors],
    }


def fill(s: QuarantineSettings, facts: StackFacts) -> QuarantineSettings:
    """Every node of a flavor is a candidate (its own labels, not the acceptance label): a hot node that has not
    passed acceptance yet is still taken out, and the breaker's share is of the whole flavor."""
    flavors = [QuarantineFlavor(name=f.name, node_labels=dict(f.node_labels)) for f in facts.flavors]
    return s.model_copy(update={"flavors": flavors})


SPEC: ControllerSpec[QuarantineSettings] = ControllerSpec(
    name=NAME,
    component_type="gpucluster:capacity:Quarantine",
    part_of="capacity",
    namespace_role="capacity",
    metrics_port=9108,
    metrics_prefix=PREFIX,
    stack_key=STACK_KEY,
    settings_model=QuarantineSettings,
    grants=grants,
    outputs=outputs,
    check=check,
    filled_by_stack=FILLED,
    fill=fill,
    description=(
        "Quarantine GPU nodes whose quarantine alerts fire (signalQuery, by default the firing ALERTS labelled "
        "gpucluster_signal=gpu-quarantine): one patch adds the NoExecute taint gpucluster.io/quarantine=<reason>, "
        "the gpucluster.io/quarantined label and the reason and time annotations, so training leaves the node and "
        "inference stays. At most maxShare of a flavor's nodes (at least one) within breakerWindow; past it, a "
        f"Warning Event and the breaker_open metric, and nothing else. Every quarantined node is listed in the "
        f"ConfigMap {LEDGER_NAME}. Prometheus down: nothing changes. Only the holder of the Lease writes. Metrics "
        f"are prefixed {PREFIX}_."
    ),
    once_help="run one cycle (taking the Lease if it is free, releasing it after), print the decisions, "
    "the breakers and what was written as JSON on stdout and exit; no HTTP server",
    dry_run_help="query, decide and log what would change, but write nothing: no node patch, no ledger, no "
    "Event, no Lease (the replica behaves as leader for its decisions); the settings' dryRun does the same",
    settings_help="settings file: JSON when it ends in .json, YAML otherwise (the QuarantineSettings model, "
    "camelCase keys; see the README)",
    # its NoExecute taint, its label, its reason and time annotations, on GPU nodes only
    bounds=(
        NodeMarksOnly(
            "quarantine-writes-only-its-marks",
            "quarantine controller",
            QUARANTINE_TAINT_KEY,
            QUARANTINE_TAINT_EFFECT,
            (QUARANTINED_LABEL,),
            (QUARANTINE_REASON_ANNOTATION, QUARANTINED_AT_ANNOTATION, RELEASED_AT_ANNOTATION),
        ),
    ),
)
