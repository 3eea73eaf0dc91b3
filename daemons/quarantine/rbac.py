"""The controller's least-privilege RBAC rules, as data (the deploying component renders the same lists).

* :data:`CLUSTER_RULES` (a ClusterRole): Nodes, which are cluster-scoped: read them all (a flavor's share counts
  every node of it) and patch them (the quarantine taint, label and annotations, in one patch).
* :data:`NODE_EVENT_RULES` (a Role in ``default``): Events about Nodes, which the API server accepts only there.
* :func:`namespace_rules` (a Role in the controller's namespace): its Lease, the one ledger ConfigMap, and Events
  about the ledger (query failures, which concern no node).

``create`` cannot name an object (the name is not known when it is authorised), so it is granted without
``resourceNames``, in the controller's own namespace only. Nothing else: no pods (Kubernetes' taint manager
evicts what does not tolerate the taint), no Secrets, no deletes.
"""

from __future__ import annotations

from components.quarantine_settings import LEDGER_NAME
from daemons.toolkit.rbac import Rule, lease_rules

__all__ = ["CLUSTER_RULES", "NODE_EVENT_RULES", "Rule", "namespace_rules"]


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
