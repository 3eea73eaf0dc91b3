"""TaintController under Pulumi's mocks: nodes-only ClusterRole, lease and events Role, settings with the node and
taint filled in, replicas behind leader election, the metrics port and its scrape annotations."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest

from components.config import load_stack_file
from components.controller import Controller, ControllerArgs
from contract.constants import SETTINGS_DIGEST_ANNOTATION
from contract.controllers.taint_controller import SPEC
from contract.taint_controller_settings import TaintControllerSettings
from tests.support.pulumi_harness import Graph, deploy

METRICS_PORT = SPEC.metrics_port

ROOT = Path(__file__).resolve().parents[2]
RBAC = "kubernetes:rbac.authorization.k8s.io/v1"


def settings() -> TaintControllerSettings:
    cfg = load_stack_file(ROOT / "stacks" / "Pulumi.local.yaml")
    assert cfg.burst is not None
    return cfg.burst.taint_controller


@pytest.fixture(scope="module")
def graph() -> Graph:
    return deploy(lambda: Controller("tc", ControllerArgs(spec=SPEC, settings=settings())))


def test_stack_settings_are_completed_from_the_virtual_node_and_burst_taint_key() -> None:
    s = settings()
    assert (s.node_name, s.taint_key, s.taint_effect) == (
        "gpu-burst",
        "gpucluster.io/in-cluster-capacity",
        "NoSchedule",
    )
    assert s.inference_namespaces == ["inference"]
    assert (s.high_mark, s.low_mark, s.hold_add, s.hold_remove, s.interval, s.replicas) == (8, 1, "20s", "5s", "2s", 2)


def test_cluster_role_allows_only_nodes_and_patches_only_the_virtual_node(graph: Graph) -> None:
    role = graph.one(f"{RBAC}:ClusterRole", "tc-clusterrole")
    assert role.inputs["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"], "resourceNames": ["gpu-burst"]},
    ]
    binding = graph.one(f"{RBAC}:ClusterRoleBinding", "tc-clusterrolebinding")
    assert binding.inputs["subjects"] == [
        {"kind": "ServiceAccount", "name": "gpucluster-taint-controller", "namespace": "gpucluster-burst"}
    ]


def test_namespace_role_is_its_lease_only(graph: Graph) -> None:
    role = graph.one(f"{RBAC}:Role", "tc-role")
    assert role.inputs["metadata"]["namespace"] == "gpucluster-burst"
    assert role.inputs["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "update", "patch"],
            "resourceNames": ["gpucluster-taint-controller"],
        },
    ]


def test_events_about_the_node_are_allowed_in_default_only(graph: Graph) -> None:
    """The API server takes Events about a Node only in namespace default; nothing else is granted there."""
    role = graph.one(f"{RBAC}:Role", "tc-events-role")
    assert role.inputs["metadata"]["namespace"] == "default"
    assert role.inputs["rules"] == [
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]}
    ]
    binding = graph.one(f"{RBAC}:RoleBinding", "tc-events-rolebinding")
    assert binding.inputs["metadata"]["namespace"] == "default"
    assert binding.inputs["roleRef"]["name"] == role.inputs["metadata"]["name"]


def test_settings_config_map_is_what_the_daemon_loads(graph: Graph) -> None:
    cm = graph.one("kubernetes:core/v1:ConfigMap", "tc-settings")
    loaded = TaintControllerSettings.model_validate(json.loads(cm.inputs["data"]["settings.json"]))
    # Where its pods run is the Deployment's business, not the daemon's: the document leaves it out.
    assert loaded == settings().model_copy(update={"node_selector": {}, "tolerations": []})
    assert json.loads(cm.inputs["data"]["settings.json"])["taintKey"] == "gpucluster.io/in-cluster-capacity"


def test_deployment_replicas_command_and_metrics(graph: Graph) -> None:
    deployment = graph.one("kubernetes:apps/v1:Deployment", "tc-deployment")
    spec = deployment.inputs["spec"]
    assert spec["replicas"] == 2
    template = spec["template"]
    document = graph.one("kubernetes:core/v1:ConfigMap", "tc-settings").inputs["data"]["settings.json"]
    assert template["metadata"]["annotations"] == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "9102",
        "prometheus.io/path": "/metrics",
        # the settings it reads at start: a change of them rolls the pods
        SETTINGS_DIGEST_ANNOTATION: hashlib.sha256(document.encode() + b"\0").hexdigest(),
    }
    assert template["spec"]["nodeSelector"] == {"sim.gpucluster.io/real-node": "true"}
    (container,) = template["spec"]["containers"]
    assert container["command"] == ["python3", "-m", "daemons.taint_controller"]
    assert container["args"][:2] == ["--settings", "/etc/gpucluster/taint-controller/settings.json"]
    assert container["ports"] == [{"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}]
    assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in container["env"]
    assert template["spec"]["securityContext"]["runAsNonRoot"] is True
    root = graph.one("gpucluster:burst:TaintController", "tc")
    assert root.outputs["taintKey"] == "gpucluster.io/in-cluster-capacity"
    for r in graph.resources:
        assert r is root or r.parent == root.urn


def test_args_refuse_disabled_wrong_type_and_the_virtual_nodes_own_taint() -> None:
    good = ControllerArgs(spec=SPEC, settings=settings())
    with pytest.raises(ValueError, match=r"ControllerArgs\(taint-controller\)\.settings\.enabled"):
        dataclasses.replace(good, settings=settings().model_copy(update={"enabled": False}))
    with pytest.raises(ValueError, match=r"ControllerArgs\(taint-controller\)\.settings\.taint_key"):
        dataclasses.replace(good, settings=settings().model_copy(update={"taint_key": "virtual-kubelet.io/provider"}))
    with pytest.raises(ValueError, match=r"ControllerArgs\(taint-controller\)\.settings\.taint_effect"):
        dataclasses.replace(good, settings=settings().model_copy(update={"taint_effect": "NoExecute"}))
    with pytest.raises(
        TypeError, match=r"ControllerArgs\(taint-controller\)\.settings: expected TaintControllerSettings"
    ):
        ControllerArgs(spec=SPEC, settings={"enabled": True})
