"""The pure rules of the "another Kubernetes cluster" provider: pod translation, state mapping, free GPUs."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest

from daemons.burst_provider.providers.base import InstanceState, InstanceTags
from daemons.burst_provider.providers.kubernetes.state import (
    free_gpus,
    instance_from_pod,
    parse_instance_id,
    pod_gpu_request,
    pod_state,
    tolerates,
)
from daemons.burst_provider.providers.kubernetes.translate import (
    COPY_LABEL,
    NODE_LABEL,
    ObjectRef,
    Translation,
    TranslationError,
    copy_object,
    label_value,
    referenced_objects,
    target_pod_name,
    translate_pod,
)

UID = "7b1c2d3e-4f50-4a6b-8c7d-9e0f1a2b3c4d"
TAGS = InstanceTags(node="gpu-burst", namespace="inference", pod="sd-serve-7c9f-abcde", uid=UID)
PLACEMENT: dict[str, Any] = {
    "namespace_map": {"inference": "burst-inference"},
    "node_selector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
    "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
}


def source_pod() -> dict[str, Any]:
    """A Deployment's pod as the virtual node sees it: bound to the virtual node, with a token volume."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": TAGS.pod,
            "namespace": TAGS.namespace,
            "uid": UID,
            "resourceVersion": "123",
            "labels": {"app": "sd-serve", "pod-template-hash": "7c9f"},
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": "{}",
                "kubectl.kubernetes.io/restartedAt": "2026-11-29T10:00:00Z",
                "prometheus.io/scrape": "true",
            },
            "ownerReferences": [{"kind": "ReplicaSet", "name": "sd-serve-7c9f", "uid": "x"}],
        },
        "spec": {
            "nodeName": "gpu-burst",
            "serviceAccountName": "inference-runner",
            "serviceAccount": "inference-runner",
            "priorityClassName": "gpucluster-inference",
            "priority": 1000,
            "schedulerName": "default-scheduler",
            "affinity": {"nodeAffinity": {}},
            "restartPolicy": "Always",
            "nodeSelector": {"type": "virtual-kubelet"},
            "tolerations": [{"key": "virtual-kubelet.io/provider", "operator": "Equal", "value": "gpucluster"}],
            "imagePullSecrets": [{"name": "registry-creds"}],
            "containers": [
                {
                    "name": "server",
                    "image": "registry.example/sd:1",
                    "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                    "env": [
                        {"name": "MODEL", "valueFrom": {"configMapKeyRef": {"name": "sd-config", "key": "model"}}},
                        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}},
                        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    ],
                    "envFrom": [{"configMapRef": {"name": "extra-env", "optional": True}}],
                    "resources": {"limits": {"nvidia.com/gpu": "2"}},
                    "volumeMounts": [
                        {"name": "kube-api-access-abcde", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"},
                        {"name": "weights", "mountPath": "/weights"},
                        {"name": "bound-token", "mountPath": "/var/run/token"},
                    ],
                }
            ],
            "initContainers": [
                {
                    "name": "fetch",
                    "image": "registry.example/fetch:1",
                    "volumeMounts": [{"name": "kube-api-access-abcde", "mountPath": "/sa"}],
                }
            ],
            "volumes": [
                {
                    "name": "kube-api-access-abcde",
                    "projected": {
                        "sources": [
                            {"serviceAccountToken": {"path": "token"}},
                            {"configMap": {"name": "kube-root-ca.crt"}},
                        ]
                    },
                },
                {"name": "weights", "configMap": {"name": "sd-weights-index"}},
                {"name": "bound-token", "projected": {"sources": [{"serviceAccountToken": {"audience": "vault"}}]}},
                {"name": "tls", "secret": {"secretName": "sd-tls", "optional": True}},
            ],
        },
        "status": {"phase": "Pending"},
    }


def translate(pod: dict[str, Any] | None = None, tags: InstanceTags = TAGS, **placement: Any) -> Translation:
    return translate_pod(pod or source_pod(), tags, **{**PLACEMENT, **placement}, gpu_type="H100", gpu_count=2)


# --- names ---------------------------------------------------------------------------------------------------------


def test_short_name_is_name_dash_uid() -> None:
    assert target_pod_name("sd-serve-7c9f-abcde", UID) == f"sd-serve-7c9f-abcde-{UID}"


def test_long_name_is_cut_and_keeps_the_whole_uid() -> None:
    name = target_pod_name("a-very-long-deployment-name-for-inference-7c9f8d6b5-abcde", UID)
    assert len(name) == 63
    assert name.endswith(f"-{UID}")
    assert name == f"a-very-long-deployment-nam-{UID}"


def test_cut_name_does_not_end_in_a_dash_and_dots_become_dashes() -> None:
    # 25 characters then a dash at the cut point: the prefix must not end with it.
    name = target_pod_name("abcdefghijklmnopqrstuvwxy-zzzz", UID)
    assert name == f"abcdefghijklmnopqrstuvwxy-{UID}"
    assert target_pod_name("web.v2", UID) == f"web-v2-{UID}"


def test_two_pods_with_the_same_long_prefix_get_different_names() -> None:
    other = "0f9e8d7c-6b5a-4c3d-8e2f-1a0b9c8d7e6f"
    base = "x" * 80
    assert target_pod_name(base, UID) != target_pod_name(base, other)


def test_name_needs_a_uid() -> None:
    with pytest.raises(TranslationError, match="uid"):
        target_pod_name("web", "")


def test_label_value_is_cut_to_a_valid_value() -> None:
    assert label_value("ok-name") == "ok-name"
    cut = label_value("a" * 62 + "-b")
    assert len(cut) <= 63
    assert cut == "a" * 62


# --- translation ---------------------------------------------------------------------------------------------------


def test_namespace_is_mapped_and_defaults_to_the_same_name() -> None:
    assert translate().namespace == "burst-inference"
    other = InstanceTags(node="gpu-burst", namespace="research", pod="p", uid=UID)
    assert translate(tags=other).namespace == "research"


def test_labels_lead_back_to_the_source_pod() -> None:
    t = translate()
    meta = t.pod["metadata"]
    assert meta["name"] == t.name == f"{TAGS.pod}-{UID}"
    assert meta["labels"] == {
        "app": "sd-serve",
        "pod-template-hash": "7c9f",
        "burst.gpucluster.io/node": "gpu-burst",
        "burst.gpucluster.io/source-namespace": "inference",
        "burst.gpucluster.io/source-name": TAGS.pod,
        "burst.gpucluster.io/source-uid": UID,
    }
    for dropped in ("ownerReferences", "uid", "resourceVersion"):
        assert dropped not in meta, dropped
    assert "status" not in t.pod


def test_annotations_drop_kubectl_ones_and_record_gpu_and_full_name() -> None:
    annotations = translate().pod["metadata"]["annotations"]
    assert not [k for k in annotations if k.startswith("kubectl.kubernetes.io/")]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["burst.gpucluster.io/gpu-type"] == "H100"
    assert annotations["burst.gpucluster.io/gpu-count"] == "2"
    assert annotations["burst.gpucluster.io/source-name"] == TAGS.pod


def test_a_source_name_too_long_for_a_label_is_kept_whole_in_the_annotation() -> None:
    long_name = "n" * 100
    tags = InstanceTags(node="gpu-burst", namespace="inference", pod=long_name, uid=UID)
    t = translate(tags=tags)
    assert len(t.pod["metadata"]["labels"]["burst.gpucluster.io/source-name"]) == 63
    assert t.pod["metadata"]["annotations"]["burst.gpucluster.io/source-name"] == long_name


def test_token_volumes_and_their_mounts_are_dropped() -> None:
    spec = translate().pod["spec"]
    assert [v["name"] for v in spec["volumes"]] == ["weights", "tls"]
    assert spec["containers"][0]["volumeMounts"] == [{"name": "weights", "mountPath": "/weights"}]
    assert "volumeMounts" not in spec["initContainers"][0]
    assert spec["automountServiceAccountToken"] is False
    assert spec["serviceAccountName"] == "default"
    assert "serviceAccount" not in spec


def test_configured_service_account_is_used() -> None:
    assert translate(service_account="burst-runner").pod["spec"]["serviceAccountName"] == "burst-runner"


def test_placement_is_replaced_and_source_cluster_fields_dropped() -> None:
    spec = translate().pod["spec"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert spec["tolerations"] == [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    for dropped in ("nodeName", "affinity", "priorityClassName", "priority", "schedulerName"):
        assert dropped not in spec, dropped
    assert spec["restartPolicy"] == "Always"
    assert spec["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "2"}}


def test_empty_placement_leaves_no_selector_or_tolerations() -> None:
    spec = translate(node_selector={}, tolerations=[]).pod["spec"]
    assert "nodeSelector" not in spec
    assert "tolerations" not in spec


def test_translation_does_not_change_the_source() -> None:
    pod = source_pod()
    before = copy.deepcopy(pod)
    translate(pod)
    assert pod == before


def test_configmap_and_secret_references_are_collected() -> None:
    assert translate().refs == (
        ObjectRef("ConfigMap", "extra-env", optional=True),
        ObjectRef("ConfigMap", "sd-config"),
        ObjectRef("ConfigMap", "sd-weights-index"),
        ObjectRef("Secret", "hf-token"),
        ObjectRef("Secret", "registry-creds", optional=True),
        ObjectRef("Secret", "sd-tls", optional=True),
    )


def test_a_reference_is_optional_only_when_every_use_says_so() -> None:
    spec = {
        "containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": "cfg", "optional": True}}]}],
        "volumes": [
            {"name": "v", "configMap": {"name": "cfg"}},
            {"name": "w", "projected": {"sources": [{"secret": {"name": "s", "optional": True}}]}},
        ],
    }
    assert referenced_objects(spec) == (ObjectRef("ConfigMap", "cfg"), ObjectRef("Secret", "s", optional=True))


def test_a_pod_without_containers_is_refused() -> None:
    pod = source_pod()
    pod["spec"]["containers"] = []
    pod["spec"].pop("initContainers")
    with pytest.raises(TranslationError, match="no containers"):
        translate(pod)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda s: s.update(hostNetwork=True), "spec.hostNetwork"),
        (lambda s: s["volumes"].append({"name": "root", "hostPath": {"path": "/"}}), "spec.volumes[4] hostPath"),
        (
            lambda s: s["containers"][0].update(securityContext={"privileged": True}),
            "spec.containers[0].securityContext.privileged",
        ),
        (
            lambda s: s["initContainers"][0].update(securityContext={"capabilities": {"add": ["SYS_ADMIN", "CHOWN"]}}),
            "spec.initContainers[0].securityContext.capabilities.add ['SYS_ADMIN']",
        ),
        (lambda s: s["containers"][0]["ports"][0].update(hostPort=8080), "spec.containers[0].ports[0].hostPort"),
        (
            lambda s: s.update(securityContext={"seccompProfile": {"type": "Unconfined"}}),
            "spec.securityContext.seccompProfile Unconfined",
        ),
    ],
)
def test_what_baseline_refuses_is_not_carried_into_the_target_cluster(change: Any, field: str) -> None:
    """The home cluster's inference namespaces enforce baseline; the target's may not: the provider refuses to copy
    a pod beyond it there rather than rely on the target's policy."""
    pod = source_pod()
    change(pod["spec"])
    with pytest.raises(TranslationError, match="Pod Security baseline refuses") as info:
        translate(pod)
    assert field in str(info.value)


def test_what_baseline_allows_is_carried() -> None:
    pod = source_pod()
    pod["spec"]["containers"][0]["securityContext"] = {
        "capabilities": {"add": ["NET_BIND_SERVICE"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert translate(pod).pod["spec"]["containers"][0]["securityContext"]["capabilities"]["add"] == ["NET_BIND_SERVICE"]


def test_copied_object_is_labelled_as_this_nodes_copy() -> None:
    body = copy_object("ConfigMap", "sd-config", {"model": "sdxl"}, "burst-inference", TAGS)
    assert body["metadata"]["name"] == "sd-config"
    assert body["metadata"]["namespace"] == "burst-inference"
    assert body["metadata"]["labels"][COPY_LABEL] == "true"
    assert body["metadata"]["labels"][NODE_LABEL] == "gpu-burst"
    assert body["data"] == {"model": "sdxl"}


def test_secret_copies_are_encoded_and_registry_credentials_keep_their_type() -> None:
    opaque = copy_object("Secret", "hf-token", {"token": "hf_abc"}, "burst-inference", TAGS)
    assert opaque["type"] == "Opaque"
    assert opaque["data"] == {"token": "aGZfYWJj"}
    pull = copy_object("Secret", "registry-creds", {".dockerconfigjson": "{}"}, "burst-inference", TAGS)
    assert pull["type"] == "kubernetes.io/dockerconfigjson"
    with pytest.raises(TranslationError, match="no name"):
        copy_object("Secret", "", {}, "burst-inference", TAGS)


# --- state mapping -------------------------------------------------------------------------------------------------


def target_pod(phase: str, **status: Any) -> dict[str, Any]:
    pod: dict[str, Any] = copy.deepcopy(translate().pod)
    pod["status"] = {"phase": phase, **status}
    return pod


def test_pending_is_creating() -> None:
    assert pod_state(target_pod("Pending"))[0] == InstanceState.CREATING


def test_running_and_ready_is_running_with_the_pod_ip() -> None:
    pod = target_pod(
        "Running",
        podIP="10.160.0.7",
        startTime="2026-11-29T10:00:00Z",
        containerStatuses=[{"name": "server", "ready": True, "state": {"running": {}}}],
    )
    inst = instance_from_pod("east", pod)
    assert inst is not None
    assert inst.state == InstanceState.RUNNING
    assert inst.address == "10.160.0.7"
    assert inst.tags == TAGS
    assert inst.instance_id == f"burst-inference/{TAGS.pod}-{UID}"
    assert inst.gpu_type == "H100"
    assert inst.gpu_count == 2
    assert [(p.name, p.port) for p in inst.ports] == [("http", 8080)]
    assert inst.started_at == datetime(2026, 11, 29, 10, 0, tzinfo=UTC).timestamp()


def test_running_but_not_ready_is_still_creating_without_address() -> None:
    pod = target_pod("Running", podIP="10.160.0.7", containerStatuses=[{"name": "server", "ready": False}])
    inst = instance_from_pod("east", pod)
    assert inst is not None
    assert inst.state == InstanceState.CREATING
    assert inst.address == ""


def test_succeeded_is_exited_zero() -> None:
    assert pod_state(target_pod("Succeeded"))[:2] == (InstanceState.EXITED, 0)


def test_failed_carries_the_exit_code_of_the_failed_container() -> None:
    pod = target_pod(
        "Failed",
        reason="Error",
        containerStatuses=[
            {"name": "side", "state": {"terminated": {"exitCode": 0}}},
            {"name": "server", "state": {"terminated": {"exitCode": 3, "finishedAt": "2026-11-29T10:05:00Z"}}},
        ],
    )
    state, code, message = pod_state(pod)
    assert (state, code) == (InstanceState.FAILED, 3)
    assert "Error" in message
    inst = instance_from_pod("east", pod)
    assert inst is not None
    assert inst.finished_at == datetime(2026, 11, 29, 10, 5, tzinfo=UTC).timestamp()


def test_deleting_is_terminated_and_unknown_is_failed() -> None:
    pod = target_pod("Running")
    pod["metadata"]["deletionTimestamp"] = "2026-11-29T10:00:00Z"
    assert pod_state(pod)[0] == InstanceState.TERMINATED
    assert pod_state(target_pod("Unknown"))[0] == InstanceState.FAILED


def test_a_pod_without_burst_tags_is_no_instance() -> None:
    assert instance_from_pod("east", {"metadata": {"name": "x", "namespace": "y", "labels": {}}}) is None


def test_instance_id_is_namespace_slash_name() -> None:
    assert parse_instance_id("burst-inference/p-1") == ("burst-inference", "p-1")
    for bad in ("nope", "/p", "ns/", "a/b/c"):
        with pytest.raises(ValueError, match="is not <namespace>/<pod name>"):
            parse_instance_id(bad)


# --- capacity ------------------------------------------------------------------------------------------------------


def node(
    name: str,
    gpus: int,
    *,
    ready: bool = True,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    unschedulable: bool = False,
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels or {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
        "spec": {"unschedulable": unschedulable, "taints": taints or []},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def pod_on(node_name: str, gpus: int, phase: str = "Running", init_gpus: int = 0) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "nodeName": node_name,
        "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}],
    }
    if init_gpus:
        spec["initContainers"] = [{"name": "i", "resources": {"limits": {"nvidia.com/gpu": str(init_gpus)}}}]
    return {"metadata": {}, "spec": spec, "status": {"phase": phase}}


def test_free_gpus_sums_usable_nodes_minus_requests() -> None:
    nodes = [node("a", 8), node("b", 8)]
    pods = [pod_on("a", 3), pod_on("b", 8), pod_on("b", 1, phase="Succeeded"), pod_on("elsewhere", 4)]
    assert free_gpus(nodes, pods, PLACEMENT["node_selector"], []) == 5


def test_free_gpus_skips_unready_cordoned_unselected_and_tainted_nodes() -> None:
    nodes = [
        node("ok", 8),
        node("down", 8, ready=False),
        node("cordoned", 8, unschedulable=True),
        node("a100", 8, labels={"nvidia.com/gpu.product": "A100"}),
        node("tainted", 8, taints=[{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]),
        node("soft", 8, taints=[{"key": "dedicated", "effect": "PreferNoSchedule"}]),
    ]
    assert free_gpus(nodes, [], PLACEMENT["node_selector"], []) == 16
    tol = [{"key": "dedicated", "operator": "Equal", "value": "x"}]
    assert free_gpus(nodes, [], PLACEMENT["node_selector"], tol) == 24


def test_tolerations_match_by_key_value_effect_and_exists() -> None:
    taint = {"key": "gpu", "value": "h100", "effect": "NoSchedule"}
    assert tolerates([{"operator": "Exists"}], taint)
    assert tolerates([{"key": "gpu", "operator": "Exists"}], taint)
    assert tolerates([{"key": "gpu", "value": "h100", "effect": "NoSchedule"}], taint)
    assert not tolerates([{"key": "gpu", "value": "a100"}], taint)
    assert not tolerates([{"key": "gpu", "operator": "Exists", "effect": "NoExecute"}], taint)
    assert not tolerates([], taint)


def test_gpu_request_takes_limits_and_init_containers() -> None:
    assert pod_gpu_request(pod_on("a", 2)) == 2
    assert pod_gpu_request(pod_on("a", 1, init_gpus=4)) == 4
    assert (
        pod_gpu_request({"spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "3"}}}]}})
        == 3
    )
    assert pod_gpu_request({"spec": {"containers": [{"name": "c"}]}}) == 0
