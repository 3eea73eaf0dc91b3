"""virtual-node-least-privilege: the burst daemons' ClusterRoles."""

from __future__ import annotations

from typing import Any

import pytest

from components.virtual_node import PROVIDER_APP, provider_cluster_rules
from components.virtual_node import cluster_rules as virtual_node_cluster_rules
from policies.rbac import virtual_node_least_privilege
from tests.policies.support import (
    NA,
    check_resource,
)

CLUSTER_ROLE = "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole"


def _cluster_role(rules: list[dict[str, Any]], name: str = "gpucluster-virtual-node-gpu-burst") -> dict[str, Any]:
    return {"metadata": {"name": name}, "rules": rules}


def test_the_virtual_nodes_cluster_role_is_least_privilege() -> None:
    assert (
        check_resource(
            virtual_node_least_privilege, CLUSTER_ROLE, _cluster_role(virtual_node_cluster_rules("gpu-burst"))
        )
        == []
    )
    other = _cluster_role([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}], name="cluster-admin")
    assert check_resource(virtual_node_least_privilege, CLUSTER_ROLE, other) == NA


@pytest.mark.parametrize(
    ("rule", "fragment"),
    [
        ({"apiGroups": [""], "resources": ["pods"], "verbs": ["*"]}, "every verb"),
        ({"apiGroups": [""], "resources": ["*"], "verbs": ["get"]}, "every resource"),
        ({"apiGroups": ["*"], "resources": ["pods"], "verbs": ["get"]}, "every API group"),
        ({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}, "Secrets cluster-wide"),
        ({"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "delete"]}, "['delete'] on pods cluster-wide"),
        ({"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]}, "['patch'] on pods cluster-wide"),
        ({"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["bind"]}, "['bind']"),
        ({"apiGroups": [""], "resources": ["users"], "verbs": ["impersonate"]}, "['impersonate']"),
        ({"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"], "verbs": ["escalate"]}, "['escalate']"),
    ],
)
def test_over_privileged_burst_cluster_roles_fail(rule: dict[str, Any], fragment: str) -> None:
    for name in ("gpucluster-virtual-node-gpu-burst", "gpucluster-taint-controller-gpu-burst"):
        (violation,) = check_resource(virtual_node_least_privilege, CLUSTER_ROLE, _cluster_role([rule], name))
        assert f"ClusterRole {name} rules[0]" in violation
        assert fragment in violation


def test_aggregated_burst_cluster_role_fails() -> None:
    props = {**_cluster_role([]), "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"x": "y"}}]}}
    (violation,) = check_resource(virtual_node_least_privilege, CLUSTER_ROLE, props)
    assert "aggregates other roles" in violation


def test_the_burst_providers_cluster_role_is_reviewed_too_and_passes() -> None:
    # Its own identity since the split; named under the virtual node's prefix, so the default patterns cover it.
    name = f"{PROVIDER_APP}-gpu-burst"
    role = _cluster_role(provider_cluster_rules(), name)
    assert check_resource(virtual_node_least_privilege, CLUSTER_ROLE, role) == []
    leaky = [*provider_cluster_rules(), {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]
    found = check_resource(virtual_node_least_privilege, CLUSTER_ROLE, _cluster_role(leaky, name))
    assert isinstance(found, list)
    assert len(found) == 1
    assert f"ClusterRole {name} rules[2] grants Secrets cluster-wide" in found[0]
