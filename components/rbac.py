"""RBAC wiring shared by the components whose daemons talk to the API server: a role and its binding to one
ServiceAccount, created as children of the component, the binding after the role and the account."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as k8s


def grant(
    parent: pulumi.Resource,
    resource_names: tuple[str, str],
    *,
    name: str,
    rules: Sequence[Mapping[str, Any]],
    service_account: k8s.core.v1.ServiceAccount,
    subject: Sequence[Mapping[str, str]],
    labels: Mapping[str, str],
    namespace: str | None = None,
    depends_on: Sequence[pulumi.Resource] = (),
) -> tuple[Any, Any]:
    """A Role (``namespace`` given) or ClusterRole named ``name`` with ``rules``, and its binding to ``subject``.

    ``resource_names`` are the Pulumi names of the role and the binding (kept stable: they are the resources' URNs).
    """
    role_name, binding_name = resource_names
    metadata: dict[str, Any] = {"name": name, "labels": dict(labels)}
    if namespace is not None:
        metadata["namespace"] = namespace
    kind = "Role" if namespace is not None else "ClusterRole"
    role_cls = k8s.rbac.v1.Role if namespace is not None else k8s.rbac.v1.ClusterRole
    binding_cls = k8s.rbac.v1.RoleBinding if namespace is not None else k8s.rbac.v1.ClusterRoleBinding
    role = role_cls(
        role_name,
        metadata=metadata,
        rules=[dict(r) for r in rules],
        opts=pulumi.ResourceOptions(parent=parent, depends_on=list(depends_on)),
    )
    binding = binding_cls(
        binding_name,
        metadata=metadata,
        role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
        subjects=[dict(s) for s in subject],
        opts=pulumi.ResourceOptions(parent=parent, depends_on=[role, service_account]),
    )
    return role, binding
