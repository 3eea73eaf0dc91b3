"""VirtualNode under Pulumi's mocks: two identities, each with the RBAC its own client uses and its token in its own
container only, the provider Secret only in the provider container, one replica with Recreate, the node's taint
flag, the settings ConfigMap, the capacity and replica transport outputs."""

from __future__ import annotations

import ast
import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest
from kubernetes.config import incluster_config
from pulumi.runtime import config as pulumi_config

from components.cluster import GpuCluster, GpuClusterArgs
from components.config import load_stack_file
from components.virtual_node import (
    APP,
    NODE_TAINT,
    PROVIDER_APP,
    PROVIDER_TOKEN_SECRET,
    SECRETS_DIR,
    SERVICE_ACCOUNT_DIR,
    VirtualNode,
    VirtualNodeArgs,
    cluster_rules,
    inference_namespace_rules,
    lease_rules,
    provider_cluster_rules,
    provider_inference_namespace_rules,
)
from contract.burst_settings import BurstSettings, with_cluster_name
from contract.constants import SETTINGS_DIGEST_ANNOTATION, settings_digest
from contract.images_settings import DEFAULT_DAEMONS_IMAGE, DEFAULT_VIRTUAL_NODE_IMAGE
from tests.support.pulumi_harness import Graph, Registered, deploy, secrets_of

ROOT = Path(__file__).resolve().parents[2]
RBAC = "kubernetes:rbac.authorization.k8s.io/v1"
#: How the SDK marks a secret value on the wire (pulumi.runtime.rpc): the whole stringData map travels as one.
SECRET_SIG = "4dabf18193072939515e22adb298388d"
SECRET_VALUES = {"runpodApiKey": "rpa_0123456789ABCDEFGHIJ", "eastKubeconfig": "apiVersion: v1\nkind: Config\n"}


def settings(**virtual_node: Any) -> BurstSettings:
    return BurstSettings.model_validate(
        {
            "virtualNode": {
                "nodeName": "gpu-burst",
                "namespace": "gpucluster-burst",
                "inferenceNamespaces": ["inference", "inference-canary"],
                **virtual_node,
            },
            "providers": [
                {"name": "fake-a", "kind": "fake", "maxGpus": 16, "gpuTypes": {"H100": {"pricePerGpuHour": 2.5}},
                 "fake": {"url": "http://127.0.0.1:18080"}},
                {"name": "runpod", "kind": "runpod", "maxGpus": 8, "gpuTypes": {"H100": {"pricePerGpuHour": 2.99}},
                 "runpod": {"apiKeySecret": "runpodApiKey"}},
                {"name": "east", "kind": "kubernetes", "maxGpus": 32, "gpuTypes": {"H100": {"pricePerGpuHour": 1.8}},
                 "addressRanges": ["10.96.0.0/12"],
                 "kubernetes": {"kubeconfigSecret": "eastKubeconfig"}},
            ],
        }
    )  # fmt: skip


@pytest.fixture(scope="module")
def graph() -> Graph:
    return deploy(lambda: VirtualNode("vn", VirtualNodeArgs(settings=settings(), secrets=dict(SECRET_VALUES))))


def _secret_keys(value: dict[str, Any]) -> list[str]:
    assert value.get(SECRET_SIG) == "1b47061264138c4ac30d75fd1eb44270", "stringData is not marked secret"
    return sorted(value["value"])


def _deployment(graph: Graph) -> Registered:
    return graph.one("kubernetes:apps/v1:Deployment", "vn-deployment")


def _containers(graph: Graph) -> dict[str, dict[str, Any]]:
    spec = _deployment(graph).inputs["spec"]["template"]["spec"]
    return {c["name"]: c for c in spec["containers"]}


def test_children_are_parented_and_outputs_registered(graph: Graph) -> None:
    root = graph.one("gpucluster:burst:VirtualNode", "vn")
    for r in graph.resources:
        if r is not root:
            assert r.parent == root.urn, f"{r.type} {r.name} is not a child of the component"
    assert root.outputs == {
        "nodeName": "gpu-burst",
        "capacity": 16 + 8 + 32,
        "serviceAccount": "gpucluster-virtual-node",
        "providerServiceAccount": "gpucluster-virtual-node-provider",
        "namespace": "gpucluster-burst",
        "providers": ["fake-a", "runpod", "east"],
        # No adapter puts TLS in front of a replica yet: every provider's traffic is plain.
        "replicaTransport": {"fake-a": "http", "runpod": "http", "east": "http"},
    }


def test_cluster_role_is_exactly_the_node_agent_rules(graph: Graph) -> None:
    role = graph.one(f"{RBAC}:ClusterRole", "vn-clusterrole")
    assert role.inputs["metadata"]["name"] == "gpucluster-virtual-node-gpu-burst"
    assert role.inputs["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["create", "list", "watch"]},
        {
            "apiGroups": [""],
            "resources": ["nodes"],
            "verbs": ["get", "update", "patch"],
            "resourceNames": ["gpu-burst"],
        },
        {
            "apiGroups": [""],
            "resources": ["nodes/status"],
            "verbs": ["update", "patch"],
            "resourceNames": ["gpu-burst"],
        },
        # pods are read everywhere, written only in the inference namespaces
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
    ]
    binding = graph.one(f"{RBAC}:ClusterRoleBinding", "vn-clusterrolebinding")
    assert binding.inputs["roleRef"]["name"] == "gpucluster-virtual-node-gpu-burst"
    assert binding.inputs["subjects"] == [
        {"kind": "ServiceAccount", "name": "gpucluster-virtual-node", "namespace": "gpucluster-burst"}
    ]


def _roles(graph: Graph, account: str) -> dict[str, list[dict[str, Any]]]:
    """Namespace -> rules of the Roles bound to one ServiceAccount."""
    bound = {
        (b.inputs["metadata"]["namespace"], b.inputs["roleRef"]["name"])
        for b in graph.of_type(f"{RBAC}:RoleBinding")
        if b.inputs["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": "gpucluster-burst"}]
    }
    return {
        r.inputs["metadata"]["namespace"]: r.inputs["rules"]
        for r in graph.of_type(f"{RBAC}:Role")
        if (r.inputs["metadata"]["namespace"], r.inputs["metadata"]["name"]) in bound
    }


def test_the_nodes_roles_write_pods_in_the_inference_namespaces_and_read_no_secret(graph: Graph) -> None:
    roles = _roles(graph, APP)
    assert sorted(roles) == ["inference", "inference-canary", "kube-node-lease"]
    assert roles["kube-node-lease"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "update", "patch"],
            "resourceNames": ["gpu-burst"],
        },
    ]
    for ns in ("inference", "inference-canary"):
        assert roles[ns] == [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]},
            {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["update", "patch"]},
            {"apiGroups": ["apps"], "resources": ["replicasets"], "verbs": ["get"]},
        ]
    cluster_resources = {res for rule in graph.one(f"{RBAC}:ClusterRole", "vn-clusterrole").inputs["rules"]
                         for res in rule["resources"]}  # fmt: skip
    assert not cluster_resources & {"secrets", "configmaps", "endpointslices", "services", "replicasets", "pods/status"}


def test_the_providers_own_account_and_roles(graph: Graph) -> None:
    sa = graph.one("kubernetes:core/v1:ServiceAccount", "vn-provider-sa")
    assert sa.inputs["metadata"]["name"] == PROVIDER_APP == "gpucluster-virtual-node-provider"
    assert sa.inputs["metadata"]["namespace"] == "gpucluster-burst"
    assert sa.inputs["automountServiceAccountToken"] is False  # no pod runs as it
    role = graph.one(f"{RBAC}:ClusterRole", "vn-provider-clusterrole")
    # Under the virtual node's name: the policy virtual-node-least-privilege reviews it too.
    assert role.inputs["metadata"]["name"] == "gpucluster-virtual-node-provider-gpu-burst"
    assert role.inputs["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
    ]
    binding = graph.one(f"{RBAC}:ClusterRoleBinding", "vn-provider-clusterrolebinding")
    assert binding.inputs["roleRef"]["name"] == "gpucluster-virtual-node-provider-gpu-burst"
    assert binding.inputs["subjects"] == [
        {"kind": "ServiceAccount", "name": PROVIDER_APP, "namespace": "gpucluster-burst"}
    ]
    roles = _roles(graph, PROVIDER_APP)
    assert sorted(roles) == ["inference", "inference-canary"]  # nothing in kube-node-lease
    for ns in ("inference", "inference-canary"):
        assert roles[ns] == [
            {"apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": ["get"]},
            {"apiGroups": [""], "resources": ["services"], "verbs": ["list"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]},
            {
                "apiGroups": ["discovery.k8s.io"],
                "resources": ["endpointslices"],
                "verbs": ["create", "get", "list", "update", "delete"],
            },
        ]
    # Every Role and binding is the component's child (test_children_are_parented_and_outputs_registered), and the
    # binding comes after its role and its account.
    # Every binding is to one of the two accounts.
    assert len(graph.of_type(f"{RBAC}:RoleBinding")) == len(_roles(graph, APP)) + len(roles)
    for ns in ("inference", "inference-canary"):
        rb = graph.one(f"{RBAC}:RoleBinding", f"vn-provider-rolebinding-{ns}")
        assert graph.depends_on(rb, graph.one(f"{RBAC}:Role", f"vn-provider-role-{ns}"))
        assert graph.depends_on(rb, sa)


#: Where a rule's resource lives (everything else: the core group).
_GROUPS = {"endpointslices": "discovery.k8s.io", "replicasets": "apps", "leases": "coordination.k8s.io"}


def _grants(rules: list[dict[str, Any]], verb: str, resource: str) -> bool:
    group = _GROUPS.get(resource, "")
    return any(
        verb in r["verbs"] and resource in r["resources"] and group in r["apiGroups"] and "resourceNames" not in r
        for r in rules
    )


def _granted(rules: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(verb, res) for r in rules for res in r["resources"] for verb in r["verbs"]}


#: The official client's method prefixes as RBAC verbs.
_VERBS = {"list": "list", "read": "get", "create": "create", "patch": "patch", "replace": "update", "delete": "delete"}
_CALL = re.compile(r"^(list|read|create|patch|replace|delete)_(?:namespaced_)?([a-z_]+?)(_for_all_namespaces)?$")


def _kube_py_calls() -> set[tuple[str, str, bool]]:
    """(verb, resource, across namespaces) of every call daemons/burst_provider/kube.py makes on the official client,
    read from its source: a call added there shows up here before any cluster refuses it."""
    tree = ast.parse((ROOT / "daemons" / "burst_provider" / "kube.py").read_text(encoding="utf-8"))
    calls = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        owner = node.func.value
        if isinstance(owner, ast.Attribute) and owner.attr in ("_core", "_discovery"):
            found = _CALL.match(node.func.attr)
            assert found, f"kube.py calls {node.func.attr}, which this test cannot map to a verb"
            verb, kind, everywhere = found.groups()
            calls.add((_VERBS[verb], kind.replace("_", "") + "s", everywhere is not None))
    return calls


def test_the_providers_rules_are_exactly_what_its_client_calls() -> None:
    calls = _kube_py_calls()
    # the scan sees the calls
    assert ("list", "pods", True) in calls
    assert ("get", "secrets", False) in calls
    cluster, namespaced = provider_cluster_rules(), provider_inference_namespace_rules()
    for verb, resource, everywhere in calls:
        # A call across namespaces needs the ClusterRole; Events go to the namespace of any pod on the node.
        where = cluster if everywhere or resource == "events" else namespaced
        assert _grants(where, verb, resource), (verb, resource)
    # ... and nothing more, anywhere.
    assert _granted(cluster) | _granted(namespaced) == {(verb, res) for verb, res, _ in calls}


#: What the node binary calls, virtual-kubelet v1.14.1 (node/node.go, node/lease_controller_v1.go, node/pod.go,
#: node/podcontroller.go, nodeutil/controller.go) and our collector (virtualnode/internal/provider/gc.go).
_NODE_CLUSTER_CALLS = [
    ("create", "nodes"),  # registers its Node
    ("list", "pods"),  # the pod informer, by spec.nodeName, and the collector
    ("watch", "pods"),
    ("create", "events"),  # the event recorder
    ("patch", "events"),
]
_NODE_OWN_CALLS = [("get", "nodes"), ("patch", "nodes/status")]  # on its own Node only
_NODE_LEASE_CALLS = [("create", "leases")]
_NODE_NAMESPACED_CALLS = [("update", "pods/status"), ("delete", "pods"), ("get", "replicasets")]
#: The provider's, which the node must not hold: a stolen node token reads no Secret and moves no traffic.
_PROVIDER_ONLY = [
    ("get", "secrets"),
    ("get", "configmaps"),
    ("list", "services"),
    ("patch", "pods"),
    ("create", "endpointslices"),
    ("update", "endpointslices"),
]


def test_the_nodes_rules_cover_what_it_calls_and_none_of_the_providers() -> None:
    cluster, namespaced, lease = cluster_rules("gpu-burst"), inference_namespace_rules(), lease_rules("gpu-burst")
    for verb, resource in _NODE_CLUSTER_CALLS:
        assert _grants(cluster, verb, resource), (verb, resource)
    for verb, resource in _NODE_OWN_CALLS:
        assert any(
            verb in r["verbs"] and resource in r["resources"] and r.get("resourceNames") == ["gpu-burst"]
            for r in cluster
        ), (verb, resource)
    for verb, resource in _NODE_LEASE_CALLS:
        assert _grants(lease, verb, resource), (verb, resource)
    for verb, resource in _NODE_NAMESPACED_CALLS:
        assert _grants(namespaced, verb, resource), (verb, resource)
    gc = (ROOT / "virtualnode" / "internal" / "provider" / "gc.go").read_text(encoding="utf-8")
    assert re.findall(r"(?:CoreV1|AppsV1)\(\)\.(\w+)\([^)]*\)\.(\w+)\(", gc) == [
        ("Pods", "List"),
        ("Pods", "List"),
        ("Pods", "Delete"),
        ("ReplicaSets", "Get"),
    ], "the collector calls something new: grant it here and in inference_namespace_rules"
    for verb, resource in _PROVIDER_ONLY:
        assert not _grants(cluster + namespaced + lease, verb, resource), (verb, resource)
        assert _grants(provider_cluster_rules() + provider_inference_namespace_rules(), verb, resource)


def test_a_node_rule_that_reads_secrets_is_caught() -> None:
    # The check above fails for a node that could read the Secrets its pods reference (as before the split).
    leaky = [*inference_namespace_rules(), {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]
    assert _grants(leaky, "get", "secrets")
    assert not _grants(inference_namespace_rules(), "get", "secrets")


def test_one_replica_recreated_never_two_nodes_at_once(graph: Graph) -> None:
    spec = _deployment(graph).inputs["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "Recreate"}


def test_node_container_registers_the_tainted_node(graph: Graph) -> None:
    node = _containers(graph)["node"]
    assert node["image"] == DEFAULT_VIRTUAL_NODE_IMAGE  # unset: the scheme's default
    assert node["args"] == [
        "--nodename=gpu-burst",
        "--provider-url=http://127.0.0.1:10299",
        "--taint=virtual-kubelet.io/provider=gpucluster:NoSchedule",
        "--listen-metrics=:10298",
    ]
    assert node["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert node["ports"] == [{"name": "metrics", "containerPort": 10298, "protocol": "TCP"}]
    assert NODE_TAINT == "virtual-kubelet.io/provider=gpucluster:NoSchedule"


def test_provider_api_on_loopback_and_metrics_and_probes_on_the_pods_address(graph: Graph) -> None:
    provider = _containers(graph)["provider"]
    assert provider["image"] == DEFAULT_DAEMONS_IMAGE
    assert provider["command"] == ["gpucluster-burst-provider"]
    assert provider["args"] == [
        "--settings",
        "/etc/gpucluster/burst/settings.json",
        "--secrets-dir",
        "/var/run/secrets/gpucluster/providers",
        "--listen",
        "127.0.0.1:10299",
        "--listen-metrics",
        "$(POD_IP):10297",
    ]
    assert provider["ports"] == [{"name": "burst-metrics", "containerPort": 10297, "protocol": "TCP"}]
    assert provider["env"] == [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    # Ready once rebuilt from the providers' listings; alive whenever it serves, so a provider's API down at start
    # (its startup grace of waiting) never ends in a restart that would only start the wait again.
    assert provider["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "burst-metrics"}
    assert provider["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "burst-metrics"}


def test_the_secret_is_mounted_only_in_the_provider(graph: Graph) -> None:
    spec = _deployment(graph).inputs["spec"]["template"]["spec"]
    secret_volumes = [v["name"] for v in spec["volumes"] if "secret" in v]
    assert secret_volumes == ["provider-secrets", "provider-token"]
    assert spec["volumes"][1]["secret"]["secretName"] == "gpucluster-virtual-node-provider-secrets"
    mounts = {name: {m["name"]: m for m in c.get("volumeMounts", [])} for name, c in _containers(graph).items()}
    assert "provider-secrets" not in mounts["node"]
    assert mounts["provider"]["provider-secrets"] == {
        "name": "provider-secrets",
        "mountPath": SECRETS_DIR,
        "readOnly": True,
    }
    for c in _containers(graph).values():
        # no credential travels as an environment variable
        assert all("secretKeyRef" not in e.get("valueFrom", {}) for e in c.get("env", []))
        assert c["securityContext"]["allowPrivilegeEscalation"] is False
        assert c["resources"]["requests"]
        assert c["resources"]["limits"]["memory"]
    assert spec["securityContext"]["runAsNonRoot"] is True


def _mounts(graph: Graph) -> dict[str, dict[str, str]]:
    """Container -> volume name -> mount path."""
    return {n: {m["name"]: m["mountPath"] for m in c["volumeMounts"]} for n, c in _containers(graph).items()}


def test_the_pod_mounts_no_token_and_each_container_only_its_own(graph: Graph) -> None:
    spec = _deployment(graph).inputs["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == APP  # the pod's identity is the node's
    assert spec["automountServiceAccountToken"] is False
    mounts = _mounts(graph)
    assert mounts["node"]["node-token"] == SERVICE_ACCOUNT_DIR
    assert mounts["provider"]["provider-token"] == SERVICE_ACCOUNT_DIR
    assert "provider-token" not in mounts["node"]
    assert "node-token" not in mounts["provider"]
    for container in _containers(graph).values():
        at_token_dir = [m for m in container["volumeMounts"] if m["mountPath"] == SERVICE_ACCOUNT_DIR]
        assert len(at_token_dir) == 1
        assert at_token_dir[0]["readOnly"] is True
    volumes = {v["name"]: v for v in spec["volumes"]}
    # The node's: the pod's own account's token, projected with the cluster CA and the namespace (what the kubelet
    # would mount everywhere), short-lived and renewed.
    sources = volumes["node-token"]["projected"]["sources"]
    assert sources[0] == {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}}
    assert sources[1] == {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}
    assert sources[2]["downwardAPI"]["items"][0]["path"] == "namespace"
    # The provider's: the token Secret of its own account.
    assert volumes["provider-token"]["secret"] == {"secretName": PROVIDER_TOKEN_SECRET, "defaultMode": 0o440}


def test_both_clients_read_their_token_where_their_container_mounts_it() -> None:
    # The provider: the Python client's in-cluster loader (daemons/burst_provider/kube.py, load_incluster_config).
    token, ca = incluster_config.SERVICE_TOKEN_FILENAME, incluster_config.SERVICE_CERT_FILENAME
    assert (token, ca) == (f"{SERVICE_ACCOUNT_DIR}/token", f"{SERVICE_ACCOUNT_DIR}/ca.crt")
    # The node: client-go's rest.InClusterConfig, which reads the same path, without a kubeconfig.
    main = (ROOT / "virtualnode" / "cmd" / "gpucluster-virtual-node" / "main.go").read_text(encoding="utf-8")
    assert "rest.InClusterConfig()" in main


def test_the_providers_token_secret(graph: Graph) -> None:
    token = graph.one("kubernetes:core/v1:Secret", "vn-provider-token")
    assert token.inputs["type"] == "kubernetes.io/service-account-token"
    assert token.inputs["metadata"]["name"] == PROVIDER_TOKEN_SECRET
    assert token.inputs["metadata"]["namespace"] == "gpucluster-burst"
    assert token.inputs["metadata"]["annotations"] == {"kubernetes.io/service-account.name": PROVIDER_APP}
    assert not {"data", "stringData"} & set(token.inputs)  # the token controller writes it
    assert "data" in token.secret_outputs  # and the engine keeps what it read back encrypted
    assert graph.depends_on(token, graph.one("kubernetes:core/v1:ServiceAccount", "vn-provider-sa"))
    deployment = _deployment(graph)
    assert graph.depends_on(deployment, token)
    assert graph.depends_on(deployment, graph.one(f"{RBAC}:ClusterRoleBinding", "vn-provider-clusterrolebinding"))


def test_secret_holds_exactly_the_named_provider_secrets(graph: Graph) -> None:
    secret = graph.one("kubernetes:core/v1:Secret", "vn-provider-secrets")
    assert secret.inputs["metadata"]["namespace"] == "gpucluster-burst"
    assert _secret_keys(secret.inputs["stringData"]) == ["eastKubeconfig", "runpodApiKey"]


def test_settings_config_map_round_trips_and_carries_no_secret_value(graph: Graph) -> None:
    cm = graph.one("kubernetes:core/v1:ConfigMap", "vn-settings")
    text = cm.inputs["data"]["settings.json"]
    deployed = BurstSettings.model_validate(json.loads(text))
    # Unset in the stack, the cluster's name is the stack's: its instances are told apart from another cluster's.
    assert deployed.virtual_node.cluster_name == "test"
    assert deployed.virtual_node.instance_owner == "test.gpu-burst"
    assert deployed == with_cluster_name(settings(), "test")
    assert json.loads(text)["providers"][1]["runpod"]["apiKeySecret"] == "runpodApiKey"  # camelCase, by alias
    for value in SECRET_VALUES.values():
        assert value not in text
    # The provider reads the file at start; the pod template names it by digest, so a change replaces the pod.
    template = graph.one("kubernetes:apps/v1:Deployment", "vn-deployment").inputs["spec"]["template"]
    assert (
        template["metadata"]["annotations"][SETTINGS_DIGEST_ANNOTATION]
        == settings_digest(text)[SETTINGS_DIGEST_ANNOTATION]
    )


def test_port_follows_the_settings() -> None:
    graph = deploy(lambda: VirtualNode("vn", VirtualNodeArgs(settings=settings(port=11000), secrets=SECRET_VALUES)))
    assert "--provider-url=http://127.0.0.1:11000" in _containers(graph)["node"]["args"]
    assert "127.0.0.1:11000" in _containers(graph)["provider"]["args"]


PLACEMENT = {
    "nodeSelector": {"node-role.example.org/system": "true"},
    "tolerations": [{"key": "node-role.example.org/system", "operator": "Exists", "effect": "NoSchedule"}],
}


def test_placement_goes_to_the_pod_and_stays_out_of_the_settings_it_reads() -> None:
    placed = deploy(lambda: VirtualNode("vn", VirtualNodeArgs(settings=settings(**PLACEMENT), secrets=SECRET_VALUES)))
    spec = placed.one("kubernetes:apps/v1:Deployment", "vn-deployment").inputs["spec"]["template"]
    assert spec["spec"]["nodeSelector"] == PLACEMENT["nodeSelector"]
    assert spec["spec"]["tolerations"] == PLACEMENT["tolerations"]
    text = placed.one("kubernetes:core/v1:ConfigMap", "vn-settings").inputs["data"]["settings.json"]
    assert not {"nodeSelector", "tolerations"} & set(json.loads(text)["virtualNode"])
    # Moving the pod is no settings change: the digest, and so the running pod, stay as they were.
    unplaced = deploy(lambda: VirtualNode("vn", VirtualNodeArgs(settings=settings(), secrets=SECRET_VALUES)))
    digests = [
        g.one("kubernetes:apps/v1:Deployment", "vn-deployment").inputs["spec"]["template"]["metadata"]["annotations"][
            SETTINGS_DIGEST_ANNOTATION
        ]
        for g in (placed, unplaced)
    ]
    assert digests[0] == digests[1]
    assert (
        "nodeSelector"
        not in unplaced.one("kubernetes:apps/v1:Deployment", "vn-deployment").inputs["spec"]["template"]["spec"]
    )


def test_a_placement_the_api_server_would_refuse_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match="tolerations"):
        settings(tolerations=[{"key": "x", "operator": "Sometimes"}])


def test_args_refuse_missing_extra_or_disabled() -> None:
    good = VirtualNodeArgs(settings=settings(), secrets=SECRET_VALUES)
    assert good.capacity == 56
    with pytest.raises(ValueError, match=r"VirtualNodeArgs\.secrets: no value for \['eastKubeconfig'\]"):
        dataclasses.replace(good, secrets={"runpodApiKey": "k"})
    with pytest.raises(ValueError, match=r"VirtualNodeArgs\.secrets: \['other'\] named by no provider"):
        dataclasses.replace(good, secrets={**SECRET_VALUES, "other": "x"})
    with pytest.raises(ValueError, match=r"VirtualNodeArgs\.settings: bursting is disabled"):
        dataclasses.replace(good, settings=settings().model_copy(update={"enabled": False}))
    with pytest.raises(ValueError, match=r"VirtualNodeArgs\.settings\.providers"):
        dataclasses.replace(good, settings=settings().model_copy(update={"providers": []}), secrets={})
    with pytest.raises(TypeError, match=r"VirtualNodeArgs\.settings: expected BurstSettings"):
        VirtualNodeArgs(settings={"virtualNode": {}}, secrets={})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"VirtualNodeArgs\.labels key"):
        dataclasses.replace(good, labels={"bad key!": "x"})


# --- wired into GpuCluster --------------------------------------------------------------------------------------


def test_local_cluster_bursts_through_the_virtual_node_and_taint_controller() -> None:
    cfg = load_stack_file(ROOT / "stacks" / "Pulumi.local.yaml")
    graph = deploy(lambda: GpuCluster("sim", GpuClusterArgs(config=cfg, secrets=secrets_of(cfg))))
    root = graph.one("gpucluster:cluster:GpuCluster", "sim")
    vn = graph.one("gpucluster:burst:VirtualNode", "sim-virtual-node")
    tc = graph.one("gpucluster:burst:TaintController", "sim-taint-controller")
    assert graph.parent_of(vn) is root
    assert graph.parent_of(tc) is root
    assert vn.outputs["capacity"] == 24  # fake-a's 16 and runpod-fake's 8
    ns = graph.one("kubernetes:core/v1:Namespace", "sim-ns-gpucluster-burst")
    assert ns.inputs["metadata"]["labels"]["gpucluster.io/workload"] == "burst"
    assert graph.depends_on(graph.one("kubernetes:apps/v1:Deployment", "sim-virtual-node-deployment"), ns)
    role = graph.one(f"{RBAC}:Role", "sim-virtual-node-role-inference")
    assert graph.depends_on(role, graph.one("kubernetes:core/v1:Namespace", "sim-ns-inference"))
    assert root.outputs["burst"] == {
        "virtualNode": "gpu-burst",
        "capacity": 24,
        "providers": ["fake-a", "runpod-fake"],
        "replicaTransport": {"fake-a": "http", "runpod-fake": "http"},
        "taintController": True,
    }
    # The one secret the local stack names: the key its RunPod fake accepts.
    secret = graph.one("kubernetes:core/v1:Secret", "sim-virtual-node-provider-secrets")
    assert _secret_keys(secret.inputs["stringData"]) == ["runpodFakeApiKey"]


def test_a_stack_with_secret_providers_gets_them_from_the_args_or_fails_early() -> None:
    local = load_stack_file(ROOT / "stacks" / "Pulumi.local.yaml")
    assert local.burst is not None
    burst = dataclasses.replace(local.burst, settings=settings(inferenceNamespaces=["inference"]))
    cfg = dataclasses.replace(local, burst=burst)
    with pytest.raises(ValueError, match=r"GpuClusterArgs\.secrets: no value for \['eastKubeconfig'\]"):
        GpuClusterArgs(config=cfg, secrets={"runpodApiKey": "k"})
    graph = deploy(lambda: GpuCluster("t", GpuClusterArgs(config=cfg, secrets={**SECRET_VALUES, "unused": "x"})))
    secret = graph.one("kubernetes:core/v1:Secret", "t-virtual-node-provider-secrets")
    assert _secret_keys(secret.inputs["stringData"]) == ["eastKubeconfig", "runpodApiKey"]


def test_disabled_burst_builds_neither_daemon() -> None:
    cfg = load_stack_file(ROOT / "stacks" / "Pulumi.prod.yaml")
    assert cfg.burst is not None
    assert not cfg.burst.enabled
    graph = deploy(lambda: GpuCluster("prod", GpuClusterArgs(config=cfg)))
    assert not graph.of_type("gpucluster:burst:VirtualNode")
    assert not graph.of_type("gpucluster:burst:TaintController")
    assert graph.one("gpucluster:cluster:GpuCluster", "prod").outputs.get("burst") is None


def test_without_explicit_secrets_the_cluster_reads_the_stacks_secret_config() -> None:
    local = load_stack_file(ROOT / "stacks" / "Pulumi.local.yaml")
    assert local.burst is not None
    cfg = dataclasses.replace(
        local, burst=dataclasses.replace(local.burst, settings=settings(inferenceNamespaces=["inference"]))
    )
    config = {f"gpucluster:{k}": v for k, v in SECRET_VALUES.items()}
    pulumi_config.set_all_config(config, list(config))
    try:
        graph = deploy(lambda: GpuCluster("t", GpuClusterArgs(config=cfg)))
    finally:
        pulumi_config.set_all_config({}, [])
    secret = graph.one("kubernetes:core/v1:Secret", "t-virtual-node-provider-secrets")
    assert _secret_keys(secret.inputs["stringData"]) == ["eastKubeconfig", "runpodApiKey"]
    assert secret.inputs["stringData"]["value"]["runpodApiKey"] == SECRET_VALUES["runpodApiKey"]
