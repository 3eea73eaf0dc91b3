"""Quarantine under Pulumi's mocks: nodes-only ClusterRole, Node Events only in default, the Lease and the one ledger
ConfigMap in its namespace, the settings document the daemon reads, the Deployment; every child parented."""

from __future__ import annotations

import json
from typing import Any

import pytest

from components.controller import Controller, ControllerArgs
from contract.controllers.quarantine import SPEC
from contract.quarantine_settings import QuarantineSettings, parse_settings
from tests.support.pulumi_harness import Graph, deploy

RBAC = "kubernetes:rbac.authorization.k8s.io/v1"
TOKEN = "gpucluster:capacity:Quarantine"
APP = SPEC.app
METRICS_PORT = SPEC.metrics_port
FLAVORS = [
    {"name": "h100", "nodeLabels": {"gpu.example/type": "h100"}},
    {"name": "l40s", "nodeLabels": {"gpu.example/type": "l40s"}},
]


def settings(**change: Any) -> QuarantineSettings:
    return QuarantineSettings.model_validate({"flavors": FLAVORS, **change})


@pytest.fixture(scope="module")
def graph() -> Graph:
    return deploy(
        lambda: Controller(
            "q", ControllerArgs(spec=SPEC, settings=settings(), labels={"gpucluster.io/environment": "t"})
        )
    )


def test_every_child_is_parented_to_the_component(graph: Graph) -> None:
    component = next(r for r in graph.resources if r.type == TOKEN)
    children = [r for r in graph.resources if r.custom]
    assert len(children) == 9
    assert all(c.parent == component.urn for c in children)
    assert component.outputs["ledger"] == "gpucluster-capacity/gpucluster-quarantine"
    assert component.outputs["flavors"] == ["h100", "l40s"]


def test_the_cluster_role_reads_and_patches_nodes_only(graph: Graph) -> None:
    role = graph.one(f"{RBAC}:ClusterRole", "q-clusterrole")
    assert role.inputs["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch"]}
    ]
    binding = graph.one(f"{RBAC}:ClusterRoleBinding", "q-clusterrolebinding")
    assert binding.inputs["subjects"] == [{"kind": "ServiceAccount", "name": APP, "namespace": "gpucluster-capacity"}]


def test_node_events_only_in_default(graph: Graph) -> None:
    role = graph.one(f"{RBAC}:Role", "q-events-role")
    assert role.inputs["metadata"]["namespace"] == "default"
    assert role.inputs["rules"] == [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}]


def test_its_namespace_holds_the_lease_and_the_one_ledger(graph: Graph) -> None:
    role = graph.one(f"{RBAC}:Role", "q-role")
    assert role.inputs["metadata"]["namespace"] == "gpucluster-capacity"
    named = {r["resources"][0]: (r["verbs"], r["resourceNames"]) for r in role.inputs["rules"] if "resourceNames" in r}
    assert named == {
        "leases": (["get", "update"], ["gpucluster-quarantine"]),
        "configmaps": (["get", "patch"], ["gpucluster-quarantine"]),
    }
    unnamed = [(r["resources"][0], r["verbs"]) for r in role.inputs["rules"] if "resourceNames" not in r]
    assert unnamed == [("leases", ["create"]), ("configmaps", ["create"]), ("events", ["create"])]
    flat = [v for r in role.inputs["rules"] for v in r["verbs"]]
    assert not {"delete", "list", "*", "escalate", "bind"} & set(flat)


def test_the_settings_document_is_the_daemons(graph: Graph) -> None:
    cm = graph.one("kubernetes:core/v1:ConfigMap", "q-settings")
    daemon = parse_settings(json.loads(cm.inputs["data"]["settings.json"]), "configmap")
    assert daemon == settings()
    assert [f.name for f in daemon.flavors] == ["h100", "l40s"]
    assert cm.inputs["metadata"]["labels"]["gpucluster.io/settings"] == "quarantine"


def test_the_deployment_runs_the_controller_like_the_other_controllers(graph: Graph) -> None:
    dep = graph.one("kubernetes:apps/v1:Deployment", "q-deployment")
    spec = dep.inputs["spec"]
    assert spec["replicas"] == 2
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["python3", "-m", "daemons.quarantine"]
    assert container["args"] == ["--settings", "/etc/gpucluster/quarantine/settings.json", "--listen", "$(POD_IP):9108"]
    assert METRICS_PORT == 9108
    assert spec["template"]["metadata"]["annotations"]["prometheus.io/port"] == "9108"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["serviceAccountName"] == APP
    cm = graph.one("kubernetes:core/v1:ConfigMap", "q-settings")
    binding = graph.one(f"{RBAC}:ClusterRoleBinding", "q-clusterrolebinding")
    assert graph.depends_on(dep, cm)
    assert graph.depends_on(dep, binding)
    assert dep.inputs["metadata"]["labels"]["gpucluster.io/environment"] == "t"


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"settings": QuarantineSettings(enabled=False)}, "disabled"),
        ({"settings": QuarantineSettings()}, "no GPU flavor"),
        ({"labels": {"bad key!": "x"}}, "labels key"),
    ],
)
def test_args_refuse_what_cannot_run(change: dict[str, Any], fragment: str) -> None:
    base: dict[str, Any] = {"settings": settings()}
    with pytest.raises(ValueError, match=fragment):
        ControllerArgs(spec=SPEC, **{**base, **change})


def test_args_refuse_other_settings_types() -> None:
    with pytest.raises(TypeError, match="expected QuarantineSettings"):
        ControllerArgs(spec=SPEC, settings={"flavors": FLAVORS})
