"""Every policy of the pack, each with input that passes and input that violates it — plus the real program's
local and prod stacks, which must pass the whole pack."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from pulumi_policy import (
    PolicyCustomTimeouts,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.policy import _NotApplicableError

from components.cluster import GpuCluster, GpuClusterArgs
from components.config import load_stack_file
from components.telemetry import DCGM_COUNTERS_CONFIGMAP, DCGM_COUNTERS_KEY, counters_csv
from components.virtual_node import cluster_rules as virtual_node_cluster_rules
from daemons.burst_provider.settings import BurstSettings, settings_json
from policies import ALL_POLICIES
from policies.burst_settings import provider_secrets_not_in_config
from policies.descheduler import descheduler_bounded
from policies.images import image_problem, images_pinned
from policies.inference import (
    inference_gpu_deployments_burstable,
    inference_gpu_deployments_have_pdb,
    selector_matches,
)
from policies.priorities import training_above_inference, workload_priorities_ordered
from policies.quota import quota_within_capacity
from policies.rbac import virtual_node_least_privilege
from policies.secrets import no_secrets_in_clear
from policies.security import no_privileged_or_host_path
from policies.storage import checkpoint_claims_rwx
from policies.taints import burst_taint_never_noexecute
from policies.telemetry import dcgm_counters_complete
from tests.pulumi_harness import Graph, deploy

ROOT = Path(__file__).resolve().parents[2]
NA = "not applicable"


def _opts(secret_outputs: Sequence[str] = ()) -> PolicyResourceOptions:
    return PolicyResourceOptions(False, [], None, [], PolicyCustomTimeouts(0, 0, 0), list(secret_outputs))


def check_resource(
    policy: ResourceValidationPolicy,
    type_: str,
    props: Mapping[str, Any],
    config: Mapping[str, Any] | None = None,
    secret_outputs: Sequence[str] = (),
) -> list[str] | str:
    found: list[str] = []
    args = ResourceValidationArgs(type_, props, f"urn:{type_}::x", "x", _opts(secret_outputs), None, config or {})
    try:
        policy.validate(args, lambda message, urn=None: found.append(message))
    except _NotApplicableError:
        return NA
    return found


def resource(type_: str, props: Mapping[str, Any], name: str = "r") -> PolicyResource:
    return PolicyResource(type_, props, f"urn:{type_}::{name}", name, _opts(), None, None, [], {})


def check_stack(
    policy: StackValidationPolicy, resources: Sequence[PolicyResource], config: Mapping[str, Any] | None = None
) -> list[str] | str:
    found: list[str] = []
    try:
        policy.validate(
            StackValidationArgs(list(resources), config or {}), lambda message, urn=None: found.append(message)
        )
    except _NotApplicableError:
        return NA
    return found


# --- priorities -------------------------------------------------------------------------------------------------

PC = "kubernetes:scheduling.k8s.io/v1:PriorityClass"
WPC = "kubernetes:kueue.x-k8s.io/v1beta2:WorkloadPriorityClass"


def _pc(name: str, tier: str, value: int) -> PolicyResource:
    return resource(PC, {"metadata": {"name": name, "labels": {"gpucluster.io/tier": tier}}, "value": value}, name)


def test_training_priority_above_inference() -> None:
    ok = [_pc("train", "training", 100000), _pc("serve", "inference", 10000)]
    assert check_stack(training_above_inference, ok) == []
    bad = [_pc("train", "training", 1000), _pc("serve", "inference", 10000)]
    (violation,) = check_stack(training_above_inference, bad)
    assert "train (training, 1000) must be above serve (inference, 10000)" in violation
    assert check_stack(training_above_inference, []) == NA


def test_workload_priorities_follow_the_configured_order() -> None:
    def wpc(name: str, value: int) -> PolicyResource:
        return resource(WPC, {"metadata": {"name": name}, "value": value}, name)

    config = {"order": ["urgent", "default", "scavenger"]}
    assert check_stack(workload_priorities_ordered, [wpc("urgent", 100), wpc("default", 10)], config) == []
    (violation,) = check_stack(workload_priorities_ordered, [wpc("urgent", 10), wpc("default", 10)], config)
    assert "urgent (10) must be above default (10)" in violation


# --- burst taint ------------------------------------------------------------------------------------------------

KEY = "gpucluster.io/in-cluster-capacity"


def test_burst_taint_noschedule_passes_and_noexecute_fails() -> None:
    node = {"spec": {"taints": [{"key": KEY, "effect": "NoSchedule"}]}}
    assert check_resource(burst_taint_never_noexecute, "kubernetes:core/v1:Node", node) == []
    node["spec"]["taints"][0]["effect"] = "NoExecute"
    (violation,) = check_resource(burst_taint_never_noexecute, "kubernetes:core/v1:Node", node)
    assert "spec.taints[0]: the burst taint" in violation


def test_burst_taint_in_a_controller_config_map_and_tolerations() -> None:
    text = yaml.safe_dump({"taint": {"key": KEY, "effect": "NoExecute"}, "highMark": 8})
    (violation,) = check_resource(burst_taint_never_noexecute, "kubernetes:core/v1:ConfigMap", {"data": {"c": text}})
    assert "NoExecute" in violation
    # tolerating a NoExecute taint is not setting one
    pod = {"spec": {"tolerations": [{"key": KEY, "operator": "Exists", "effect": "NoExecute"}]}}
    assert check_resource(burst_taint_never_noexecute, "kubernetes:core/v1:Pod", pod) == []
    # other keys may be NoExecute
    other = {"spec": {"taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]}}
    assert check_resource(burst_taint_never_noexecute, "kubernetes:core/v1:Node", other) == []


# --- descheduler ------------------------------------------------------------------------------------------------


def _desched_policy(**overrides: Any) -> dict[str, Any]:
    policy: dict[str, Any] = {
        "apiVersion": "descheduler/v1alpha2",
        "kind": "DeschedulerPolicy",
        "maxNoOfPodsToEvictPerNode": 2,
        "maxNoOfPodsToEvictTotal": 4,
        "profiles": [
            {
                "name": "p",
                "pluginConfig": [{"name": "RemovePodsViolatingNodeTaints", "args": {"includedTaints": [KEY]}}],
                "plugins": {"deschedule": {"enabled": ["RemovePodsViolatingNodeTaints"]}},
            }
        ],
    }
    policy.update(overrides)
    return policy


def _config_map(policy: Mapping[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "descheduler"}, "data": {"policy.yaml": yaml.safe_dump(dict(policy))}}


CM = "kubernetes:core/v1:ConfigMap"


def test_descheduler_policy_bounded_passes() -> None:
    assert check_resource(descheduler_bounded, CM, _config_map(_desched_policy())) == []
    assert check_resource(descheduler_bounded, CM, {"data": {"x": "y"}}) == NA


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        (_desched_policy(maxNoOfPodsToEvictTotal=None), "maxNoOfPodsToEvictTotal is not set"),
        (_desched_policy(maxNoOfPodsToEvictPerNode=50), "maxNoOfPodsToEvictPerNode is 50, above the allowed 5"),
        (_desched_policy(profiles=[]), "no profile enables RemovePodsViolatingNodeTaints"),
    ],
)
def test_descheduler_policy_violations(policy: dict[str, Any], message: str) -> None:
    found = check_resource(descheduler_bounded, CM, _config_map(policy))
    assert any(message in v for v in found), found


def test_descheduler_policy_must_include_the_burst_taint() -> None:
    policy = _desched_policy()
    wrong = copy.deepcopy(policy)
    wrong["profiles"][0]["pluginConfig"][0]["args"]["includedTaints"] = ["other/key"]
    (violation,) = check_resource(descheduler_bounded, CM, _config_map(wrong))
    assert "does not include the burst taint" in violation
    chart_values = {"values": {"deschedulerPolicy": wrong}}
    assert check_resource(descheduler_bounded, "kubernetes:helm.sh/v4:Chart", chart_values) != []


# --- quota ------------------------------------------------------------------------------------------------------


def _flavor(name: str, gpus: int | None) -> PolicyResource:
    meta: dict[str, Any] = {"name": name}
    if gpus is not None:
        meta["annotations"] = {"gpucluster.io/declared-gpus": str(gpus)}
    return resource("kubernetes:kueue.x-k8s.io/v1beta2:ResourceFlavor", {"metadata": meta}, name)


def _cq(name: str, **quota: int) -> PolicyResource:
    flavors = [{"name": f, "resources": [{"name": "nvidia.com/gpu", "nominalQuota": q}]} for f, q in quota.items()]
    spec = {"resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": flavors}]}
    return resource("kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue", {"metadata": {"name": name}, "spec": spec}, name)


def test_quota_within_declared_capacity() -> None:
    assert check_stack(quota_within_capacity, [_flavor("h100", 512), _cq("a", h100=448), _cq("b", h100=64)]) == []
    (violation,) = check_stack(quota_within_capacity, [_flavor("h100", 512), _cq("a", h100=448), _cq("b", h100=128)])
    assert "flavor h100: ClusterQueue quota 576 (a: 448, b: 128) exceeds the 512 GPUs declared" in violation
    missing = check_stack(quota_within_capacity, [_flavor("h100", None), _cq("a", h100=8)])
    assert any("does not declare its GPUs" in v for v in missing)


# --- storage ----------------------------------------------------------------------------------------------------


def _class(reclaim: str = "Retain") -> PolicyResource:
    props = {
        "metadata": {"name": "lustre", "labels": {"gpucluster.io/storage-driver": "lustre"}},
        "reclaimPolicy": reclaim,
    }
    return resource("kubernetes:storage.k8s.io/v1:StorageClass", props, "lustre")


def _claim(modes: list[str], cls: str = "lustre") -> PolicyResource:
    props = {
        "metadata": {"name": "checkpoints", "namespace": "team-a", "labels": {"gpucluster.io/claim": "checkpoints"}},
        "spec": {"accessModes": modes, "storageClassName": cls},
    }
    return resource("kubernetes:core/v1:PersistentVolumeClaim", props, "ckpt")


def test_checkpoint_claims_rwx_on_parallel_fs() -> None:
    assert check_stack(checkpoint_claims_rwx, [_class(), _claim(["ReadWriteMany"])]) == []
    (rwo,) = check_stack(checkpoint_claims_rwx, [_class(), _claim(["ReadWriteOnce"])])
    assert "team-a/checkpoints has accessModes ['ReadWriteOnce']" in rwo
    (wrong_class,) = check_stack(checkpoint_claims_rwx, [_class(), _claim(["ReadWriteMany"], "standard")])
    assert "not a parallel-filesystem class" in wrong_class
    (deleted,) = check_stack(checkpoint_claims_rwx, [_class("Delete"), _claim(["ReadWriteMany"])])
    assert "not Retain" in deleted


# --- images, privileges, secrets --------------------------------------------------------------------------------

DEPLOY = "kubernetes:apps/v1:Deployment"


def _deployment(namespace: str = "inference", **container: Any) -> dict[str, Any]:
    c = {"name": "app", "image": "registry.example/app:1.2.3", **container}
    return {"metadata": {"name": "app", "namespace": namespace}, "spec": {"template": {"spec": {"containers": [c]}}}}


@pytest.mark.parametrize(
    ("image", "pinned"),
    [
        ("registry.example/app:1.2.3", True),
        ("registry.example:5000/app:v2", True),
        ("app@sha256:" + "a" * 64, True),
        ("registry.example/app:latest", False),
        ("registry.example:5000/app", False),
        ("app", False),
    ],
)
def test_image_pinning_rules(image: str, pinned: bool) -> None:
    assert (image_problem(image) is None) is pinned


def test_images_pinned_policy() -> None:
    assert check_resource(images_pinned, DEPLOY, _deployment()) == []
    (violation,) = check_resource(images_pinned, DEPLOY, _deployment(image="registry.example/app:latest"))
    assert "inference/app containers/app: image 'registry.example/app:latest' uses the floating tag" in violation
    assert check_resource(images_pinned, CM, {"data": {}}) == NA


def test_no_privileged_or_host_path_outside_node_agents() -> None:
    priv = _deployment(securityContext={"privileged": True})
    assert check_resource(no_privileged_or_host_path, DEPLOY, _deployment()) == []
    (violation,) = check_resource(no_privileged_or_host_path, DEPLOY, priv)
    assert "privileged container" in violation
    host = _deployment()
    host["spec"]["template"]["spec"]["volumes"] = [{"name": "sys", "hostPath": {"path": "/sys"}}]
    (violation,) = check_resource(no_privileged_or_host_path, DEPLOY, host)
    assert "mounts host path /sys" in violation
    host["metadata"]["namespace"] = "gpu-telemetry"
    assert check_resource(no_privileged_or_host_path, DEPLOY, host) == []


def test_no_secrets_in_clear() -> None:
    secret = {"metadata": {"name": "provider-keys"}, "stringData": {"runpod": "k"}}
    assert check_resource(no_secrets_in_clear, "kubernetes:core/v1:Secret", secret, secret_outputs=["stringData"]) == []
    (violation,) = check_resource(no_secrets_in_clear, "kubernetes:core/v1:Secret", secret)
    assert "stringData is not declared a secret output" in violation
    (violation,) = check_resource(no_secrets_in_clear, CM, {"metadata": {"name": "c"}, "data": {"API_KEY": "abc"}})
    assert "key API_KEY looks like a credential" in violation
    assert check_resource(no_secrets_in_clear, CM, {"data": {"interval": "5m"}}) == []
    literal = _deployment(env=[{"name": "RUNPOD_API_KEY", "value": "abc"}])
    (violation,) = check_resource(no_secrets_in_clear, DEPLOY, literal)
    assert "env RUNPOD_API_KEY carries a literal value" in violation
    ref = _deployment(env=[{"name": "RUNPOD_API_KEY", "valueFrom": {"secretKeyRef": {"name": "k", "key": "runpod"}}}])
    assert check_resource(no_secrets_in_clear, DEPLOY, ref) == []


# --- DCGM counters ----------------------------------------------------------------------------------------------


def _counters(text: str) -> dict[str, Any]:
    return {
        "metadata": {"name": DCGM_COUNTERS_CONFIGMAP, "namespace": "gpu-telemetry"},
        "data": {DCGM_COUNTERS_KEY: text},
    }


def test_dcgm_counters_keep_the_alert_fields() -> None:
    assert check_resource(dcgm_counters_complete, CM, _counters(counters_csv())) == []
    without_temp = "\n".join(line for line in counters_csv().splitlines() if "DCGM_FI_DEV_GPU_TEMP" not in line)
    (violation,) = check_resource(dcgm_counters_complete, CM, _counters(without_temp))
    assert "drops fields the alerts and dashboard need: ['DCGM_FI_DEV_GPU_TEMP']" in violation
    (violation,) = check_resource(dcgm_counters_complete, CM, _counters("DCGM_FI_DEV_GPU_TEMP gauge\n"))
    assert "line 1: expected" in violation
    assert check_resource(dcgm_counters_complete, CM, {"metadata": {"name": "other"}, "data": {}}) == NA


# --- the real program -------------------------------------------------------------------------------------------


def _as_policy_resources(graph: Graph) -> list[PolicyResource]:
    return [resource(r.type, r.inputs, r.name) for r in graph.resources if r.custom]


@pytest.mark.parametrize("stack", ["local", "prod"])
def test_the_real_stacks_pass_every_policy(stack: str) -> None:
    cfg = load_stack_file(ROOT / "stacks" / f"Pulumi.{stack}.yaml")
    graph = deploy(lambda: GpuCluster(stack, GpuClusterArgs(config=cfg)))
    resources = _as_policy_resources(graph)
    applied = 0
    for policy in ALL_POLICIES:
        if isinstance(policy, StackValidationPolicy):
            outcome = check_stack(policy, resources)
            applied += outcome != NA
            assert outcome in ([], NA), f"{policy.name}: {outcome}"
        else:
            assert isinstance(policy, ResourceValidationPolicy)
            for r in resources:
                outcome = check_resource(policy, r.resource_type, r.props)
                assert outcome in ([], NA), f"{policy.name} on {r.name}: {outcome}"
    assert applied >= 4  # priorities (both), quota and storage looked at real resources


def test_the_pack_is_mandatory_by_default() -> None:
    names = [p.name for p in ALL_POLICIES]
    assert len(names) == len(set(names)) >= 10
    assert all(p.enforcement_level.value == "mandatory" for p in ALL_POLICIES)


# --- burst: inference Deployments, their budgets, the daemons' RBAC and settings -----------------------------------

VK_TOLERATION = {
    "key": "virtual-kubelet.io/provider",
    "operator": "Equal",
    "value": "gpucluster",
    "effect": "NoSchedule",
}
APP_LABELS = {"app.kubernetes.io/name": "sd-serve", "tier": "web"}


def _gpu_deployment(namespace: str = "inference", tolerations: Any = None, gpus: Any = "1") -> dict[str, Any]:
    c: dict[str, Any] = {"name": "server", "image": "registry.example/sd:1.0.0", "resources": {"limits": {}}}
    if gpus is not None:
        c["resources"]["limits"]["nvidia.com/gpu"] = gpus
    return {
        "metadata": {"name": "sd-serve", "namespace": namespace},
        "spec": {
            "template": {
                "metadata": {"labels": dict(APP_LABELS)},
                "spec": {"containers": [c], "tolerations": [VK_TOLERATION] if tolerations is None else tolerations},
            }
        },
    }


def test_gpu_inference_deployment_that_can_burst_and_return_passes() -> None:
    assert check_resource(inference_gpu_deployments_burstable, DEPLOY, _gpu_deployment()) == []
    exists = _gpu_deployment(tolerations=[{"key": "virtual-kubelet.io/provider", "operator": "Exists"}])
    assert check_resource(inference_gpu_deployments_burstable, DEPLOY, exists) == []
    # not applicable: CPU only, a training namespace, not a Deployment
    assert check_resource(inference_gpu_deployments_burstable, DEPLOY, _gpu_deployment(gpus=None)) == NA
    assert check_resource(inference_gpu_deployments_burstable, DEPLOY, _gpu_deployment(gpus="0")) == NA
    assert check_resource(inference_gpu_deployments_burstable, DEPLOY, _gpu_deployment("team-vision", [])) == NA
    assert check_resource(inference_gpu_deployments_burstable, CM, {"data": {}}) == NA


def test_gpu_inference_deployment_without_the_virtual_node_toleration_fails() -> None:
    (violation,) = check_resource(inference_gpu_deployments_burstable, DEPLOY, _gpu_deployment(tolerations=[]))
    assert "Deployment inference/sd-serve does not tolerate virtual-kubelet.io/provider=gpucluster" in violation
    wrong_value = [{**VK_TOLERATION, "value": "other"}]
    (violation,) = check_resource(inference_gpu_deployments_burstable, DEPLOY, _gpu_deployment(tolerations=wrong_value))
    assert "cannot burst" in violation
    canary = _gpu_deployment("inference-canary", tolerations=[])
    assert len(check_resource(inference_gpu_deployments_burstable, DEPLOY, canary)) == 1  # inference-* by default


@pytest.mark.parametrize(
    "toleration",
    [
        {"key": KEY, "operator": "Exists", "effect": "NoSchedule"},
        {"key": KEY, "operator": "Equal", "value": "true"},
        {"operator": "Exists"},  # an empty key with Exists tolerates every taint, the burst taint included
    ],
)
def test_gpu_inference_deployment_tolerating_the_burst_taint_fails(toleration: dict[str, str]) -> None:
    props = _gpu_deployment(tolerations=[VK_TOLERATION, toleration])
    (violation,) = check_resource(inference_gpu_deployments_burstable, DEPLOY, props)
    assert f"tolerates the burst taint {KEY}" in violation
    assert "could never bring its replicas home" in violation


def test_burstable_policy_follows_its_config() -> None:
    props = _gpu_deployment(tolerations=[VK_TOLERATION, {"key": "example.com/burst", "operator": "Exists"}])
    assert check_resource(inference_gpu_deployments_burstable, DEPLOY, props) == []
    config = {"burstTaintKey": "example.com/burst"}
    assert len(check_resource(inference_gpu_deployments_burstable, DEPLOY, props, config)) == 1
    serving = _gpu_deployment("serving", tolerations=[])
    assert check_resource(inference_gpu_deployments_burstable, DEPLOY, serving) == NA
    assert (
        len(check_resource(inference_gpu_deployments_burstable, DEPLOY, serving, {"inferenceNamespaces": ["serving"]}))
        == 1
    )


def _pdb(namespace: str = "inference", selector: Any = None) -> PolicyResource:
    spec = {
        "minAvailable": "75%",
        "selector": {"matchLabels": {"app.kubernetes.io/name": "sd-serve"}} if selector is None else selector,
    }
    return resource(
        "kubernetes:policy/v1:PodDisruptionBudget",
        {"metadata": {"name": "sd", "namespace": namespace}, "spec": spec},
        f"pdb-{namespace}",
    )


def test_gpu_inference_deployment_with_a_matching_pdb_passes() -> None:
    deployment = resource(DEPLOY, _gpu_deployment(), "sd")
    assert check_stack(inference_gpu_deployments_have_pdb, [deployment, _pdb()]) == []
    expressions = {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["web", "api"]}]}
    assert check_stack(inference_gpu_deployments_have_pdb, [deployment, _pdb(selector=expressions)]) == []
    assert check_stack(inference_gpu_deployments_have_pdb, [resource(DEPLOY, _gpu_deployment(gpus=None), "cpu")]) == NA


@pytest.mark.parametrize(
    "pdbs",
    [
        [],
        [_pdb("inference-canary")],
        [_pdb(selector={"matchLabels": {"app.kubernetes.io/name": "other"}})],
        [_pdb(selector={"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["web"]}]})],
    ],
    ids=["none", "other-namespace", "other-labels", "expression-excludes"],
)
def test_gpu_inference_deployment_without_a_matching_pdb_fails(pdbs: list[PolicyResource]) -> None:
    (violation,) = check_stack(inference_gpu_deployments_have_pdb, [resource(DEPLOY, _gpu_deployment(), "sd"), *pdbs])
    assert "Deployment inference/sd-serve has no PodDisruptionBudget in inference selecting its pods" in violation


def test_label_selector_semantics() -> None:
    labels = {"a": "1"}
    assert selector_matches({}, labels)  # policy/v1: empty selects all
    assert not selector_matches(None, labels)
    assert selector_matches({"matchExpressions": [{"key": "b", "operator": "DoesNotExist"}]}, labels)
    assert not selector_matches({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, labels)
    assert selector_matches({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, labels)
    assert not selector_matches({"matchExpressions": [{"key": "a", "operator": "Bogus"}]}, labels)


CLUSTER_ROLE = "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole"


def _cluster_role(rules: list[dict[str, Any]], name: str = "gpucluster-virtual-node-gpu-burst") -> dict[str, Any]:
    return {"metadata": {"name": name}, "rules": rules}


def test_the_virtual_nodes_cluster_role_is_least_privilege() -> None:
    assert (
        check_resource(
            virtual_node_least_privilege, CLUSTER_ROLE, _cluster_role(virtual_node_cluster_rules("gpu-burst"))
        )
        == []
    )
    other = _cluster_role([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}], name="cluster-admin")
    assert check_resource(virtual_node_least_privilege, CLUSTER_ROLE, other) == NA


@pytest.mark.parametrize(
    ("rule", "fragment"),
    [
        ({"apiGroups": [""], "resources": ["pods"], "verbs": ["*"]}, "every verb"),
        ({"apiGroups": [""], "resources": ["*"], "verbs": ["get"]}, "every resource"),
        ({"apiGroups": ["*"], "resources": ["pods"], "verbs": ["get"]}, "every API group"),
        ({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}, "Secrets cluster-wide"),
        ({"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["bind"]}, "['bind']"),
        ({"apiGroups": [""], "resources": ["users"], "verbs": ["impersonate"]}, "['impersonate']"),
        ({"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"], "verbs": ["escalate"]}, "['escalate']"),
    ],
)
def test_over_privileged_burst_cluster_roles_fail(rule: dict[str, Any], fragment: str) -> None:
    for name in ("gpucluster-virtual-node-gpu-burst", "gpucluster-taint-controller-gpu-burst"):
        (violation,) = check_resource(virtual_node_least_privilege, CLUSTER_ROLE, _cluster_role([rule], name))
        assert f"ClusterRole {name} rules[0]" in violation
        assert fragment in violation


def test_aggregated_burst_cluster_role_fails() -> None:
    props = {**_cluster_role([]), "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"x": "y"}}]}}
    (violation,) = check_resource(virtual_node_least_privilege, CLUSTER_ROLE, props)
    assert "aggregates other roles" in violation


def _burst_settings() -> dict[str, Any]:
    return {
        "virtualNode": {
            "nodeImage": "ghcr.io/example/gpucluster-virtual-node:0.1.0",
            "providerImage": "ghcr.io/example/gpucluster-daemons:0.1.0",
        },
        "providers": [
            {
                "name": "runpod",
                "kind": "runpod",
                "maxGpus": 8,
                "gpuTypes": {"H100": {"pricePerGpuHour": 2.99}},
                "runpod": {"apiKeySecret": "runpodApiKey"},
            }
        ],
    }


def _settings_cm(document: Any, name: str = "gpucluster-virtual-node-settings") -> dict[str, Any]:
    text = document if isinstance(document, str) else json.dumps(document)
    return {"metadata": {"name": name, "namespace": "gpucluster-burst"}, "data": {"settings.json": text}}


def test_burst_settings_naming_secrets_pass() -> None:
    rendered = settings_json(BurstSettings.model_validate(_burst_settings()))
    assert check_resource(provider_secrets_not_in_config, CM, _settings_cm(rendered)) == []
    assert check_resource(provider_secrets_not_in_config, CM, _settings_cm({"x": "y"}, name="other")) == NA
    labelled = {
        **_settings_cm({"apiKey": "abc"}, name="renamed"),
        "metadata": {"name": "renamed", "labels": {"gpucluster.io/settings": "burst-provider"}},
    }
    assert len(check_resource(provider_secrets_not_in_config, CM, labelled)) == 1


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        (
            lambda d: d["providers"][0]["runpod"].update(apiKey="rpa_live_9f8e7d6c5b4a3928"),
            "providers[0].runpod.apiKey holds a credential",
        ),
        (lambda d: d["providers"][0]["runpod"].update(apiKeySecret="rpa_9F8E7D6C5B4A39281706ABCD"), "must be the NAME"),
        (
            lambda d: d["providers"][0]["runpod"].update(url="https://user:hunter2@rest.runpod.io/v1"),
            "credential material",
        ),
        (
            lambda d: d["providers"][0].update(kubeconfig="apiVersion: v1\nusers:\n- user:\n    token: abc"),
            "holds a credential",
        ),
        (lambda d: d["providers"][0].update(notes="-----BEGIN RSA PRIVATE KEY-----\nMII..."), "credential material"),
    ],
    ids=["api-key-field", "token-as-name", "password-in-url", "kubeconfig-field", "private-key-text"],
)
def test_burst_settings_with_a_credential_fail(mutate: Callable[[dict[str, Any]], None], fragment: str) -> None:
    document = _burst_settings()
    mutate(document)
    (violation,) = check_resource(provider_secrets_not_in_config, CM, _settings_cm(document))
    assert violation.startswith("ConfigMap gpucluster-burst/gpucluster-virtual-node-settings data.settings.json: ")
    assert fragment in violation


def test_the_local_stack_exercises_every_burst_policy() -> None:
    cfg = load_stack_file(ROOT / "stacks" / "Pulumi.local.yaml")
    resources = _as_policy_resources(deploy(lambda: GpuCluster("local", GpuClusterArgs(config=cfg))))
    assert check_stack(inference_gpu_deployments_have_pdb, resources) == []
    for policy, expected in [
        (inference_gpu_deployments_burstable, 1),  # sd-serve
        (virtual_node_least_privilege, 2),  # the virtual node's and the taint controller's ClusterRoles
        (provider_secrets_not_in_config, 1),  # the provider settings
    ]:
        applied = [r for r in resources if check_resource(policy, r.resource_type, r.props) == []]  # passed, not NA
        assert len(applied) == expected, (policy.name, [r.name for r in applied])
