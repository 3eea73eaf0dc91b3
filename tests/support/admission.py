"""Admission rules of the stack installed on a test's API server, waited for until the API server enforces them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from components.guardrails_policies import GuardrailInputs, Policy, manifests
from daemons.toolkit.kube import KubeError
from tests.support.apiserver import wait_for

ADMISSION = "/apis/admissionregistration.k8s.io/v1"


def controller_inputs(*training_namespaces: str, **controllers: Any) -> GuardrailInputs:
    """The rules' inputs holding the controllers named (``controller_users={...}``, ``make_before_break=...``); the
    workload rules see ``training_namespaces`` and nothing else of a stack."""
    return GuardrailInputs(
        training_namespaces=training_namespaces,
        priorities_by_namespace={},
        training_priority_class="gpucluster-training",
        exempt_namespaces=(),
        **controllers,
    )


def install_rule(
    post: Callable[[str, dict[str, Any]], Any], rule: Policy | None, probe: Callable[[], str | None]
) -> str:
    """Create ``rule``'s ValidatingAdmissionPolicy and binding with ``post(path, body)``, then wait (60 s at most)
    until ``probe`` (a hostile dry-run write: what the API server said refusing it, or None when it took it) is
    refused by this rule. The policy's name."""
    assert rule is not None, "the stack renders no such rule for these inputs"
    policy, binding = manifests(rule)
    post(f"{ADMISSION}/validatingadmissionpolicies", policy)
    post(f"{ADMISSION}/validatingadmissionpolicybindings", binding)
    name: str = policy["metadata"]["name"]

    def in_force() -> bool:
        said = probe()
        return said is not None and name in said

    wait_for(f"{name} in force", in_force, timeout=60)
    return name


def patch_as(api: Any, path: str, body: dict[str, Any]) -> str | None:
    """What the API server said refusing ``api``'s account a merge patch of ``path`` (a dry run: nothing is
    written), or None when it would take it. ``api``: any of the daemons' KubeApi clients."""
    try:
        api.request("PATCH", f"{path}?dryRun=All", "patch", body=body, content_type="application/merge-patch+json")
    except KubeError as exc:
        return str(exc)
    return None
