"""Capacity that tells the truth: a quota controller wherever there are queues, and flavors that select only nodes
that passed acceptance.

Kueue's quotas are numbers. Without the quota controller (daemons/quota_controller/) a ClusterQueue keeps the
stack's numbers while nodes are NotReady, cordoned or quarantined, and Kueue admits gangs that cannot run, which
``waitForPodsReady`` evicts later. A flavor that does not require the acceptance label gives training to nodes that
never passed burn-in and the thermal, NVLink, InfiniBand and storage checks; a stack may choose that (the
advisory policy says what it costs).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from pulumi_policy import EnforcementLevel, StackValidationArgs, StackValidationPolicy

from contract.constants import ACCEPTED_LABEL, ACCEPTED_VALUE, DECLARED_GPUS_ANNOTATION, SETTINGS_LABEL
from contract.queues_settings import covers_gpus
from contract.quota_controller_settings import APP
from contract.registry import QUOTA_CONTROLLER
from policies.common import MANDATORY, Report, annotations_of, dig

DEPLOYMENT = "kubernetes:apps/v1:Deployment"
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
RESOURCE_FLAVOR = "kubernetes:kueue.x-k8s.io/v1beta2:ResourceFlavor"
#: v1beta2 only: an older version is refused by kueue-objects-are-v1beta2.
CLUSTER_QUEUE_TYPES = ("kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue",)
SETTINGS_VALUE = "quota-controller"
SETTINGS_FILE = "settings.json"


def _name(props: Mapping[str, object], fallback: str) -> str:
    return str(dig(props, "metadata", "name") or fallback)


def _runs_the_controller(props: Mapping[str, object]) -> bool:
    containers = dig(props, "spec", "template", "spec", "containers") or []
    # The engine hands lists over as proxies (pulumi_policy's _ListProxy), which compare equal to no list: read words.
    command = list(QUOTA_CONTROLLER.command)
    return any(isinstance(c, Mapping) and [str(w) for w in c.get("command") or []] == command for c in containers)


def _followed_queues(args: StackValidationArgs) -> set[str] | None:
    """The ClusterQueues the quota controller's settings follow (None: no settings ConfigMap of it)."""
    found: set[str] | None = None
    for r in args.resources:
        if r.resource_type != CONFIG_MAP or (dig(r.props, "metadata", "labels") or {}).get(SETTINGS_LABEL) != (
            SETTINGS_VALUE
        ):
            continue
        try:
            document = json.loads(str((r.props.get("data") or {}).get(SETTINGS_FILE, "")))
        except ValueError:
            document = {}
        queues = document.get("clusterQueues") if isinstance(document, dict) else None
        found = (found or set()) | {
            str(q.get("name")) for q in (queues if isinstance(queues, list) else []) if isinstance(q, dict)
        }
    return found


def _validate_controller(args: StackValidationArgs, report: Report) -> None:
    queues = sorted(
        _name(r.props, r.name)
        for r in args.resources
        if r.resource_type in CLUSTER_QUEUE_TYPES and covers_gpus(dig(r.props, "spec", "resourceGroups"))
    )
    if not queues:
        args.not_applicable("no ClusterQueue of GPUs in the stack")
        return
    if not any(r.resource_type == DEPLOYMENT and _runs_the_controller(r.props) for r in args.resources):
        report(
            f"ClusterQueue(s) {queues} keep the stack's quotas whatever the nodes do: no {APP} Deployment in the "
            "stack (gpucluster:quotaController.enabled), so Kueue admits gangs onto NotReady, cordoned and "
            "quarantined GPUs, and waitForPodsReady evicts them later"
        )
        return
    followed = _followed_queues(args) or set()
    missing = [q for q in queues if q not in followed]
    if missing:
        report(f"ClusterQueue(s) {missing} are not in the {APP} settings: their quotas stay static")


quota_controller_where_queues_are = StackValidationPolicy(
    name="quota-controller-where-queues-are",
    description="Wherever there are ClusterQueues, a quota controller makes their quotas follow the healthy GPUs.",
    enforcement_level=MANDATORY,
    validate=_validate_controller,
)


def _validate_accepted(args: StackValidationArgs, report: Report) -> None:
    # A flavor that declares no GPU (the queue of CPU-only work) gives no GPU quota: the quota policy holds it to 0.
    flavors = [
        r
        for r in args.resources
        if r.resource_type == RESOURCE_FLAVOR and annotations_of(r.props).get(DECLARED_GPUS_ANNOTATION) != "0"
    ]
    if not flavors:
        args.not_applicable("no ResourceFlavor of GPUs in the stack")
        return
    for r in flavors:
        labels = dig(r.props, "spec", "nodeLabels") or {}
        if not isinstance(labels, Mapping) or labels.get(ACCEPTED_LABEL) != ACCEPTED_VALUE:
            report(
                f"ResourceFlavor {_name(r.props, r.name)} does not select {ACCEPTED_LABEL}={ACCEPTED_VALUE} "
                "(requireAcceptance: false): training lands on nodes that never passed the acceptance roles, and "
                "they count as capacity"
            )


#: Advisory: a stack may choose it (a cluster whose nodes are accepted some other way); this says what it costs.
flavors_select_accepted_nodes = StackValidationPolicy(
    name="flavors-select-accepted-nodes",
    description="Says what a GPU flavor that does not require node acceptance costs (advisory).",
    enforcement_level=EnforcementLevel.ADVISORY,
    validate=_validate_accepted,
)
