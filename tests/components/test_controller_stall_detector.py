"""The stall detector under Pulumi's mocks: Roles only in the team namespaces and its own, no ClusterRole, the
settings document the daemon reads, the Deployment; every child parented."""

from __future__ import annotations

import json
from typing import Any

import pytest

from components.controller import Controller, ControllerArgs
from contract.controllers.stall_detector import SPEC
from contract.spec import WORKLOAD_NAMESPACES
from contract.stall_detector_settings import StallDetectorSettings, parse_settings
from tests.support.pulumi_harness import Graph, deploy

RBAC = "kubernetes:rbac.authorization.k8s.io/v1"
TOKEN = "gpucluster:training:StallDetector"
TEAMS = ["team-a", "team-b"]


def settings(**change: Any) -> StallDetectorSettings:
    return StallDetectorSettings.model_validate({"workloadNamespaces": TEAMS, **change})


@pytest.fixture(scope="module")
def graph() -> Graph:
    return deploy(
        lambda: Controller(
            "sd",
            ControllerArgs(spec=SPEC, settings=settings(), context={WORKLOAD_NAMESPACES: TEAMS}),
        )
    )


def test_every_child_is_parented_and_nothing_is_cluster_wide(graph: Graph) -> None:
    component = next(r for r in graph.resources if r.type == TOKEN)
    children = [r for r in graph.resources if r.custom]
    assert all(c.parent == component.urn for c in children)
    assert not [r for r in children if r.type in (f"{RBAC}:ClusterRole", f"{RBAC}:ClusterRoleBinding")]
    assert component.outputs["namespaces"] == TEAMS


def test_each_team_namespace_grants_reading_restarting_and_nothing_else(graph: Graph) -> None:
    for ns in TEAMS:
        role = graph.one(f"{RBAC}:Role", f"sd-role-{ns}")
        assert role.inputs["metadata"]["namespace"] == ns
        rules = {
            (r["apiGroups"][0], r["resources"][0]): (r["verbs"], r.get("resourceNames")) for r in role.inputs["rules"]
        }
        assert rules == {
            ("jobset.x-k8s.io", "jobsets"): (["get", "list", "watch", "patch"], None),
            ("", "pods"): (["get", "list", "watch"], None),
            ("", "pods/eviction"): (["create"], None),
            ("", "persistentvolumeclaims"): (["get"], ["checkpoints"]),
            ("", "events"): (["create"], None),
        }
    own = graph.one(f"{RBAC}:Role", "sd-role")
    assert own.inputs["metadata"]["namespace"] == "gpucluster-training"
    flat = [v for r in own.inputs["rules"] for v in r["verbs"]]
    assert not {"delete", "list", "*", "escalate", "bind", "patch"} & set(flat)


def test_the_settings_document_is_the_daemons(graph: Graph) -> None:
    cm = graph.one("kubernetes:core/v1:ConfigMap", "sd-settings")
    assert parse_settings(json.loads(cm.inputs["data"]["settings.json"]), "configmap") == settings()


def test_the_deployment_runs_the_controller(graph: Graph) -> None:
    dep = graph.one("kubernetes:apps/v1:Deployment", "sd-deployment")
    (container,) = dep.inputs["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["python3", "-m", "daemons.stall_detector"]
    assert container["args"][-1] == "$(POD_IP):9114"


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"settings": StallDetectorSettings()}, "no team namespace"),
        ({"context": {WORKLOAD_NAMESPACES: ["team-c"]}}, "not the stack's team namespaces"),
    ],
)
def test_args_refuse_what_cannot_run(change: dict[str, Any], fragment: str) -> None:
    base: dict[str, Any] = {"settings": settings(), "context": {WORKLOAD_NAMESPACES: TEAMS}}
    with pytest.raises(ValueError, match=fragment):
        ControllerArgs(spec=SPEC, **{**base, **change})
