"""RBAC rules as data, for our controllers' own ``rbac.py`` modules (the deploying components render the same lists)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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


def lease_rules(lease_name: str) -> tuple[Rule, ...]:
    """A Role in the controller's namespace: create the Lease (create cannot name an object), then its own only."""
    return (
        Rule(("coordination.k8s.io",), ("leases",), ("create",)),
        Rule(("coordination.k8s.io",), ("leases",), ("get", "update"), (lease_name,)),
    )


@dataclass(frozen=True)
class Grant:
    """One Role (``namespace`` given) or ClusterRole named ``name`` with ``rules``, bound to the controller's
    ServiceAccount. ``resource`` is the Pulumi name stem of the role (``clusterrole``, ``role``,
    ``events-role-default``): the binding's is the same with ``rolebinding``; both are kept stable, as URNs."""

    resource: str
    name: str
    rules: tuple[Rule, ...]
    namespace: str | None = None

    def __post_init__(self) -> None:
        if "role" not in self.resource:
            raise ValueError(f"Grant.resource: {self.resource!r} must name the role (contain 'role')")
        if not self.rules:
            raise ValueError(f"Grant {self.resource!r}: no rules; grant nothing rather than an empty role")

    @property
    def binding_resource(self) -> str:
        return self.resource.replace("role", "rolebinding", 1)

    def k8s_rules(self) -> list[dict[str, Any]]:
        return [r.to_k8s() for r in self.rules]
