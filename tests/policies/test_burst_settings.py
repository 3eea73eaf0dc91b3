"""provider-secrets-not-in-config, and the local stack exercising every burst policy."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from components.cluster import GpuCluster, GpuClusterArgs
from components.config import load_stack_file
from contract.burst_settings import BurstSettings, settings_json
from contract.images_settings import DEFAULT_DAEMONS_IMAGE, DEFAULT_VIRTUAL_NODE_IMAGE
from policies.burst_settings import provider_secrets_not_in_config
from policies.inference import (
    inference_gpu_deployments_burstable,
    inference_gpu_deployments_have_pdb,
)
from policies.rbac import virtual_node_least_privilege
from tests.policies.support import (
    CM,
    NA,
    ROOT,
    as_policy_resources,
    check_resource,
    check_stack,
)
from tests.support.pulumi_harness import deploy, secrets_of


def _burst_settings() -> dict[str, Any]:
    return {
        "virtualNode": {
            "nodeImage": DEFAULT_VIRTUAL_NODE_IMAGE,
            "providerImage": DEFAULT_DAEMONS_IMAGE,
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
    resources = as_policy_resources(
        deploy(lambda: GpuCluster("local", GpuClusterArgs(config=cfg, secrets=secrets_of(cfg))))
    )
    assert check_stack(inference_gpu_deployments_have_pdb, resources) == []
    for policy, expected in [
        (inference_gpu_deployments_burstable, 1),  # sd-serve
        (virtual_node_least_privilege, 3),  # the virtual node's, its provider's and the taint controller's ClusterRoles
        (provider_secrets_not_in_config, 1),  # the provider settings
    ]:
        applied = [r for r in resources if check_resource(policy, r.resource_type, r.props) == []]  # passed, not NA
        assert len(applied) == expected, (policy.name, [r.name for r in applied])
