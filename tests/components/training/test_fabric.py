"""A training job on a flavor with a fabric: the pod gets the RDMA devices, IPC_LOCK, /dev/shm and NCCL's
settings; a spec that would turn the fabric off, or whose flavors disagree, is refused."""

from __future__ import annotations

from typing import Any

import pytest

from components.config import StackConfig, parse_stack_config
from components.training.checks import check_spec, fabric_is_known, fabric_stays_on
from components.training.manifest import checkpoint_interval, job_context, jobset_manifest
from components.training.spec import SpecError, parse_spec
from tests.components.training.conftest import local_raw, spec_doc

IB = {
    "kind": "infiniband",
    "rdmaResource": "rdma/ib",
    "rdmaPerPod": 1,
    "hcas": [f"mlx5_{i}" for i in range(8)],
    "socketInterface": "eth0",
    "podAnnotations": {"k8s.v1.cni.cncf.io/networks": "ib-rails"},
    "shmSize": "128Gi",
}


def stack_with(*fabrics: dict[str, Any] | None) -> StackConfig:
    """The local stack with one h100-like flavor per fabric given, all in the training queue."""
    raw = local_raw()
    flavors = []
    for i, fabric in enumerate(fabrics):
        flavor = {**raw["flavors"][0], "name": f"gpu{i}", "nodeLabels": {"gpucluster.io/pool": f"gpu{i}"}}
        if fabric is not None:
            flavor["fabric"] = fabric
        flavors.append(flavor)
    raw["flavors"] = flavors
    raw["queues"]["training"]["quota"] = {f["name"]: 32 for f in flavors}
    return parse_stack_config(raw)


def pod_of(stack: StackConfig, **change: Any) -> dict[str, Any]:
    spec = parse_spec(spec_doc(**change))
    check_spec(spec, stack)
    m = jobset_manifest(spec, job_context(spec, stack, checkpoint_interval(spec, stack, None)))
    return dict(m["spec"]["replicatedJobs"][0]["template"]["spec"]["template"])


def test_an_infiniband_flavor_gives_the_pod_its_rdma_devices_ipc_lock_shm_and_nccl_settings() -> None:
    pod = pod_of(stack_with(IB))
    (trainer,) = pod["spec"]["containers"]
    want = {"nvidia.com/gpu": "8", "rdma/ib": "1"}
    assert trainer["resources"] == {"requests": want, "limits": want}
    assert trainer["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "128Gi"}} in pod["spec"]["volumes"]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in trainer["volumeMounts"]
    env = {e["name"]: e.get("value") for e in trainer["env"]}
    assert env["NCCL_IB_HCA"] == "=mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7"
    assert env["NCCL_SOCKET_IFNAME"] == "eth0"
    assert "NCCL_IB_DISABLE" not in env
    assert pod["metadata"]["annotations"] == {
        "k8s.v1.cni.cncf.io/networks": "ib-rails",
        "kueue.x-k8s.io/podset-preferred-topology": "gpucluster.io/ib-leaf",
    }


def test_the_spec_overrides_a_fabric_setting_and_its_own_annotations_win() -> None:
    pod = pod_of(
        stack_with(IB),
        env={"NCCL_IB_HCA": "=mlx5_0,mlx5_1"},
        podAnnotations={"k8s.v1.cni.cncf.io/networks": "two-rails"},
    )
    hcas = [e for e in pod["spec"]["containers"][0]["env"] if e["name"] == "NCCL_IB_HCA"]
    assert hcas == [{"name": "NCCL_IB_HCA", "value": "=mlx5_0,mlx5_1"}]
    assert pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] == "two-rails"


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"NCCL_IB_DISABLE": "1"}, "spec.env.NCCL_IB_DISABLE: turns InfiniBand/RoCE off, but flavor gpu0 has"),
        ({"NCCL_NET": "Socket"}, "spec.env.NCCL_NET: sends NCCL over TCP sockets"),
        ({"NCCL_IB_HCA": "="}, "spec.env.NCCL_IB_HCA: names no HCA"),
    ],
)
def test_a_job_that_turns_the_fabric_off_on_an_rdma_flavor_is_refused(env: dict[str, str], expected: str) -> None:
    stack = stack_with(IB)
    (issue,) = fabric_stays_on(parse_spec(spec_doc(env=env)), stack)
    assert str(issue).startswith(expected)
    assert env[next(iter(env))] not in str(issue)  # a value in env is never echoed
    with pytest.raises(SpecError, match="NCCL over TCP"):
        pod_of(stack, env=env)


def test_the_same_settings_pass_where_there_is_no_rdma_fabric() -> None:
    env = {"NCCL_IB_DISABLE": "1", "NCCL_NET": "Socket"}
    assert list(fabric_stays_on(parse_spec(spec_doc(env=env)), stack_with({"kind": "ethernet"}))) == []
    assert list(fabric_stays_on(parse_spec(spec_doc(env={"NCCL_IB_DISABLE": "0"})), stack_with(IB))) == []
    pod = pod_of(stack_with({"kind": "ethernet"}), env=env)
    trainer = pod["spec"]["containers"][0]
    assert "securityContext" not in trainer
    assert set(trainer["resources"]["limits"]) == {"nvidia.com/gpu"}


def test_flavors_with_different_fabrics_need_the_spec_to_name_one() -> None:
    stack = stack_with(IB, None)
    (issue,) = fabric_is_known(parse_spec(spec_doc()), stack)
    assert "offers flavors with different fabrics (gpu0 (infiniband), gpu1 (no fabric)); name one" in str(issue)
    assert list(fabric_is_known(parse_spec(spec_doc(flavor="gpu0")), stack)) == []
    pod = pod_of(stack, flavor="gpu0")
    assert pod["spec"]["containers"][0]["resources"]["limits"]["rdma/ib"] == "1"
    assert list(fabric_is_known(parse_spec(spec_doc()), stack_with(IB, IB))) == []
