"""What a team may do: its Role in its own namespace, bound to the group the stack names, and the one ConfigMap every
team reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from contract.constants import STORAGE_MEASURED_CONFIGMAP

#: A team's Role in its namespace: submit JobSets and delete its own, read what follows from them. No pod, Job or
#: Workload is written by hand, no exec, no other namespace; Secrets only in its own.
TEAM_RULES: tuple[dict[str, Any], ...] = (
    {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["get", "list", "watch", "create", "delete"]},
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "list", "watch"]},
    {
        "apiGroups": [""],
        "resources": ["pods", "pods/log", "events", "persistentvolumeclaims"],
        "verbs": ["get", "list", "watch"],
    },
    {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads", "localqueues"], "verbs": ["get", "list", "watch"]},
    # The team's own keys (W&B, Hugging Face, a cloud's), which its job specs name (secretEnv, secretFiles) instead
    # of holding them: in its namespace only.
    {
        "apiGroups": [""],
        "resources": ["secrets"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
)
TEAM_ROLE = "gpucluster-team"
RELIABILITY_READER = "gpucluster-teams-read-reliability"


def team_role(namespace: str, group: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The team's Role and the RoleBinding that gives it to ``group``, in ``namespace``."""
    role = {"metadata": {"name": TEAM_ROLE, "namespace": namespace}, "rules": [dict(r) for r in TEAM_RULES]}
    binding = {
        "metadata": {"name": TEAM_ROLE, "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": TEAM_ROLE},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}],
    }
    return role, binding


def reliability_reader(namespace: str, configmap: str, groups: Sequence[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Every team reads the ConfigMaps ``gpucluster submit`` sizes the checkpoint interval from (the measured
    reliability, and the file system's measured write rate beside it), nothing else."""
    names = [configmap, STORAGE_MEASURED_CONFIGMAP]
    role = {
        "metadata": {"name": RELIABILITY_READER, "namespace": namespace},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"], "resourceNames": names}],
    }
    binding = {
        "metadata": {"name": RELIABILITY_READER, "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": RELIABILITY_READER},
        "subjects": [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g} for g in sorted(set(groups))
        ],
    }
    return role, binding
