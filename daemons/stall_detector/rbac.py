"""The stall detector's least-privilege RBAC rules, as data (the deploying component renders the same lists).

* :func:`team_rules` (a Role in each team namespace: it reads and restarts training there and nowhere else): read
  and patch JobSets (the restart record), read pods and evict them (``pods/eviction``: a PodDisruptionBudget holds,
  and the pod is marked ``DisruptionTarget``, which JobSet restarts in place), read the ``checkpoints`` claim (the
  progress reports), create Events (on the JobSets).
* :func:`namespace_rules` (a Role in its own namespace): its Lease and the suspects ConfigMap.

No node, no Secret, no delete: a node to quarantine is handed to the quarantine controller through a metric and
its alert, never tainted here.
"""

from __future__ import annotations

from components.stall_detector_settings import SUSPECTS_CONFIGMAP
from daemons.stall_detector.kube import CHECKPOINT_CLAIM
from daemons.toolkit.rbac import Rule, lease_rules

__all__ = ["Rule", "namespace_rules", "team_rules"]

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
