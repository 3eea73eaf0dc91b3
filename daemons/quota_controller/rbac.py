"""The controller's least-privilege RBAC rules, as data (the deploying component renders the same lists).

* :func:`cluster_rules` (a ClusterRole): list Nodes (read only); get and patch (server-side apply) the stack's
  ClusterQueues, by name, nothing else of Kueue's.
* :data:`EVENT_RULES` (a Role in ``default``, where Events about cluster-scoped objects live): create Events.
* :func:`lease_rules` (a Role in the controller's namespace): its Lease only.
"""

from __future__ import annotations

from collections.abc import Sequence

from components.constants import KUEUE_GROUP
from daemons.toolkit.rbac import Rule, lease_rules

__all__ = ["EVENT_RULES", "Rule", "cluster_rules", "lease_rules"]

EVENT_RULES: tuple[Rule, ...] = (Rule(("",), ("events",), ("create",)),)


def cluster_rules(queues: Sequence[str]) -> tuple[Rule, ...]:
    return (
        Rule(("",), ("nodes",), ("list",)),
        Rule((KUEUE_GROUP,), ("clusterqueues",), ("get", "patch"), tuple(sorted(queues))),
    )
