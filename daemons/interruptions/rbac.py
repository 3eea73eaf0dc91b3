"""The daemon's least-privilege RBAC rules, as data (the deploying component renders the same lists).

* :data:`CLUSTER_RULES` (a ClusterRole: training JobSets live in every team's namespace): get, list and watch
  JobSets, pods, nodes, Kueue Workloads, Events and PersistentVolumeClaims; patch JobSets (its ledger annotation)
  and Workloads (``spec.active: false`` at the restart bound); create Events (on the JobSets).
* :func:`namespace_rules` (a Role in its own namespace): the reliability ConfigMap (create cannot name an object,
  then get and update that one only) and its Lease.
"""

from __future__ import annotations

from components.constants import KUEUE_GROUP
from daemons.toolkit.rbac import Rule, lease_rules

__all__ = ["CLUSTER_RULES", "Rule", "namespace_rules"]

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
