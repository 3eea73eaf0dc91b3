"""The inference Deployment contract: burstable (virtual-node toleration, never the burst taint) and a PDB."""

from __future__ import annotations

from typing import Any

import pytest
from pulumi_policy import (
    PolicyResource,
)

from policies.inference import (
    inference_gpu_deployments_burstable,
    inference_gpu_deployments_have_pdb,
    selector_matches,
)
from tests.policies.support import (
    CM,
    DEPLOY,
    KEY,
    NA,
    check_resource,
    check_stack,
    resource,
)

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
