"""The metrics adapter: its settings, what the stack deploys for it, and the rule that HPAs on the request rate
have one."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from components.cluster import GpuCluster, GpuClusterArgs
from components.config import load_stack_file, parse_stack_config, read_stack_file
from components.config import rules as rules_module
from components.config.stack import StackConfigError, parse_sections
from components.metrics_adapter import APP, MetricsAdapter, MetricsAdapterArgs
from contract.constants import settings_digest
from contract.metrics_adapter_settings import MetricsAdapterSettings
from tests.support.pulumi_harness import Graph, deploy, secrets_of

ROOT = Path(__file__).resolve().parents[2]
QUERY = (
    'sum(rate(nginx_ingress_controller_requests{exported_namespace="<<.Namespace>>",exported_service="<<.Name>>"}[1m]))'
)


def settings(**overrides: Any) -> MetricsAdapterSettings:
    return MetricsAdapterSettings.model_validate({"enabled": True, "requestRateQuery": QUERY, **overrides})


def build(s: MetricsAdapterSettings) -> Graph:
    return deploy(lambda: MetricsAdapter("ma", MetricsAdapterArgs(settings=s, inference_namespaces=["inference"])))


def test_in_the_cluster_it_is_a_deployment_behind_the_apiservice() -> None:
    graph = build(settings())
    deployment = graph.one("kubernetes:apps/v1:Deployment", "ma-deployment")
    container = deployment.inputs["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == [APP]
    assert "--secure-port=6443" in container["args"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    api = graph.one("kubernetes:apiregistration.k8s.io/v1:APIService", "ma-apiservice")
    assert api.inputs["metadata"]["name"] == "v1beta2.custom.metrics.k8s.io"
    assert api.inputs["spec"]["service"] == {"name": APP, "namespace": "gpucluster-metrics", "port": 443}
    assert graph.depends_on(api, deployment)
    text = graph.one("kubernetes:core/v1:ConfigMap", "ma-config").inputs["data"]["config.json"]
    # The adapter reads its configuration at start: the pod template names it by digest, so a change rolls the pods.
    assert deployment.inputs["spec"]["template"]["metadata"]["annotations"] == settings_digest(text)
    doc = json.loads(text)
    assert doc == {
        "prometheusUrl": "http://prometheus-operated.monitoring.svc:9090",
        "queryTimeoutSeconds": 5.0,
        "namespaces": ["inference"],
        "metrics": [{"name": "requests_per_second", "resource": "services", "query": QUERY}],
    }
    root = graph.one("gpucluster:inference:MetricsAdapter", "ma")
    for r in graph.resources:
        assert r is root or r.parent == root.urn


def test_its_access_is_the_aggregation_pair_and_reading_services_in_the_inference_namespaces() -> None:
    graph = build(settings())
    refs = {r.inputs["roleRef"]["name"] for r in graph.resources if r.type.endswith("RoleBinding")}
    assert refs == {"system:auth-delegator", "extension-apiserver-authentication-reader", f"{APP}-services"}
    (role,) = graph.of_type("kubernetes:rbac.authorization.k8s.io/v1:Role")
    assert role.inputs["metadata"]["namespace"] == "inference"
    assert role.inputs["rules"] == [{"apiGroups": [""], "resources": ["services"], "verbs": ["get", "list", "watch"]}]
    assert not graph.of_type("kubernetes:rbac.authorization.k8s.io/v1:ClusterRole")


def test_outside_the_cluster_the_apiservice_reaches_it_by_external_name() -> None:
    graph = build(settings(externalAddress="localhost:18445"))
    assert not graph.of_type("kubernetes:apps/v1:Deployment")
    service = graph.one("kubernetes:core/v1:Service", "ma-service")
    assert service.inputs["spec"] == {
        "type": "ExternalName",
        "externalName": "localhost",
        "ports": [{"name": "https", "port": 18445, "protocol": "TCP"}],
    }
    api = graph.one("kubernetes:apiregistration.k8s.io/v1:APIService", "ma-apiservice")
    assert api.inputs["spec"]["service"]["port"] == 18445


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"requestRateQuery": None}, "required when the adapter is enabled"),
        ({"requestRateQuery": "sum(rate(requests_total[1m]))"}, "never names the Service"),
        ({"queryTimeout": "2m"}, "over 60s"),
        ({"externalAddress": "localhost"}, "pattern"),
        ({"prometheusUrl": "prometheus:9090"}, "URL"),
    ],
)
def test_bad_settings_are_refused_naming_the_field(overrides: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ValidationError) as err:
        settings(**overrides)
    assert fragment in str(err.value)


def test_args_refuse_an_adapter_that_is_off() -> None:
    with pytest.raises(ValueError, match="not enabled"):
        MetricsAdapterArgs(settings=MetricsAdapterSettings(), inference_namespaces=["inference"])


def test_the_local_stack_runs_it_as_pods_on_the_real_node_in_its_own_namespace() -> None:
    cfg = load_stack_file(ROOT / "stacks" / "Pulumi.local.yaml")
    graph = deploy(lambda: GpuCluster("sim", GpuClusterArgs(config=cfg, secrets=secrets_of(cfg))))
    ns = graph.one("kubernetes:core/v1:Namespace", "sim-ns-gpucluster-metrics")
    assert ns.inputs["metadata"]["labels"]["gpucluster.io/workload"] == "metrics"
    adapter = graph.one("gpucluster:inference:MetricsAdapter", "sim-metrics-adapter")
    assert adapter.outputs.get("external") is None
    pod = graph.one("kubernetes:apps/v1:Deployment", "sim-metrics-adapter-deployment").inputs["spec"]["template"]
    assert pod["spec"]["nodeSelector"] == {"sim.gpucluster.io/real-node": "true"}
    assert pod["spec"]["tolerations"] == [
        {"key": "sim.gpucluster.io/real-node", "operator": "Exists", "effect": "NoSchedule"}
    ]
    service = graph.one("kubernetes:core/v1:Service", "sim-metrics-adapter-service")
    assert service.inputs["spec"]["type"] == "ClusterIP"
    assert graph.one("gpucluster:cluster:GpuCluster", "sim").outputs["metricsAdapter"] is True


def test_placement_is_the_pods_and_refused_beside_an_external_address() -> None:
    spec = build(settings(nodeSelector={"node-role.example.com/system": "true"})).one(
        "kubernetes:apps/v1:Deployment", "ma-deployment"
    )
    assert spec.inputs["spec"]["template"]["spec"]["nodeSelector"] == {"node-role.example.com/system": "true"}
    assert "tolerations" not in spec.inputs["spec"]["template"]["spec"]
    # The configuration file the adapter reads never says where it runs.
    assert "nodeSelector" not in json.dumps(settings(nodeSelector={"a": "b"}).document(["inference"], "m"))
    with pytest.raises(ValidationError, match="externalAddress runs the adapter outside the cluster"):
        settings(externalAddress="localhost:18445", tolerations=[{"key": "a", "operator": "Exists"}])


def test_an_hpa_on_the_request_rate_needs_the_adapter() -> None:
    raw = read_stack_file(ROOT / "stacks" / "Pulumi.local.yaml")
    sections, _ = parse_sections(copy.deepcopy(raw))
    assert list(rules_module.request_rate_hpas_have_an_adapter(sections)) == []
    raw["metricsAdapter"] = {"enabled": False}
    sections, _ = parse_sections(raw)
    found = list(rules_module.request_rate_hpas_have_an_adapter(sections))
    assert [i.path for i in found] == ["inferenceServices[0].hpa.targetRequestsPerReplica"]
    with pytest.raises(StackConfigError, match=r"metricsAdapter\.enabled"):
        parse_stack_config(raw, "local without its adapter")
