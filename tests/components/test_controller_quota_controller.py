"""The quota controller's spec deployed by Controller under Pulumi's mocks: least-privilege RBAC (the stack's
queues by name, Events in default), the settings document the daemon reads, the Deployment; the queues leave
spec.resourceGroups to it while it runs, and keep their static numbers and no ignoreChanges while it is off."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from components.cluster import GpuCluster, GpuClusterArgs
from components.config import StackConfigError, parse_stack_config, read_stack_file
from components.controller import Controller, ControllerArgs
from contract.controllers.quota_controller import SPEC
from contract.queues_settings import covers_gpus
from contract.quota_controller_settings import QuotaControllerSettings, parse_settings
from tests.support.pulumi_harness import Graph, deploy, secrets_of

ROOT = Path(__file__).resolve().parents[2]
RBAC = "kubernetes:rbac.authorization.k8s.io/v1"
CQ = "kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue"
FLAVOR = "kubernetes:kueue.x-k8s.io/v1beta2:ResourceFlavor"
TOKEN = "gpucluster:capacity:QuotaController"
APP = SPEC.app
METRICS_PORT = SPEC.metrics_port


def settings(**change: Any) -> QuotaControllerSettings:
    base: dict[str, Any] = {
        "flavors": [{"name": "h100", "nodeLabels": {"gpu": "h100"}, "declaredGpus": 32}],
        "clusterQueues": [{"name": "training", "quota": {"h100": 24}}, {"name": "eval", "quota": {"h100": 8}}],
    }
    return QuotaControllerSettings.model_validate({**base, **change})


@pytest.fixture(scope="module")
def graph() -> Graph:
    return deploy(lambda: Controller("quota", ControllerArgs(spec=SPEC, settings=settings())))


def test_every_child_is_parented_and_the_outputs_are_registered(graph: Graph) -> None:
    component = next(r for r in graph.resources if r.type == TOKEN)
    children = [r for r in graph.resources if r.custom]
    assert children
    assert all(c.parent == component.urn for c in children)
    assert component.outputs["clusterQueues"] == ["training", "eval"]


def test_the_cluster_role_lists_nodes_and_writes_only_the_stacks_queues(graph: Graph) -> None:
    rules = graph.one(f"{RBAC}:ClusterRole", "quota-clusterrole").inputs["rules"]
    assert rules == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]},
        {
            "apiGroups": ["kueue.x-k8s.io"],
            "resources": ["clusterqueues"],
            "verbs": ["get", "patch"],
            "resourceNames": ["eval", "training"],
        },
    ]
    events = graph.one(f"{RBAC}:Role", "quota-events-role")
    assert events.inputs["metadata"]["namespace"] == "default"
    assert events.inputs["rules"] == [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}]
    lease = graph.one(f"{RBAC}:Role", "quota-role")
    assert lease.inputs["metadata"]["namespace"] == "gpucluster-capacity"
    assert {n for r in lease.inputs["rules"] for n in r.get("resourceNames", [])} == {"gpucluster-quota-controller"}


def test_the_settings_document_is_the_daemons(graph: Graph) -> None:
    cm = graph.one("kubernetes:core/v1:ConfigMap", "quota-settings")
    assert parse_settings(json.loads(cm.inputs["data"]["settings.json"]), "configmap") == settings()
    assert cm.inputs["metadata"]["labels"]["gpucluster.io/settings"] == "quota-controller"


def test_the_deployment_runs_the_controller(graph: Graph) -> None:
    dep = graph.one("kubernetes:apps/v1:Deployment", "quota-deployment")
    (container,) = dep.inputs["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["python3", "-m", "daemons.quota_controller"]
    assert container["args"] == [
        "--settings",
        "/etc/gpucluster/quota-controller/settings.json",
        "--listen",
        f"$(POD_IP):{METRICS_PORT}",
    ]
    assert dep.inputs["spec"]["template"]["spec"]["serviceAccountName"] == APP
    assert graph.depends_on(dep, graph.one("kubernetes:core/v1:ConfigMap", "quota-settings"))


@pytest.mark.parametrize(
    ("change", "fragment"),
    [({"enabled": False}, "disabled"), ({"clusterQueues": []}, "no flavors or no clusterQueues")],
)
def test_args_refuse_what_cannot_run(change: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        ControllerArgs(spec=SPEC, settings=settings(**change))


# --- wired into the cluster ----------------------------------------------------------------------------------


def _cluster(stack: str, **section: Any) -> Graph:
    raw = read_stack_file(ROOT / "stacks" / f"Pulumi.{stack}.yaml")
    if section:
        raw["quotaController"] = {**raw.get("quotaController", {}), **section}
    cfg = parse_stack_config(copy.deepcopy(raw), stack)
    return deploy(lambda: GpuCluster(stack, GpuClusterArgs(config=cfg, secrets=secrets_of(cfg))))


def test_prod_runs_it_and_the_queues_leave_their_groups_to_it() -> None:
    graph = _cluster("prod")
    (component,) = [r for r in graph.resources if r.type == TOKEN]
    assert graph.parent_of(component).type == "gpucluster:cluster:GpuCluster"
    doc = json.loads(
        graph.one("kubernetes:core/v1:ConfigMap", "prod-quota-controller-settings").inputs["data"]["settings.json"]
    )
    assert {f["name"]: f["declaredGpus"] for f in doc["flavors"]} == {"h100": 512, "l40s": 256}
    assert {q["name"]: q["quota"] for q in doc["clusterQueues"]} == {
        "pretraining": {"h100": 448, "l40s": 64},
        "evaluation": {"h100": 64, "l40s": 192},
    }
    for cq in graph.of_type(CQ):
        if not covers_gpus(cq.inputs["spec"]["resourceGroups"]):
            # The queue of CPU-only work keeps its count of pods: no GPU there to follow.
            assert cq.inputs["metadata"]["name"] == "cpu-only"
            assert cq.ignore_changes == []
            continue
        assert cq.ignore_changes == ["spec.resourceGroups"]
        # created with the numbers at full capacity
        assert cq.inputs["spec"]["resourceGroups"]
    dep = graph.one("kubernetes:apps/v1:Deployment", "prod-quota-controller-deployment")
    assert all(
        graph.depends_on(dep, cq) for cq in graph.of_type(CQ) if covers_gpus(cq.inputs["spec"]["resourceGroups"])
    )
    namespaces = {r.inputs["metadata"]["name"]: r for r in graph.of_type("kubernetes:core/v1:Namespace")}
    assert namespaces["gpucluster-capacity"].inputs["metadata"]["labels"]["gpucluster.io/workload"] == "capacity"


def test_flavors_select_accepted_nodes() -> None:
    graph = _cluster("prod")
    gpu_flavors = [f for f in graph.of_type(FLAVOR) if f.inputs["metadata"]["name"] != "cpu-only"]
    assert len(gpu_flavors) == 2
    for flavor in gpu_flavors:
        assert flavor.inputs["spec"]["nodeLabels"]["gpucluster.io/accepted"] == "true"


def test_turned_off_the_queues_are_pulumis_again() -> None:
    graph = _cluster("prod", enabled=False)
    assert [r for r in graph.resources if r.type == TOKEN] == []
    assert all(cq.ignore_changes == [] for cq in graph.of_type(CQ))


@pytest.mark.parametrize("key", ["flavors", "clusterQueues", "outTaintKeys", "acceptedLabel", "acceptedValue"])
def test_the_stack_may_not_set_what_it_fills(key: str) -> None:
    raw = read_stack_file(ROOT / "stacks" / "Pulumi.prod.yaml")
    raw["quotaController"] = {key: "x"}
    with pytest.raises(StackConfigError, match=rf"quotaController\.{key}: .*is filled from"):
        parse_stack_config(raw, "prod")
