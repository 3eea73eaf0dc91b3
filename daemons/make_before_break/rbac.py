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

from dataclasses import dataclass
from typing import Any

from daemons.make_before_break.model import KUEUE_GROUP


@dataclass(frozen=True)
class Rule:
    api_groups: tuple[str, ...]
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    resource_names: tuple[str, ...] = ()

    def to_k8s(self) -> dict[str, Any]:
        """The rule as an rbac.authorization.k8s.io/v1 PolicyRule (camelCase keys)."""
        out: dict[str, Any] = {
            "apiGroups": list(self.api_groups),
            "resources": list(self.resources),
            "verbs": list(self.verbs),
        }
        if self.resource_names:
            out["resourceNames"] = list(self.resource_names)
        return out


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


def lease_rules(lease_name: str) -> tuple[Rule, ...]:
    """A Role in the controller's namespace: create the Lease (create cannot name an object), then its own only."""
    return (
        Rule(("coordination.k8s.io",), ("leases",), ("create",)),
        Rule(("coordination.k8s.io",), ("leases",), ("get", "update"), (lease_name,)),
    )


def cluster_rules(check_name: str) -> tuple[Rule, ...]:
    """Everything the ClusterRole holds."""
    return (*CLUSTER_RULES, *admission_check_rules(check_name))
