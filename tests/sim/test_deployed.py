"""sim/deployed.py: a variant is the stack's Deployment copied with its settings overridden and nothing else changed; it
replaces the stack's pods and gives them back, never leaves the controller at zero, and restore clears what is left."""

from __future__ import annotations

import copy
import json
import subprocess
import time
from typing import Any

import pytest

from contract.constants import SETTINGS_DIGEST_ANNOTATION, settings_digest
from sim import deployed
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


class FakeCluster:
    """What ``sim/deployed.py`` asks kubectl for, answered from Deployments and ConfigMaps held here. Each Deployment
    has as many Ready pods as its replicas, at once (``start_fails`` makes a variant's never Ready)."""

    def __init__(self) -> None:
        d = live()
        d["spec"]["replicas"] = 2
        self.objects: dict[tuple[str, str], dict[str, Any]] = {
            ("deployment", APP): d,
            ("configmap", f"{APP}-settings"): {**settings(), "kind": "ConfigMap"},
        }
        self.variant_pods_ready = True
        self.calls: list[tuple[str, ...]] = []

    @staticmethod
    def _matches(labels: dict[str, str], selector: str) -> bool:
        for term in selector.split(","):
            if term.startswith("!"):
                if term[1:] in labels:
                    return False
            elif "=" in term:
                key, value = term.split("=", 1)
                if labels.get(key) != value:
                    return False
            elif term not in labels:
                return False
        return True

    def pods(self) -> list[dict[str, Any]]:
        out = []
        for (kind, name), obj in self.objects.items():
            if kind != "deployment":
                continue
            template = obj["spec"]["template"]["metadata"]
            ready = self.variant_pods_ready or VARIANT_LABEL not in template["labels"]
            for i in range(obj["spec"]["replicas"]):
                out.append(
                    {
                        "metadata": {"name": f"{name}-{i}", "labels": template["labels"]},
                        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
                    }
                )
        return out

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        self.calls.append(args)
        verb, rest = args[0], list(args[1:])
        selector = rest[rest.index("-l") + 1] if "-l" in rest else None
        if verb == "get" and rest[0] == "pods":
            assert selector is not None
            return json.dumps({"items": [p for p in self.pods() if self._matches(p["metadata"]["labels"], selector)]})
        if verb == "get" and selector is not None:  # deployment,configmap -l ... -o name
            kinds = rest[0].split(",")
            found = [
                f"{kind}/{name}"
                for (kind, name), obj in self.objects.items()
                if kind in kinds and self._matches(obj["metadata"].get("labels") or {}, selector)
            ]
            return "\n".join(found)
        if verb == "get":
            obj = self.objects.get((rest[0], rest[3]))
            if obj is None:
                if check:
                    raise DaemonError(f"{rest[0]} {rest[3]} not found")
                return ""
            return json.dumps(obj)
        if verb == "apply":
            assert input is not None
            for item in json.loads(input)["items"]:
                self.objects[(item["kind"].lower(), item["metadata"]["name"])] = copy.deepcopy(item)
            return ""
        if verb == "delete":
            assert selector is not None
            kinds = rest[0].split(",")
            for key in [
                k
                for k, obj in self.objects.items()
                if k[0] in kinds and self._matches(obj["metadata"].get("labels") or {}, selector)
            ]:
                del self.objects[key]
            return ""
        if verb == "scale":
            self.objects[("deployment", rest[3])]["spec"]["replicas"] = int(rest[4].removeprefix("--replicas="))
            return ""
        raise AssertionError(f"unexpected kubectl {args}")


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> FakeCluster:
    fake = FakeCluster()
    monkeypatch.setattr(deployed, "kubectl", fake.kubectl)
    monkeypatch.setattr(time, "sleep", lambda _: None)  # the fake is Ready at once: no polling to wait out
    return fake


def stack_controller() -> deployed.Deployed:
    return deployed.Deployed("gpucluster-burst", APP, 2)


def test_a_variant_replaces_the_stacks_pods_and_stopping_it_puts_them_back(cluster: FakeCluster) -> None:
    own = stack_controller()
    variant = deployed.Variant(own, "answer-at-once", {"maxHold": "1ms"})
    variant.start(timeout=1)
    assert cluster.objects[("deployment", APP)]["spec"]["replicas"] == 0
    assert ("deployment", f"{APP}-answer-at-once") in cluster.objects
    # The stack's own pods are not the variant's: none are left, though two pods carry the app label.
    assert own.pods() == []
    assert not own.running()
    variant.stop(timeout=1)
    assert cluster.objects[("deployment", APP)]["spec"]["replicas"] == 2
    assert sorted(k for k in cluster.objects) == [("configmap", f"{APP}-settings"), ("deployment", APP)]
    assert len(own.pods()) == 2


def test_a_variant_that_never_becomes_ready_leaves_the_stacks_controller_running(cluster: FakeCluster) -> None:
    cluster.variant_pods_ready = False
    variant = deployed.Variant(stack_controller(), "answer-at-once", {"maxHold": "1ms"})
    with pytest.raises(DaemonError, match="Ready pod\\(s\\) of variant answer-at-once"):
        variant.start(timeout=0)
    assert cluster.objects[("deployment", APP)]["spec"]["replicas"] == 2
    assert not [k for k in cluster.objects if k[1].endswith("answer-at-once")]


def test_restore_removes_what_a_cut_short_scenario_left_and_scales_the_controller_back(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    deployed.Variant(stack_controller(), "answer-at-once", {"maxHold": "1ms"}).start(timeout=1)
    del cluster.objects[("deployment", f"{APP}-answer-at-once")]  # its ConfigMap alone is left, with no pod
    monkeypatch.setattr(deployed, "placed_controllers", lambda config: [stack_controller()])
    done = deployed.restore(config=None)
    assert done == [
        f"deployment gpucluster-burst/{APP}: variant removed (configmap/{APP}-answer-at-once)",
        f"deployment gpucluster-burst/{APP}: scaled back to 2",
    ]
    assert sorted(cluster.objects) == [("configmap", f"{APP}-settings"), ("deployment", APP)]
    assert cluster.objects[("deployment", APP)]["spec"]["replicas"] == 2
    assert deployed.restore(config=None) == []


def _with_provider_secret(d: dict[str, Any]) -> dict[str, Any]:
    """The virtual node's shape: a provider Secret mounted beside the settings."""
    d["spec"]["template"]["spec"]["volumes"].append(
        {"name": "provider-secrets", "secret": {"secretName": "stack-secrets", "defaultMode": 0o440}}
    )
    return d


def test_a_variant_with_secrets_mounts_a_secret_of_its_own_and_leaves_the_stacks_alone() -> None:
    original = _with_provider_secret(live())
    secret, config_map, deployment = variant_objects(
        original, settings(), "remote", {"providers": []}, 1, secrets={"remoteKubeconfig": "apiVersion: v1"}
    )
    name = f"{APP}-remote"
    assert secret["kind"] == "Secret"
    assert (secret["metadata"]["name"], secret["stringData"]) == (name, {"remoteKubeconfig": "apiVersion: v1"})
    assert secret["metadata"]["labels"][VARIANT_LABEL] == "remote"
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["provider-secrets"]["secret"] == {"secretName": name, "defaultMode": 0o440}
    assert volumes["settings"]["configMap"]["name"] == config_map["metadata"]["name"] == name
    assert original == _with_provider_secret(live()), "the live object is not changed"


def test_a_variant_with_secrets_of_a_deployment_that_mounts_none_is_refused() -> None:
    with pytest.raises(DaemonError, match=f"deployment gpucluster-burst/{APP}: its pods mount no Secret volume"):
        variant_objects(live(), settings(), "remote", {}, 1, secrets={"k": "v"})


def test_restore_removes_a_variants_secret_too(cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    d = cluster.objects[("deployment", APP)]
    _with_provider_secret(d)
    deployed.Variant(stack_controller(), "remote", {}, secrets={"k": "v"}).start(timeout=1)
    assert ("secret", f"{APP}-remote") in cluster.objects
    del cluster.objects[("deployment", f"{APP}-remote")]
    del cluster.objects[("configmap", f"{APP}-remote")]  # its Secret alone is left
    monkeypatch.setattr(deployed, "placed_controllers", lambda config: [stack_controller()])
    assert deployed.restore(config=None)[0] == (
        f"deployment gpucluster-burst/{APP}: variant removed (secret/{APP}-remote)"
    )
    assert ("secret", f"{APP}-remote") not in cluster.objects


def test_a_kill_of_one_container_sends_sigkill_to_that_container_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    pod = {
        "metadata": {"name": "gpucluster-virtual-node-0", "creationTimestamp": "2026-12-06T00:00:00Z"},
        "status": {
            "containerStatuses": [
                {"name": "node", "containerID": "containerd://aaa"},
                {"name": "provider", "containerID": "containerd://bbb"},
            ]
        },
    }
    monkeypatch.setattr(deployed, "kubectl", lambda *a, **k: json.dumps({"items": [pod]}))
    sent: list[list[str]] = []

    def run(argv: list[str], **_: Any) -> Any:
        sent.append(argv)
        return type("Done", (), {"returncode": 0, "stderr": ""})()

    monkeypatch.setattr(subprocess, "run", run)
    d = deployed.Deployed("gpucluster-burst", "gpucluster-virtual-node", 1)
    assert d.kill(container="provider") == ["gpucluster-virtual-node-0/provider"]
    assert [argv[-1] for argv in sent] == ["bbb"]
    assert sent[0][-3:-1] == ["-s", "SIGKILL"]
    with pytest.raises(DaemonError, match="has no running container sidecar"):
        d.kill(container="sidecar")


def test_a_variant_whose_copy_cannot_be_deleted_still_gives_the_stacks_pods_back(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    variant = deployed.Variant(stack_controller(), "answer-at-once", {"maxHold": "1ms"})
    variant.start(timeout=1)
    assert cluster.objects[("deployment", APP)]["spec"]["replicas"] == 0

    def refuse(*_: Any, **__: Any) -> None:
        raise DaemonError("the API server refused the delete")

    monkeypatch.setattr(deployed, "remove_variants", refuse)
    with pytest.raises(DaemonError, match="refused the delete"):
        variant.stop(timeout=1)
    assert cluster.objects[("deployment", APP)]["spec"]["replicas"] == 2
