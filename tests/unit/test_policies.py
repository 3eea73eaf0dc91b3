"""Every policy of the pack, each with input that passes and input that violates it — plus the real program's
local and prod stacks, which must pass the whole pack."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
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
from policies import ALL_POLICIES
from policies.descheduler import descheduler_bounded
from policies.images import image_problem, images_pinned
from policies.priorities import training_above_inference, workload_priorities_ordered
from policies.quota import quota_within_capacity
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
