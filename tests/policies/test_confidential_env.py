"""confidential-env-stays-in-our-clusters: with `refuse`, no bursting workload reads a Secret while a rented
provider is configured."""

from __future__ import annotations

import json
from typing import Any

from policies.confidential_env import confidential_env_stays_in_our_clusters as policy
from tests.policies.support import CM, DEPLOY, NA, app_deployment, check_stack, resource

TOLERATES_VIRTUAL_NODE = [{"key": "virtual-kubelet.io/provider", "operator": "Equal", "value": "gpucluster"}]
READS_SECRET = [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}]


def settings(choice: str | None, *kinds: str) -> Any:
    vn: dict[str, Any] = {"nodeName": "gpu-burst"}
    if choice is not None:
        vn["confidentialEnvToRentedProviders"] = choice
    document = {"virtualNode": vn, "providers": [{"name": f"p-{k}", "kind": k} for k in kinds]}
    props = {"metadata": {"name": "gpucluster-virtual-node-settings"}, "data": {"settings.json": json.dumps(document)}}
    return resource(CM, props, "settings")


def workload(tolerations: list[dict[str, Any]], **container: Any) -> Any:
    props = app_deployment(**container)
    props["spec"]["template"]["spec"]["tolerations"] = tolerations
    return resource(DEPLOY, props, "app")


def test_a_bursting_workload_reading_a_secret_is_refused_with_a_rented_provider() -> None:
    found = check_stack(
        policy, [settings("refuse", "runpod", "kubernetes"), workload(TOLERATES_VIRTUAL_NODE, env=READS_SECRET)]
    )
    assert isinstance(found, list)
    (violation,) = found
    assert "inference/app app: env HF_TOKEN from Secret hf key token" in violation
    assert "p-runpod (runpod) would receive the value in plain text" in violation
    env_from = workload(TOLERATES_VIRTUAL_NODE, envFrom=[{"secretRef": {"name": "hf"}}])
    (violation,) = check_stack(policy, [settings("refuse", "fake"), env_from])
    assert "envFrom Secret hf" in violation


def test_what_stays_in_our_clusters_passes() -> None:
    # Only Kubernetes clusters of ours: the Secret is copied there as a Secret.
    assert (
        check_stack(policy, [settings("refuse", "kubernetes"), workload(TOLERATES_VIRTUAL_NODE, env=READS_SECRET)])
        == []
    )
    # A workload that cannot burst, or one that reads only literal values and ConfigMaps.
    assert check_stack(policy, [settings("refuse", "runpod"), workload([], env=READS_SECRET)]) == []
    config = [{"name": "MODEL", "valueFrom": {"configMapKeyRef": {"name": "m", "key": "model"}}}]
    assert check_stack(policy, [settings("refuse", "runpod"), workload(TOLERATES_VIRTUAL_NODE, env=config)]) == []


def test_not_applicable_unless_the_stack_refuses() -> None:
    bursting = workload(TOLERATES_VIRTUAL_NODE, env=READS_SECRET)
    assert check_stack(policy, [settings(None, "runpod"), bursting]) == NA
    assert check_stack(policy, [settings("send", "runpod"), bursting]) == NA
    assert check_stack(policy, [bursting]) == NA
