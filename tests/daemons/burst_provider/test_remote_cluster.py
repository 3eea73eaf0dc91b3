"""The kubernetes burst provider against a real second API server: ``sim/remote.sh`` (kwok, 2 nodes x 8 GPUs).

The module's fixture starts the remote cluster and removes it at the end, unless it was already up (then it is
reused and left running); two pytest-xdist workers running its tests share it, and the last one out removes it. It
never touches the main simulated cluster.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from daemons.burst_provider.providers.base import (
    ContainerSpec,
    InstanceSpec,
    InstanceState,
    InstanceTags,
    ProviderError,
)
from daemons.burst_provider.providers.kubernetes.provider import KubernetesClusterProvider
from daemons.burst_provider.providers.kubernetes.translate import COPY_LABEL, NODE_LABEL
from tests.support.local_stack import wait_for
from tests.support.require import missing
from tests.support.sim import tools_bin

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
REMOTE = ROOT / "sim" / "remote.sh"
KUBECONFIG = ROOT / ".state" / "remote" / "kubeconfig"
NEEDED_TOOLS = ("kwokctl", "kwok", "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
TARGET_NAMESPACE = "burst-inference"
NODE = "gpu-burst"


class SourceStub:
    """The source cluster's ConfigMaps and Secrets, as the service's source reader returns them (data only)."""

    def __init__(self) -> None:
        self.config_maps: dict[tuple[str, str], dict[str, str]] = {}
        self.secrets: dict[tuple[str, str], dict[str, str]] = {}

    def config_map(self, namespace: str, name: str) -> dict[str, str] | None:
        return self.config_maps.get((namespace, name))

    def secret(self, namespace: str, name: str) -> dict[str, str] | None:
        return self.secrets.get((namespace, name))


def _remote(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(REMOTE), *args], capture_output=True, text=True, cwd=ROOT, timeout=300, check=False)


def _up_already() -> bool:
    if not KUBECONFIG.exists():
        return False
    probe = subprocess.run(
        [
            str(tools_bin() / "kubectl"),
            "--kubeconfig",
            str(KUBECONFIG),
            "--request-timeout=5s",
            "get",
            "--raw",
            "/readyz",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    return probe.returncode == 0


#: Who uses the remote cluster now: one file per pytest process (its pid), and ``started`` while a test process
#: brought it up. The module's tests may run on two pytest-xdist workers at once, each with its own module fixture:
#: the last one out brings it down, and only if a test process started it.
USERS = ROOT / ".state" / "remote-users"
LOCK = ROOT / ".state" / "remote-users.lock"


@contextmanager
def _locked() -> Iterator[None]:
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    with LOCK.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


def _others() -> list[str]:
    """The live pytest processes besides this one that use the remote cluster (a dead one's file is removed)."""
    out = []
    for f in USERS.glob("[0-9]*"):
        if f.name == str(os.getpid()):
            continue
        if _alive(f.name):
            out.append(f.name)
        else:
            f.unlink(missing_ok=True)
    return out


@pytest.fixture(scope="module")
def remote_kubeconfig() -> Iterator[str]:
    absent = [t for t in NEEDED_TOOLS if not (tools_bin() / t).is_file()]
    if absent:
        missing(f"pinned tools not built in {tools_bin()} (missing: {', '.join(absent)}); run make tools")
    started = USERS / "started"
    with _locked():
        USERS.mkdir(parents=True, exist_ok=True)
        if not _others():
            started.unlink(missing_ok=True)  # left by a run that was killed: whoever finds it up now reuses it
        if not _up_already():
            started.touch()
        up = _remote("up")
        if up.returncode != 0:
            pytest.fail(f"sim/remote.sh up failed (exit {up.returncode}):\n{up.stdout[-3000:]}\n{up.stderr[-3000:]}")
        (USERS / str(os.getpid())).touch()
    yield KUBECONFIG.read_text()
    with _locked():
        (USERS / str(os.getpid())).unlink(missing_ok=True)
        if not _others() and started.exists():
            started.unlink()
            down = _remote("down")
            assert down.returncode == 0, down.stderr[-3000:]


def kubectl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(tools_bin() / "kubectl"), "--kubeconfig", str(KUBECONFIG), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def make_provider(kubeconfig: str, source: SourceStub, max_gpus: int = 32) -> KubernetesClusterProvider:
    return KubernetesClusterProvider(
        "east",
        kubeconfig,
        {"H100": 1.8},
        max_gpus=max_gpus,
        namespace_map={"inference": TARGET_NAMESPACE},
        node_selector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        source_reader=source,
        grace_period_seconds=5,
    )


def source_pod(name: str, uid: str, config_map: str) -> dict[str, Any]:
    """A Deployment's pod bound to the virtual node, referencing `config_map` and carrying a token volume."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "inference",
            "uid": uid,
            "labels": {"app": "sd-serve"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
        },
        "spec": {
            "nodeName": NODE,
            "serviceAccountName": "inference-runner",
            "priorityClassName": "gpucluster-inference",
            "tolerations": [{"key": "virtual-kubelet.io/provider", "operator": "Exists"}],
            "containers": [
                {
                    "name": "server",
                    "image": "registry.invalid/sd:1",
                    "ports": [{"name": "http", "containerPort": 8080}],
                    "env": [{"name": "MODEL", "valueFrom": {"configMapKeyRef": {"name": config_map, "key": "model"}}}],
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    "volumeMounts": [{"name": "kube-api-access-x1", "mountPath": "/var/run/secrets/sa"}],
                }
            ],
            "volumes": [
                {"name": "kube-api-access-x1", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}
            ],
        },
    }


def instance_spec(pod: dict[str, Any]) -> InstanceSpec:
    meta = pod["metadata"]
    return InstanceSpec(
        tags=InstanceTags(node=NODE, namespace=meta["namespace"], pod=meta["name"], uid=meta["uid"]),
        gpu_type="H100",
        gpu_count=1,
        containers=(ContainerSpec(name="server", image="registry.invalid/sd:1"),),
        pod=pod,
    )


def h100_available(p: KubernetesClusterProvider) -> int:
    [offer] = p.offers()
    assert offer.gpu_type == "H100"
    assert offer.price_per_gpu_hour == 1.8
    return offer.available_gpus


def test_instance_lifecycle_in_the_remote_cluster(remote_kubeconfig: str) -> None:
    source = SourceStub()
    source.config_maps["inference", "sd-config"] = {"model": "sdxl"}
    p = make_provider(remote_kubeconfig, source)
    assert h100_available(p) == 16
    assert h100_available(make_provider(remote_kubeconfig, source, max_gpus=4)) == 4

    uid = str(uuid.uuid4())
    pod = source_pod("sd-serve-7c9f-abcde", uid, "sd-config")
    created = p.create_instance(instance_spec(pod))
    assert created.state in {InstanceState.CREATING, InstanceState.RUNNING}
    assert created.instance_id == f"{TARGET_NAMESPACE}/sd-serve-7c9f-abcde-{uid}"
    # Creating again is idempotent: the same instance.
    assert p.create_instance(instance_spec(pod)).instance_id == created.instance_id

    target = kubectl("get", "pod", "-n", TARGET_NAMESPACE, f"sd-serve-7c9f-abcde-{uid}", "-o", "json")
    assert target.returncode == 0, target.stderr
    obj = json.loads(target.stdout)
    labels = obj["metadata"]["labels"]
    assert labels[NODE_LABEL] == NODE
    assert labels["burst.gpucluster.io/source-uid"] == uid
    assert labels["burst.gpucluster.io/source-namespace"] == "inference"
    assert labels["app"] == "sd-serve"
    assert obj["spec"]["serviceAccountName"] == "default"
    assert obj["spec"]["automountServiceAccountToken"] is False
    assert "volumes" not in obj["spec"]
    assert obj["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert "priorityClassName" not in obj["spec"]
    assert not [t for t in obj["spec"].get("tolerations", []) if t["key"].startswith("virtual-kubelet")]

    cm = kubectl("get", "configmap", "-n", TARGET_NAMESPACE, "sd-config", "-o", "json")
    assert cm.returncode == 0, cm.stderr
    cm_obj = json.loads(cm.stdout)
    assert cm_obj["data"] == {"model": "sdxl"}
    assert cm_obj["metadata"]["labels"][COPY_LABEL] == "true"

    running = wait_for(
        "the target pod to run",
        lambda: (i := p.get_instance(created.instance_id)) is not None and i.state == InstanceState.RUNNING and i,
        timeout=60,
    )
    assert running.address.startswith("10.160.")
    assert running.tags == instance_spec(pod).tags
    assert [pt.port for pt in running.ports] == [8080]

    assert [i.instance_id for i in p.list_instances(NODE)] == [created.instance_id]
    assert p.list_instances("another-virtual-node") == []
    assert h100_available(p) == 15
    assert h100_available(make_provider(remote_kubeconfig, source, max_gpus=4)) == 3

    p.delete_instance(created.instance_id)
    wait_for("the target pod to be gone", lambda: p.get_instance(created.instance_id) is None, timeout=60)
    assert kubectl("get", "configmap", "-n", TARGET_NAMESPACE, "sd-config").returncode != 0
    assert p.list_instances(NODE) == []
    p.delete_instance(created.instance_id)  # deleting what is gone is not an error


def test_shared_copy_stays_while_another_pod_uses_it(remote_kubeconfig: str) -> None:
    source = SourceStub()
    source.config_maps["inference", "shared-config"] = {"model": "v1"}
    p = make_provider(remote_kubeconfig, source)
    a = p.create_instance(instance_spec(source_pod("web-a", str(uuid.uuid4()), "shared-config")))
    source.config_maps["inference", "shared-config"] = {"model": "v2"}
    b = p.create_instance(instance_spec(source_pod("web-b", str(uuid.uuid4()), "shared-config")))
    try:
        p.delete_instance(a.instance_id)
        shared = kubectl("get", "configmap", "-n", TARGET_NAMESPACE, "shared-config", "-o", "jsonpath={.data.model}")
        assert shared.stdout == "v2"
    finally:
        p.delete_instance(b.instance_id)
    wait_for(
        "the shared copy to go with its last pod",
        lambda: kubectl("get", "configmap", "-n", TARGET_NAMESPACE, "shared-config").returncode != 0,
        timeout=30,
    )


def test_refusals_name_what_is_wrong(remote_kubeconfig: str) -> None:
    source = SourceStub()
    p = make_provider(remote_kubeconfig, source)
    missing_cm = source_pod("web-c", str(uuid.uuid4()), "not-there")
    with pytest.raises(ProviderError, match="ConfigMap inference/not-there referenced by the pod does not exist"):
        p.create_instance(instance_spec(missing_cm))

    other_ns = source_pod("web-d", str(uuid.uuid4()), "cfg")
    other_ns["metadata"]["namespace"] = "research"
    with pytest.raises(ProviderError, match=r"target namespace research .* does not exist"):
        p.create_instance(instance_spec(other_ns))

    # A pod the target API refuses leaves no copy behind.
    source.config_maps["inference", "for-refused"] = {"model": "x"}
    refused = source_pod("web-f", str(uuid.uuid4()), "for-refused")
    refused["spec"]["containers"][0]["ports"] = [{"containerPort": 99999}]
    with pytest.raises(ProviderError, match=r"create_instance: HTTP 422 Unprocessable Entity: .*containerPort"):
        p.create_instance(instance_spec(refused))
    assert kubectl("get", "configmap", "-n", TARGET_NAMESPACE, "for-refused").returncode != 0

    # An object of the same name that this node did not copy is never overwritten.
    kubectl("create", "configmap", "-n", TARGET_NAMESPACE, "theirs", "--from-literal=model=x")
    source.config_maps["inference", "theirs"] = {"model": "ours"}
    try:
        with pytest.raises(ProviderError, match=r"ConfigMap burst-inference/theirs exists .* not this node's copy"):
            p.create_instance(instance_spec(source_pod("web-e", str(uuid.uuid4()), "theirs")))
    finally:
        kubectl("delete", "configmap", "-n", TARGET_NAMESPACE, "theirs")
