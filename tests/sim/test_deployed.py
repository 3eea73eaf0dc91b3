"""sim/deployed.py's variants: a copy of the stack's Deployment, its settings overridden, nothing else changed."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from components.constants import SETTINGS_DIGEST_ANNOTATION, settings_digest
from sim.daemon_runtime import DaemonError
from sim.deployed import VARIANT_LABEL, variant_objects

APP = "gpucluster-make-before-break"
DEPLOYED = '{"interval": "2s", "maxHold": "60s", "nodeGrace": "20s"}'


def live() -> dict[str, Any]:
    """The stack's Deployment as the API server returns it (the fields a variant reads, and some it must keep)."""
    labels = {"app.kubernetes.io/name": APP, "gpucluster.io/environment": "local"}
    return {
        "metadata": {"name": APP, "namespace": "gpucluster-burst", "labels": labels, "resourceVersion": "41"},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app.kubernetes.io/name": APP}},
            "template": {
                "metadata": {
                    "labels": labels,
                    "annotations": {"prometheus.io/port": "9104", **settings_digest(DEPLOYED)},
                },
                "spec": {
                    "serviceAccountName": APP,
                    "nodeSelector": {"sim.gpucluster.io/real-node": "true"},
                    "containers": [{"name": "controller", "image": "ghcr.io/example/gpucluster-daemons@sha256:ab"}],
                    "volumes": [{"name": "settings", "configMap": {"name": f"{APP}-settings"}}],
                },
            },
        },
        "status": {"readyReplicas": 0},
    }


def settings(text: str = DEPLOYED) -> dict[str, Any]:
    return {"metadata": {"name": f"{APP}-settings"}, "data": {"settings.json": text}}


def test_a_variant_is_the_live_pod_template_with_its_own_settings_laid_over_the_stacks() -> None:
    original = live()
    config_map, deployment = variant_objects(original, settings(), "answer-at-once", {"maxHold": "1ms"}, 2)
    assert original == live(), "the live object is not changed"
    name = f"{APP}-answer-at-once"
    document = json.loads(config_map["data"]["settings.json"])
    assert document == {"interval": "2s", "maxHold": "1ms", "nodeGrace": "20s"}
    assert (config_map["metadata"]["name"], deployment["metadata"]["name"]) == (name, name)
    assert config_map["metadata"]["labels"][VARIANT_LABEL] == "answer-at-once"
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    assert spec["selector"]["matchLabels"] == {"app.kubernetes.io/name": APP, VARIANT_LABEL: "answer-at-once"}
    template = spec["template"]
    # Only the settings differ: the same image, ServiceAccount, placement and scrape annotations.
    expected = copy.deepcopy(live()["spec"]["template"])
    expected["metadata"]["labels"][VARIANT_LABEL] = "answer-at-once"
    expected["metadata"]["annotations"][SETTINGS_DIGEST_ANNOTATION] = settings_digest(
        config_map["data"]["settings.json"]
    )[SETTINGS_DIGEST_ANNOTATION]
    expected["spec"]["volumes"] = [{"name": "settings", "configMap": {"name": name}}]
    assert template == expected
    assert "resourceVersion" not in deployment["metadata"]


@pytest.mark.parametrize(
    ("cm", "fragment"),
    [
        ({"metadata": {}}, "holds no JSON settings.json"),
        (settings("not json"), "holds no JSON settings.json"),
        (settings('["maxHold"]'), "settings.json is not a JSON object"),
    ],
)
def test_settings_a_variant_cannot_read_are_refused_naming_the_deployment(cm: dict[str, Any], fragment: str) -> None:
    with pytest.raises(DaemonError, match=fragment) as e:
        variant_objects(live(), cm, "answer-at-once", {}, 2)
    assert f"deployment gpucluster-burst/{APP}" in str(e.value)


def test_a_deployment_without_a_settings_volume_is_refused() -> None:
    bare = live()
    bare["spec"]["template"]["spec"]["volumes"] = []
    with pytest.raises(DaemonError, match="mount no ConfigMap volume 'settings'"):
        variant_objects(bare, settings(), "answer-at-once", {}, 2)
