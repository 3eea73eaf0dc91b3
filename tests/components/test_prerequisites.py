"""The cluster prerequisites: what each stack needs of its cluster, and the check both ways, on the facts alone and
against a real kube-apiserver holding Nodes and CSIDrivers."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from pydantic import ValidationError

from components.cluster import GpuCluster, GpuClusterArgs
from components.config import StackConfig, StackConfigError, load_stack_file, parse_stack_config, read_stack_file
from components.preflight import ClusterUnreadableError, api_client, check
from components.prerequisites import ClusterFacts, facts_from, missing, requirements
from contract.prerequisites_settings import GpuOperatorChart, PrerequisitesSettings
from tests.support.apiserver import ApiServer, running_apiserver
from tests.support.pulumi_harness import deploy

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "kubernetes:core/v1:Namespace"


def stack(name: str) -> StackConfig:
    return load_stack_file(ROOT / "stacks" / f"Pulumi.{name}.yaml")


def needs(cfg: StackConfig) -> dict[str, tuple[str, ...]]:
    return {r.name: r.needed_by for r in requirements(cfg)}


def test_each_stack_needs_its_flavors_gpu_resource_its_fabrics_rdma_resource_and_its_csi_driver() -> None:
    assert needs(stack("local")) == {"nvidia.com/gpu": ("flavor h100",), "nfs.csi.k8s.io": ("gpucluster:storage",)}
    assert needs(stack("prod")) == {
        "nvidia.com/gpu": ("flavor h100", "flavor l40s"),
        "rdma/ib": ("flavor h100's fabric",),
        "exa.csi.ddn.com": ("gpucluster:storage",),
    }


def test_an_operator_the_stack_installs_is_not_asked_of_the_cluster() -> None:
    prod = stack("prod")
    settings = PrerequisitesSettings.model_validate(
        {"gpuOperator": {**_operator(prod, "gpu"), "install": True}, "networkOperator": _operator(prod, "network")}
    )
    assert set(needs(dataclasses.replace(prod, prerequisites=settings))) == {"rdma/ib", "exa.csi.ddn.com"}


def _operator(cfg: StackConfig, which: str) -> dict[str, Any]:
    chart = cfg.prerequisites.gpu_operator if which == "gpu" else cfg.prerequisites.network_operator
    return chart.model_dump(by_alias=True, exclude_none=True)


GPU_NODE = {"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "8", "nvidia.com/gpu": "8"}}}


def test_missing_names_the_resource_or_driver_who_needs_it_and_what_provides_it() -> None:
    prod = requirements(stack("prod"))
    facts = facts_from({"items": [GPU_NODE]}, {"items": []})
    problems = missing(prod, facts)
    assert len(problems) == 2
    assert problems[0].startswith("no node advertises rdma/ib (needed by flavor h100's fabric): install an RDMA")
    assert problems[1].startswith("the cluster has no CSIDriver exa.csi.ddn.com (needed by gpucluster:storage)")
    ib_node = {"metadata": {"name": "n2"}, "status": {"allocatable": {"nvidia.com/gpu": "8", "rdma/ib": "1k"}}}
    facts = facts_from({"items": [GPU_NODE, ib_node]}, {"items": [{"metadata": {"name": "exa.csi.ddn.com"}}]})
    assert missing(prod, facts) == []


@pytest.mark.parametrize("quantity", ["0", "0k", ""])
def test_a_resource_at_zero_is_not_advertised(quantity: str) -> None:
    node = {"metadata": {"name": "n"}, "status": {"allocatable": {"nvidia.com/gpu": quantity}}}
    facts = ClusterFacts(allocatable=facts_from({"items": [node]}, {}).allocatable, csi_drivers=frozenset())
    (problem, _) = missing(requirements(stack("local")), facts)
    assert problem.startswith("no node advertises nvidia.com/gpu (needed by flavor h100)")


# ------------------------------------------------------------------------------------ a real kube-apiserver


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    with running_apiserver(tmp_path_factory.mktemp("prerequisites-apiserver")) as api:
        yield api


def _node(name: str, allocatable: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {"capacity": allocatable, "allocatable": allocatable},
    }


def _csi_driver(name: str) -> dict[str, Any]:
    return {"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": name}, "spec": {}}


def test_against_a_cluster_a_stack_is_refused_until_it_has_what_it_needs(server: ApiServer) -> None:
    core = client.CoreV1Api(server.api_client)
    storage = client.StorageV1Api(server.api_client)
    core.create_node(_node("gpu-1", {"cpu": "96", "nvidia.com/gpu": "8"}))
    connected = api_client(str(server.kubeconfig), None)

    # prod on a cluster with GPUs but no RDMA plugin and no Lustre driver: both named
    lacking = check(stack("prod"), connected)
    assert [p.split(" (")[0] for p in lacking] == [
        "no node advertises rdma/ib",
        "the cluster has no CSIDriver exa.csi.ddn.com",
    ]
    # the local stack lacks only its CSI driver here
    assert [p.split(" (")[0] for p in check(stack("local"), connected)] == [
        "the cluster has no CSIDriver nfs.csi.k8s.io"
    ]

    core.create_node(_node("gpu-ib-1", {"cpu": "96", "nvidia.com/gpu": "8", "rdma/ib": "1k"}))
    for driver in ("exa.csi.ddn.com", "nfs.csi.k8s.io"):
        storage.create_csi_driver(_csi_driver(driver))
    assert check(stack("prod"), connected) == []
    assert check(stack("local"), connected) == []


def test_a_cluster_that_cannot_be_read_is_said_so_without_its_credentials(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: t\n"
        "clusters: [{name: t, cluster: {server: 'https://127.0.0.1:9'}}]\n"
        "users: [{name: t, user: {token: s3cret-token}}]\n"
        "contexts: [{name: t, context: {cluster: t, user: t}}]\n"
    )
    with pytest.raises(ClusterUnreadableError, match="cannot list nodes and CSI drivers") as refused:
        check(stack("local"), api_client(str(kubeconfig), None))
    assert "s3cret" not in str(refused.value)
    with pytest.raises(ClusterUnreadableError, match="neither a file nor a kubeconfig document"):
        api_client("just words", None)
    with pytest.raises(ClusterUnreadableError, match="cannot load the kubeconfig"):
        api_client(str(kubeconfig), "no-such-context")


# ------------------------------------------------------------------------------------ operators the stack installs


def _with_operators(exempt: list[str] | None = None) -> dict[str, Any]:
    raw = read_stack_file(ROOT / "stacks" / "Pulumi.prod.yaml")
    raw["prerequisites"] = {"gpuOperator": {"install": True}, "networkOperator": {"install": True}}
    if exempt is not None:
        raw["guardrails"] = {**raw.get("guardrails", {}), "exemptNamespaces": exempt}
    return raw


def test_an_installed_operators_namespace_must_be_exempt_from_the_guardrails() -> None:
    with pytest.raises(StackConfigError) as refused:
        parse_stack_config(_with_operators(["kube-system"]), "prod with operators")
    assert [i.path for i in refused.value.issues] == [
        "prerequisites.gpuOperator.namespace",
        "prerequisites.networkOperator.namespace",
    ]
    assert "guardrails.exemptNamespaces" in str(refused.value.issues[0])
    parse_stack_config(_with_operators(["kube-system", "gpu-operator", "nvidia-network-operator"]), "prod")


def test_the_stack_installs_each_operator_at_its_pin_in_a_privileged_namespace() -> None:
    exempt = ["kube-system", "gpu-operator", "nvidia-network-operator"]
    cfg = parse_stack_config(_with_operators(exempt), "prod with operators")
    graph = deploy(lambda: GpuCluster("prod", GpuClusterArgs(config=cfg)))
    charts = {c.name: c.inputs for c in graph.of_type("kubernetes:helm.sh/v4:Chart")}
    assert charts["prod-operators-gpu-operator"]["version"] == "v25.3.4"
    assert charts["prod-operators-gpu-operator"]["repositoryOpts"]["repo"] == "https://helm.ngc.nvidia.com/nvidia"
    assert charts["prod-operators-network-operator"]["namespace"] == "nvidia-network-operator"
    namespaces = {n.inputs["metadata"]["name"]: n.inputs["metadata"]["labels"] for n in graph.of_type(NAMESPACE)}
    assert namespaces["gpu-operator"]["pod-security.kubernetes.io/enforce"] == "privileged"
    # none while the stack leaves them to the cluster
    plain = deploy(lambda: GpuCluster("prod", GpuClusterArgs(config=stack("prod"))))
    assert not [c for c in plain.of_type("kubernetes:helm.sh/v4:Chart") if "operator" in c.name]


def test_a_bad_prerequisites_section_is_refused_naming_each_key() -> None:
    raw = read_stack_file(ROOT / "stacks" / "Pulumi.prod.yaml")
    raw["prerequisites"] = {"check": "yes", "gpuOperator": {"chartVersion": "latest", "colour": "green"}}
    with pytest.raises(StackConfigError) as refused:
        parse_stack_config(raw, "prod")
    assert sorted(i.path for i in refused.value.issues) == [
        "prerequisites.check",
        "prerequisites.gpuOperator.chartVersion",
        "prerequisites.gpuOperator.colour",
    ]


def test_the_gpu_operator_always_keeps_gpus_from_containers_that_ask_for_none() -> None:
    """The toolkit ignores NVIDIA_VISIBLE_DEVICES in unprivileged containers and the device plugin hands GPUs over
    as volume mounts, whatever else the stack's values say; values that would undo it are refused, naming where."""
    chart = GpuOperatorChart.model_validate(
        {
            "values": {
                "toolkit": {"env": [{"name": "CONTAINERD_SOCKET", "value": "/run/k3s/containerd/containerd.sock"}]}
            }
        }
    )
    values = chart.chart_values()
    toolkit = {e["name"]: e["value"] for e in values["toolkit"]["env"]}
    assert toolkit == {
        "CONTAINERD_SOCKET": "/run/k3s/containerd/containerd.sock",
        "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED": "false",
        "ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS": "true",
    }
    assert values["devicePlugin"] == {"env": [{"name": "DEVICE_LIST_STRATEGY", "value": "volume-mounts"}]}
    with pytest.raises(ValidationError) as refused:
        GpuOperatorChart.model_validate(
            {"values": {"devicePlugin": {"env": [{"name": "DEVICE_LIST_STRATEGY", "value": "envvar"}]}}}
        )
    assert "values.devicePlugin.env[0]: DEVICE_LIST_STRATEGY must stay 'volume-mounts'" in str(refused.value)
    with pytest.raises(ValidationError, match=r"values\.toolkit: expected a mapping"):
        GpuOperatorChart.model_validate({"values": {"toolkit": ["x"]}})
