"""Interruptions under Pulumi's mocks: least-privilege RBAC, the settings document the daemon reads, the Deployment."""

from __future__ import annotations

import json
from typing import Any

import pytest

from components.controller import Controller, ControllerArgs
from contract.controllers.interruptions import SPEC
from contract.interruptions_settings import InterruptionsSettings, parse_settings
from tests.support.pulumi_harness import Graph, deploy

RBAC = "kubernetes:rbac.authorization.k8s.io/v1"
TOKEN = "gpucluster:interruptions:Interruptions"
METRICS_PORT = SPEC.metrics_port


def settings(**change: Any) -> InterruptionsSettings:
    return InterruptionsSettings.model_validate({"defaultMaxRestartsPerHour": 4, **change})


@pytest.fixture(scope="module")
def graph() -> Graph:
    return deploy(lambda: Controller("interruptions", ControllerArgs(spec=SPEC, settings=settings())))


def test_every_child_is_parented_and_the_outputs_are_registered(graph: Graph) -> None:
    component = next(r for r in graph.resources if r.type == TOKEN)
    children = [r for r in graph.resources if r.custom]
    assert children
    assert all(c.parent == component.urn for c in children)
    assert component.outputs["reliabilityConfigMap"] == "gpucluster-training/gpucluster-training-reliability"
    assert component.outputs["defaultMaxRestartsPerHour"] == 4


def test_least_privilege(graph: Graph) -> None:
    rules = graph.one(f"{RBAC}:ClusterRole", "interruptions-clusterrole").inputs["rules"]
    writes = {(g, res, v) for r in rules for g in r["apiGroups"] for res in r["resources"] for v in r["verbs"]}
    assert {v for g, res, v in writes if v not in ("get", "list", "watch")} == {"patch", "create"}
    assert {(g, res) for g, res, v in writes if v == "patch"} == {
        ("jobset.x-k8s.io", "jobsets"),
        ("kueue.x-k8s.io", "workloads"),
    }
    assert {(g, res) for g, res, v in writes if v == "create"} == {("", "events")}
    assert {res for _, res, _ in writes} == {
        "jobsets",
        "workloads",
        "pods",
        "nodes",
        "persistentvolumeclaims",
        "events",
    }
    role = graph.one(f"{RBAC}:Role", "interruptions-role")
    assert role.inputs["metadata"]["namespace"] == "gpucluster-training"
    named = {n for r in role.inputs["rules"] for n in r.get("resourceNames", [])}
    assert named == {"gpucluster-training-reliability", "gpucluster-interruptions"}
    unnamed = [r for r in role.inputs["rules"] if not r.get("resourceNames")]
    assert all(r["verbs"] == ["create"] for r in unnamed)


def test_the_settings_document_is_the_daemons(graph: Graph) -> None:
    cm = graph.one("kubernetes:core/v1:ConfigMap", "interruptions-settings")
    assert parse_settings(json.loads(cm.inputs["data"]["settings.json"]), "configmap") == settings()
    assert cm.inputs["metadata"]["labels"]["gpucluster.io/settings"] == "interruptions"


def test_the_deployment_runs_the_daemon(graph: Graph) -> None:
    dep = graph.one("kubernetes:apps/v1:Deployment", "interruptions-deployment")
    (container,) = dep.inputs["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["python3", "-m", "daemons.interruptions"]
    assert container["args"] == [
        "--settings",
        "/etc/gpucluster/interruptions/settings.json",
        "--listen",
        f"$(POD_IP):{METRICS_PORT}",
    ]
    assert dep.inputs["metadata"]["namespace"] == "gpucluster-training"
    assert graph.depends_on(dep, graph.one("kubernetes:core/v1:ConfigMap", "interruptions-settings"))


def test_args_refuse_what_cannot_run() -> None:
    with pytest.raises(ValueError, match="disabled"):
        ControllerArgs(spec=SPEC, settings=settings(enabled=False))
    with pytest.raises(TypeError, match="InterruptionsSettings"):
        ControllerArgs(spec=SPEC, settings={"enabled": True})
    with pytest.raises(ValueError, match="labels key"):
        ControllerArgs(spec=SPEC, settings=settings(), labels={"bad key": "x"})
