"""The controller's least-privilege RBAC rules, as data (the deploying component renders the same lists).

Three scopes:

* :data:`CLUSTER_RULES` (a ClusterRole): what is cluster-scoped or may be in any namespace: Nodes (read and
  patch the reservation), Pods (list: GPU pods of every namespace count), Kueue Workloads (read; apply our check
  entry on the status subresource), ResourceFlavors (read), the AdmissionCheck (read; apply Active on its status),
  Events (create: on Nodes in ``default``, on Workloads in their namespace).
* :func:`inference_rules` (a Role in each inference namespace): patch Pods (deletion cost) and list and patch
  (server-side apply) Deployments.
* :func:`lease_rules` (a Role in the controller's namespace): its Lease only.

Nothing else: no Secrets, no deletes, no writes to a Deployment's scale.
"""

from __future__ import annotations

from components.constants import KUEUE_GROUP
from daemons.toolkit.rbac import Rule, lease_rules

__all__ = ["CLUSTER_RULES", "Rule", "admission_check_rules", "cluster_rules", "inference_rules", "lease_rules"]


CLUSTER_RULES: tuple[Rule, ...] = (
    Rule(("",), ("nodes",), ("get", "list", "patch")),
    Rule(("",), ("pods",), ("list",)),
    Rule(("",), ("events",), ("create",)),
    Rule((KUEUE_GROUP,), ("workloads",), ("get", "list")),
    Rule((KUEUE_GROUP,), ("workloads/status",), ("patch",)),
    Rule((KUEUE_GROUP,), ("resourceflavors",), ("list",)),
)


def admission_check_rules(check_name: str) -> tuple[Rule, ...]:
    """Read the one AdmissionCheck and apply its Active condition (cluster-scoped, so in the ClusterRole)."""
    return (
        Rule((KUEUE_GROUP,), ("admissionchecks",), ("get",), (check_name,)),
        Rule((KUEUE_GROUP,), ("admissionchecks/status",), ("patch",), (check_name,)),
    )


def inference_rules() -> tuple[Rule, ...]:
    """A Role in each inference namespace."""
    return (
        Rule(("",), ("pods",), ("patch",)),
        Rule(("apps",), ("deployments",), ("list", "patch")),
    )


def cluster_rules(check_name: str) -> tuple[Rule, ...]:
    """Everything the ClusterRole holds."""
    return (*CLUSTER_RULES, *admission_check_rules(check_name))
