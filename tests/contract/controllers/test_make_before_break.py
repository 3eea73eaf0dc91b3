"""The controller's least-privilege rules as data."""

from __future__ import annotations

from contract.controllers.make_before_break import cluster_rules, inference_rules
from contract.rbac import lease_rules


def test_rbac_rules_grant_no_secret_and_no_delete() -> None:
    rules = [r.to_k8s() for r in (*cluster_rules("make-before-break"), *inference_rules(), *lease_rules("l"))]
    assert all("secrets" not in r["resources"] and "*" not in r["resources"] for r in rules)
    assert all(set(r["verbs"]) <= {"get", "list", "patch", "create", "update"} for r in rules)
    assert {
        "apiGroups": ["kueue.x-k8s.io"],
        "resources": ["admissionchecks/status"],
        "verbs": ["patch"],
        "resourceNames": ["make-before-break"],
    } in rules
