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
