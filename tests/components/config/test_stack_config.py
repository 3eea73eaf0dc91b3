"""The stack config model: the four stacks pass; each broken config is refused with its key path named."""

from __future__ import annotations

import copy
import math
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.config import StackConfig, StackConfigError, load_stack_file, parse_stack_config, read_stack_file
from contract.images_settings import DEFAULT_DAEMONS_IMAGE, DEFAULT_VIRTUAL_NODE_IMAGE, project_version
from contract.registry import INTERRUPTIONS, MAKE_BEFORE_BREAK, QUARANTINE, QUOTA_CONTROLLER
from contract.storage_settings import checkpoint_interval_seconds

ROOT = Path(__file__).resolve().parents[3]
STACKS = sorted((ROOT / "stacks").glob("Pulumi.*.yaml"))


def base() -> dict[str, Any]:
    return read_stack_file(ROOT / "stacks" / "Pulumi.prod.yaml")


def test_all_four_stacks_are_valid() -> None:
    names = {p.name for p in STACKS}
    assert names == {"Pulumi.local.yaml", "Pulumi.dev.yaml", "Pulumi.staging.yaml", "Pulumi.prod.yaml"}
    for path in STACKS:
        cfg = load_stack_file(path)
        assert cfg.environment == path.name.split(".")[1]


def test_local_stack_is_four_nodes_of_eight_gpus() -> None:
    cfg = load_stack_file(ROOT / "stacks" / "Pulumi.local.yaml")
    assert [(f.name, f.node_count, f.gpus_per_node) for f in cfg.flavors] == [("h100", 4, 8)]
    assert cfg.storage.driver == "nfs"
    assert cfg.burst_taint_key == "gpucluster.io/in-cluster-capacity"  # Pulumi.yaml's default applies


def test_prod_stack_has_several_flavors_and_teams() -> None:
    cfg = load_stack_file(ROOT / "stacks" / "Pulumi.prod.yaml")
    assert len(cfg.flavors) >= 2
    assert cfg.total_gpus >= 200
    assert len(cfg.teams) >= 3
    assert cfg.storage.driver != "nfs"


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(raw: dict[str, Any]) -> None:
        node: Any = raw
        parts = path.split(".")
        for part in parts[:-1]:
            node = node[int(part)] if isinstance(node, list) else node[part]
        last = parts[-1]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return mutate


def _delete(path: str) -> Callable[[dict[str, Any]], None]:
    def mutate(raw: dict[str, Any]) -> None:
        node: Any = raw
        parts = path.split(".")
        for part in parts[:-1]:
            node = node[int(part)] if isinstance(node, list) else node[part]
        del node[parts[-1]]

    return mutate


# (id, mutation, the key path the message must name, a fragment of the reason)
INVALID: list[tuple[str, Callable[[dict[str, Any]], None], str, str]] = [
    (
        "telemetry-temperature-above-ceiling",
        lambda r: r["telemetry"]["alerts"].update(gpuTempLimitC=79),
        "telemetry.alerts.gpuTempLimitC",
        "ceiling",
    ),
    (
        "telemetry-floating-image",
        lambda r: r["telemetry"]["fabricExporter"].update(image="registry.example/daemons:latest"),
        "telemetry.fabricExporter.image",
        "latest",
    ),
    ("quota-over-capacity", _set("queues.pretraining.quota.h100", 640), "queues.pretraining.quota.h100", "exceeds"),
    (
        "quota-unknown-flavor",
        _set("queues.pretraining.quota.a100", 8),
        "queues.pretraining.quota.a100",
        "unknown flavor",
    ),
    ("quota-negative", _set("queues.evaluation.quota.l40s", -1), "queues.evaluation.quota.l40s", "greater than"),
    ("quotas-sum-over-capacity", _set("queues.evaluation.quota.h100", 128), "queues.*.quota.h100", "add up to"),
    (
        "borrowing-without-quota",
        _set("queues.evaluation.borrowingLimit", {"a100": 4}),
        "queues.evaluation.borrowingLimit.a100",
        "no quota",
    ),
    ("missing-flavors", _delete("flavors"), "flavors", "missing"),
    ("empty-flavors", _set("flavors", []), "flavors", "at least 1"),
    ("flavor-bad-name", _set("flavors.0.name", "H100_SXM"), "flavors[0].name", "DNS label"),
    ("flavor-zero-gpus", _set("flavors.0.gpusPerNode", 0), "flavors[0].gpusPerNode", "greater than or equal to 1"),
    ("flavor-too-many-gpus", _set("flavors.1.gpusPerNode", 64), "flavors[1].gpusPerNode", "less than or equal"),
    ("flavor-no-labels", _set("flavors.0.nodeLabels", {}), "flavors[0].nodeLabels", "at least 1"),
    ("flavor-bad-label-key", _set("flavors.0.nodeLabels", {"bad key!": "x"}), "flavors[0].nodeLabels", "label key"),
    (
        "flavor-duplicate",
        lambda r: r["flavors"].append(copy.deepcopy(r["flavors"][0])),
        "flavors[2].name",
        "declared twice",
    ),
    (
        "flavor-same-labels",
        _set(
            "flavors.1.nodeLabels",
            {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "gpucluster.io/fabric": "ib-ndr"},
        ),
        "flavors[1].nodeLabels",
        "same node labels",
    ),
    (
        "toleration-bad-effect",
        _set("flavors.0.tolerations.0.effect", "Evict"),
        "flavors[0].tolerations[0].effect",
        "NoSchedule",
    ),
    (
        "toleration-exists-with-value",
        _set("flavors.0.tolerations.0.value", "x"),
        "flavors[0].tolerations[0]",
        "Exists takes no value",
    ),
    ("flavor-typo-key", _set("flavors.0.gpuPerNode", 8), "flavors[0].gpuPerNode", "unknown key"),
    (
        "team-unknown-queue",
        _set("teams.0.clusterQueue", "nope"),
        "teams[0].clusterQueue",
        "no ClusterQueue named 'nope'",
    ),
    ("team-duplicate", lambda r: r["teams"].append(copy.deepcopy(r["teams"][0])), "teams[4].name", "declared twice"),
    (
        "team-in-inference-namespace",
        _set("teams.1.namespace", "inference"),
        "teams[1].namespace",
        "inference namespace",
    ),
    ("teams-empty", _set("teams", []), "teams", "at least 1"),
    ("inference-ns-duplicate", _set("inferenceNamespaces", ["inference", "inference"]), "inferenceNamespaces", "twice"),
    (
        "training-not-above-inference",
        _set("priorities.pod.training.value", 10000),
        "priorities.pod.training.value",
        "must be above",
    ),
    (
        "workload-priorities-unordered",
        _set("priorities.workload.2.value", 5000),
        "priorities.workload[2].value",
        "highest first",
    ),
    (
        "workload-priority-too-big",
        _set("priorities.workload.0.value", 2_000_000_000),
        "priorities.workload[0].value",
        "less than or equal",
    ),
    (
        "pod-priority-bad-policy",
        _set("priorities.pod.inference.preemptionPolicy", "Sometimes"),
        "priorities.pod.inference.preemptionPolicy",
        "PreemptLowerPriority",
    ),
    (
        "priority-class-same-name",
        _set("priorities.pod.inference.name", "gpucluster-training"),
        "priorities.pod.inference.name",
        "same name",
    ),
    ("kueue-version-range", _set("kueue.chartVersion", "^0.17"), "kueue.chartVersion", "exact version"),
    (
        "kueue-two-sources",
        _set("kueue.chart", {"oci": "oci://x/kueue", "path": "/tmp/kueue"}),
        "kueue.chart",
        "exactly one",
    ),
    ("kueue-bad-oci", _set("kueue.chart", {"oci": "https://not-oci"}), "kueue.chart.oci", "pattern"),
    (
        "kueue-bad-timeout",
        _set("kueue.waitForPodsReady.timeout", "ten minutes"),
        "kueue.waitForPodsReady.timeout",
        "duration",
    ),
    (
        "descheduler-per-node-over-total",
        _set("descheduler.maxPodsToEvictPerNode", 10),
        "descheduler.maxPodsToEvictPerNode",
        "exceeds maxPodsToEvictTotal",
    ),
    (
        "descheduler-zero-evictions",
        _set("descheduler.maxPodsToEvictTotal", 0),
        "descheduler.maxPodsToEvictTotal",
        "greater than or equal to 1",
    ),
    (
        "descheduler-repo-without-name",
        _set("descheduler.chart", {"repo": "https://kubernetes-sigs.github.io/descheduler/"}),
        "descheduler.chart",
        "chart name",
    ),
    ("storage-unknown-driver", _set("storage.driver", "ceph"), "storage.driver", "lustre"),
    (
        "storage-static-without-handle",
        _delete("storage.volumeHandlePrefix"),
        "storage.volumeHandlePrefix",
        "static mode needs",
    ),
    ("storage-bad-size", _set("storage.checkpoints.size", "lots"), "storage.checkpoints.size", "quantity"),
    (
        "storage-negative-mtbf",
        _set("storage.checkpointing.mtbfHours", -8),
        "storage.checkpointing.mtbfHours",
        "greater than 0",
    ),
    (
        "nfs-without-server",
        lambda r: r.update(storage={"driver": "nfs", "provisioner": "nfs.csi.k8s.io", "parameters": {"share": "/x"}}),
        "storage.parameters.server",
        "needs it",
    ),
    ("bad-burst-taint-key", _set("burstTaintKey", "not a key!"), "burstTaintKey", "qualified name"),
    ("unknown-top-level-key", _set("flavour", []), "flavour", "unknown key gpucluster:flavour"),
    ("environment-not-dns", _set("environment", "Prod_1"), "environment", "DNS label"),
    ("images-registry-with-scheme", _set("images.registry", "https://registry.example/x"), "images.registry", "scheme"),
    ("images-version-latest", _set("images.version", "latest"), "images.version", "'latest' is refused"),
    (
        "images-digest-of-an-unknown-image",
        _set("images.digests.gpucluster-fabric-exporter", "sha256:" + "3" * 64),
        "images.digests.gpucluster-fabric-exporter",
        "known: gpucluster-daemons, gpucluster-virtual-node",
    ),
    (
        "images-digest-not-sha256",
        _set("images.digests.gpucluster-daemons", "sha256:abc"),
        "images.digests.gpucluster-daemons",
        "is not a digest",
    ),
]


@pytest.mark.parametrize(("mutate", "path", "reason"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid_config_names_the_key(mutate: Callable[[dict[str, Any]], None], path: str, reason: str) -> None:
    raw = base()
    mutate(raw)
    with pytest.raises(StackConfigError) as caught:
        parse_stack_config(raw, "test")
    messages = [str(issue) for issue in caught.value.issues]
    matching = [m for m in messages if m.startswith(f"{path}:")]
    assert matching, f"no message for {path} in {messages}"
    assert any(reason in m for m in matching), f"{reason!r} not in {matching}"


def test_at_least_25_distinct_invalid_configs() -> None:
    assert len({c[0] for c in INVALID}) >= 25
    assert len({c[2] for c in INVALID}) >= 25


def test_every_problem_is_reported_at_once() -> None:
    raw = base()
    raw["queues"]["pretraining"]["quota"]["h100"] = 640
    raw["priorities"]["pod"]["training"]["value"] = 1
    raw["storage"]["checkpoints"]["size"] = "lots"
    raw["flavors"][1]["gpusPerNode"] = 0
    with pytest.raises(StackConfigError) as caught:
        parse_stack_config(raw, "test")
    paths = {i.path for i in caught.value.issues}
    assert {
        "priorities.pod.training.value",
        "storage.checkpoints.size",
        "flavors[1].gpusPerNode",
    } <= paths
    # the quota rule needs valid flavors to compare against, so it waits for the flavor fix
    text = str(caught.value)
    assert text.startswith("test: ")
    assert "problem(s)" in text


def test_issue_message_carries_value_and_reason() -> None:
    raw = base()
    raw["queues"]["pretraining"]["quota"]["h100"] = 640
    with pytest.raises(StackConfigError) as caught:
        parse_stack_config(raw, "test")
    issue = next(i for i in caught.value.issues if i.path == "queues.pretraining.quota.h100")
    assert str(issue) == "queues.pretraining.quota.h100: 640 exceeds the 512 GPUs the h100 flavor declares"
    assert issue.value == 640


def test_unreadable_and_malformed_stack_files(tmp_path: Path) -> None:
    with pytest.raises(StackConfigError, match="cannot read"):
        load_stack_file(tmp_path / "missing.yaml")
    bad = tmp_path / "Pulumi.bad.yaml"
    bad.write_text("config:\n  gpucluster:flavors: [\n")
    with pytest.raises(StackConfigError, match=r"line \d+, column \d+: invalid YAML"):
        load_stack_file(bad)
    bad.write_text("encryptionsalt: x\n")
    with pytest.raises(StackConfigError, match="no `config:` map"):
        load_stack_file(bad)
    bad.write_text("config:\n  flavors: []\n")
    with pytest.raises(StackConfigError, match="write gpucluster:flavors"):
        load_stack_file(bad)


def test_checkpoint_cadence_with_seed_figures_is_20_to_30_minutes() -> None:
    minutes = checkpoint_interval_seconds(30.0, 8 * 3600.0) / 60
    assert 20 <= minutes <= 30
    assert math.isclose(minutes, math.sqrt(2 * 30 * 8 * 3600) / 60)
    with pytest.raises(ValueError, match="positive"):
        checkpoint_interval_seconds(0, 3600)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "components.config", *args], cwd=ROOT, capture_output=True, text=True, check=False
    )


def test_cli_accepts_the_four_stacks() -> None:
    proc = _cli("check", *map(str, STACKS))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count(": ok (") == 4


def test_cli_rejects_a_broken_stack_with_key_paths(tmp_path: Path) -> None:
    raw = yaml.safe_load((ROOT / "stacks" / "Pulumi.prod.yaml").read_text())
    raw["config"]["gpucluster:queues"]["pretraining"]["quota"]["h100"] = 640
    raw["config"]["gpucluster:descheduler"]["maxPodsToEvictTotal"] = 1
    broken = tmp_path / "Pulumi.broken.yaml"
    broken.write_text(yaml.safe_dump(raw))
    proc = _cli("check", str(broken))
    assert proc.returncode == 1
    assert "queues.pretraining.quota.h100: 640 exceeds the 512 GPUs the h100 flavor declares" in proc.stdout
    assert "descheduler.maxPodsToEvictPerNode" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr


# --- gpucluster:burst and gpucluster:inferenceServices ----------------------------------------------------------

SECURE = {"secure": "v1:AAAAAAAAAAAAAAAA:BBBBBBBBBBBBBBBBBBBB"}


def bursting(raw: dict[str, Any]) -> None:
    """prod with its burst section switched on and both provider secrets set (as `pulumi config set --secret`)."""
    raw["burst"]["enabled"] = True
    raw["runpodApiKey"] = dict(SECURE)
    raw["eastKubeconfig"] = dict(SECURE)


def _burst(mutate: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def both(raw: dict[str, Any]) -> None:
        bursting(raw)
        mutate(raw)

    return both


def test_prod_burst_turns_on_once_its_secrets_are_set() -> None:
    raw = base()
    bursting(raw)
    cfg = parse_stack_config(raw, "test")
    assert cfg.burst is not None
    assert cfg.burst_enabled
    assert cfg.burst.capacity == 64 + 128
    assert cfg.provider_secret_names == ("eastKubeconfig", "runpodApiKey")
    tc = cfg.burst.taint_controller
    assert (tc.node_name, tc.taint_key) == ("gpu-burst", "gpucluster.io/in-cluster-capacity")
    assert tc.inference_namespaces == ["inference", "inference-canary"]  # from the virtual node


def test_engine_secret_keys_count_as_secret() -> None:
    raw = base()
    bursting(raw)
    raw["runpodApiKey"] = "decrypted-by-the-engine"
    raw["eastKubeconfig"] = "apiVersion: v1"
    cfg = parse_stack_config(raw, "test", secret_keys=["gpucluster:runpodApiKey", "gpucluster:eastKubeconfig"])
    assert cfg.provider_secret_names == ("eastKubeconfig", "runpodApiKey")
    with pytest.raises(StackConfigError) as caught:
        parse_stack_config(raw, "test", secret_keys=["gpucluster:eastKubeconfig"])
    (issue,) = caught.value.issues
    assert str(issue) == "runpodApiKey: gpucluster:runpodApiKey is in clear; set it with `pulumi config set --secret`"
    assert issue.value is None  # the credential is never echoed


def test_a_disabled_burst_section_needs_no_secrets_and_deploys_nothing() -> None:
    cfg = parse_stack_config(base(), "test")
    assert cfg.burst is not None
    assert not cfg.burst_enabled
    assert cfg.provider_secret_names == ()


def test_stacks_without_a_burst_section() -> None:
    raw = base()
    del raw["burst"]
    cfg = parse_stack_config(raw, "test")
    assert cfg.burst is None
    assert not cfg.burst_enabled


BURST_INVALID: list[tuple[str, Callable[[dict[str, Any]], None], str, str]] = [
    ("burst-not-a-map", _set("burst", ["x"]), "burst", "expected a map"),
    ("burst-bad-provider-kind", _set("burst.providers.0.kind", "aws"), "burst.providers[0].kind", "'fake'"),
    (
        "burst-provider-kind-without-section",
        _set("burst.providers.0.kind", "fake"),
        "burst.providers[0]",
        "kind fake needs its section",
    ),
    (
        "burst-duplicate-provider",
        lambda r: r["burst"]["providers"].append(copy.deepcopy(r["burst"]["providers"][0])),
        "burst.providers[2].name",
        "already the name of providers[0]",
    ),
    (
        "burst-default-gpu-type-not-offered",
        _set("burst.virtualNode.defaultGpuType", "B200"),
        "burst.virtualNode.defaultGpuType",
        "in no provider's gpuTypes",
    ),
    (
        "burst-missing-secret",
        _burst(_delete("runpodApiKey")),
        "burst.providers[0].runpod.apiKeySecret",
        "names the secret gpucluster:runpodApiKey, which this stack does not set",
    ),
    (
        "burst-missing-kubeconfig",
        _burst(_delete("eastKubeconfig")),
        "burst.providers[1].kubernetes.kubeconfigSecret",
        "does not set",
    ),
    ("burst-secret-in-clear", _burst(_set("runpodApiKey", "rpa_123")), "runpodApiKey", "is in clear"),
    (
        "burst-secret-named-like-a-section",
        _burst(_set("burst.providers.0.runpod.apiKeySecret", "storage")),
        "burst.providers[0].runpod.apiKeySecret",
        "is a config section",
    ),
    (
        "burst-node-in-inference-namespace",
        _set("burst.virtualNode.namespace", "inference"),
        "burst.virtualNode.namespace",
        "namespace of their own",
    ),
    (
        "burst-controller-in-team-namespace",
        _set("burst.taintController.namespace", "team-video"),
        "burst.taintController.namespace",
        "namespace of their own",
    ),
    (
        "burst-unknown-inference-namespace",
        _set("burst.virtualNode.inferenceNamespaces", ["inference", "serving"]),
        "burst.virtualNode.inferenceNamespaces",
        "['serving'] not in gpucluster:inferenceNamespaces",
    ),
    (
        "burst-high-mark-beyond-the-cluster",
        _set("burst.taintController.highMark", 1000),
        "burst.taintController.highMark",
        "the burst taint would never go on",
    ),
    (
        "burst-low-mark-not-below-high",
        _set("burst.taintController.lowMark", 16),
        "burst.taintController.lowMark",
        "must be below highMark",
    ),
    (
        "burst-controller-node-name-is-filled",
        _set("burst.taintController.nodeName", "other"),
        "burst.taintController.nodeName",
        "is filled from burst.virtualNode.nodeName",
    ),
    (
        "telemetry-reservation-taint-is-filled",
        _set("telemetry.reservationTaintKey", "example.com/held"),
        "telemetry.reservationTaintKey",
        "is filled from gpucluster:makeBeforeBreak.reservationKey",
    ),
    (
        "burst-controller-noexecute",
        _set("burst.taintController.taintEffect", "NoExecute"),
        "burst.taintController.taintEffect",
        "always NoSchedule",
    ),
    (
        "burst-controller-typo",
        _set("burst.taintController.highmark", 3),
        "burst.taintController.highmark",
        "unknown key",
    ),
    (
        "burst-taint-key-is-the-nodes-own",
        _set("burstTaintKey", "virtual-kubelet.io/provider"),
        "burstTaintKey",
        "must differ from the virtual node's own taint key",
    ),
    (
        "inference-service-in-a-training-namespace",
        _set("inferenceServices.0.namespace", "team-video"),
        "inferenceServices[0].namespace",
        "is team 'video''s training namespace",
    ),
    (
        "inference-service-in-an-unknown-namespace",
        _set("inferenceServices.0.namespace", "serving"),
        "inferenceServices[0].namespace",
        "is not an inference namespace",
    ),
    (
        "inference-service-twice",
        lambda r: r["inferenceServices"].append(copy.deepcopy(r["inferenceServices"][0])),
        "inferenceServices[1].name",
        "inference/llm-serve is declared twice",
    ),
    (
        "inference-service-gpu-type-not-offered",
        _burst(_set("inferenceServices.0.gpuType", "B200")),
        "inferenceServices[0].gpuType",
        "no burst provider offers 'B200'",
    ),
    (
        "inference-service-floating-image",
        _set("inferenceServices.0.image", "registry.internal.example/serving/llm-serve:latest"),
        "inferenceServices[0].image",
        "latest",
    ),
    (
        "inference-service-pdb-blocks-the-return",
        _set("inferenceServices.0.minAvailable", "100%"),
        "inferenceServices[0]",
        "allows no eviction",
    ),
    (
        "unknown-key-is-not-echoed",
        _set("runpodApikey", "rpa_secret"),
        "runpodApikey",
        "unknown key gpucluster:runpodApikey",
    ),
]


@pytest.mark.parametrize(
    ("mutate", "path", "reason"), [c[1:] for c in BURST_INVALID], ids=[c[0] for c in BURST_INVALID]
)
def test_invalid_burst_config_names_the_key(mutate: Callable[[dict[str, Any]], None], path: str, reason: str) -> None:
    test_invalid_config_names_the_key(mutate, path, reason)


def test_unknown_keys_and_secrets_never_carry_their_value() -> None:
    raw = base()
    bursting(raw)
    raw["runpodApiKey"] = "rpa_in_clear"
    raw["someToken"] = "tok_in_clear"
    with pytest.raises(StackConfigError) as caught:
        parse_stack_config(raw, "test")
    assert {i.path for i in caught.value.issues} == {"runpodApiKey", "someToken"}
    assert all(i.value is None for i in caught.value.issues)
    assert "in_clear" not in str(caught.value)


# --- gpucluster:images ---------------------------------------------------------------------------------------


def our_images(cfg: StackConfig) -> dict[str, str]:
    """Every image field of ours in a resolved stack, by where it sits."""
    assert cfg.burst is not None
    return {
        "makeBeforeBreak.image": cfg.controller(MAKE_BEFORE_BREAK).image,
        "quotaController.image": cfg.controller(QUOTA_CONTROLLER).image,
        "quarantine.image": cfg.controller(QUARANTINE).image,
        "interruptions.image": cfg.controller(INTERRUPTIONS).image,
        "telemetry.fabricExporter.image": cfg.telemetry.fabric_exporter.image,
        "burst.taintController.image": cfg.burst.taint_controller.image,
        "burst.virtualNode.providerImage": cfg.burst.settings.virtual_node.provider_image,
        "burst.virtualNode.nodeImage": cfg.burst.settings.virtual_node.node_image,
    }


def test_prod_resolves_every_image_of_ours_by_its_registry_version_and_digest() -> None:
    path = ROOT / "stacks" / "Pulumi.prod.yaml"
    images = our_images(load_stack_file(path))
    # The digests a pin wrote (make images PIN=prod), whichever build they are of.
    pinned = read_stack_file(path)["images"]["digests"]
    assert all(re.fullmatch(r"sha256:[0-9a-f]{64}", d) for d in pinned.values()), pinned
    registry, version = "registry.internal.example/gpucluster", project_version()
    daemons = f"{registry}/gpucluster-daemons:{version}@{pinned['gpucluster-daemons']}"
    node = f"{registry}/gpucluster-virtual-node:{version}@{pinned['gpucluster-virtual-node']}"
    assert images.pop("burst.virtualNode.nodeImage") == node
    assert images == dict.fromkeys(images, daemons)
    assert len(images) == 7


def test_every_stack_names_our_images_one_way() -> None:
    """No stack sets an image of ours itself: each comes from its gpucluster:images section."""
    for path in STACKS:
        raw = read_stack_file(path)
        registry = "registry.internal.example/gpucluster" if path.name == "Pulumi.prod.yaml" else "ghcr.io/example"
        assert raw["images"]["registry"] == registry, path.name
        for where, image in our_images(load_stack_file(path)).items():
            name = "gpucluster-virtual-node" if where.endswith("nodeImage") else "gpucluster-daemons"
            assert image.startswith(f"{registry}/{name}:{project_version()}"), (path.name, where, image)


def test_an_unset_image_is_filled_from_the_scheme() -> None:
    raw = base()
    raw["images"] = {"registry": "registry.test.example/build", "version": "0.2.0-rc.1"}
    images = our_images(parse_stack_config(raw, "test"))
    assert images.pop("burst.virtualNode.nodeImage") == "registry.test.example/build/gpucluster-virtual-node:0.2.0-rc.1"
    assert set(images.values()) == {"registry.test.example/build/gpucluster-daemons:0.2.0-rc.1"}


def test_without_an_images_section_the_defaults_name_them() -> None:
    raw = base()
    del raw["images"]
    images = our_images(parse_stack_config(raw, "test"))
    assert images.pop("burst.virtualNode.nodeImage") == DEFAULT_VIRTUAL_NODE_IMAGE
    assert set(images.values()) == {DEFAULT_DAEMONS_IMAGE}


def test_an_explicit_image_wins_over_the_scheme() -> None:
    """A section that names its own image (a build under test) keeps it; the others still follow the scheme."""
    raw = base()
    test_build = "registry.test.example/gpucluster-daemons:0.2.0-dev.3"
    test_node = "registry.test.example/gpucluster-virtual-node:0.2.0-dev.3"
    raw["makeBeforeBreak"]["image"] = test_build
    raw["quotaController"] = {"image": test_build}
    raw["quarantine"] = {"image": test_build}
    raw["interruptions"] = {"image": test_build}
    raw["telemetry"]["fabricExporter"]["image"] = test_build
    raw["burst"]["taintController"]["image"] = test_build
    raw["burst"]["virtualNode"]["providerImage"] = test_build
    raw["burst"]["virtualNode"]["nodeImage"] = test_node
    images = our_images(parse_stack_config(raw, "test"))
    assert images.pop("burst.virtualNode.nodeImage") == test_node
    assert set(images.values()) == {test_build}
    # One explicit image leaves the rest to the scheme.
    raw = base()
    raw["quarantine"] = {"image": test_build}
    images = our_images(parse_stack_config(raw, "test"))
    assert images.pop("quarantine.image") == test_build
    assert all(i.startswith("registry.internal.example/gpucluster/") for i in images.values())
