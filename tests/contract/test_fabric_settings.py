"""A flavor's fabric: what an RDMA fabric must name, and the NCCL settings it gives a training container."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from contract.fabric_settings import Fabric

IB: dict[str, Any] = {
    "kind": "infiniband",
    "rdmaResource": "rdma/ib",
    "hcas": ["mlx5_0", "mlx5_1"],
    "socketInterface": "eth0",
}


def test_an_infiniband_fabric_names_its_hcas_exactly_and_its_bootstrap_interface() -> None:
    fabric = Fabric.model_validate(IB)
    assert fabric.rdma
    # '=': exact names, so mlx5_1 does not also match mlx5_10 .. mlx5_17
    assert fabric.nccl_settings() == {"NCCL_IB_HCA": "=mlx5_0,mlx5_1", "NCCL_SOCKET_IFNAME": "eth0"}


def test_roce_adds_its_gid_index_and_extra_nccl_settings_come_last() -> None:
    fabric = Fabric.model_validate(
        {**IB, "kind": "roce", "gidIndex": 3, "ncclEnv": {"NCCL_IB_TC": "106", "NCCL_SOCKET_IFNAME": "bond0"}}
    )
    assert fabric.nccl_settings() == {
        "NCCL_IB_HCA": "=mlx5_0,mlx5_1",
        "NCCL_IB_GID_INDEX": "3",
        "NCCL_SOCKET_IFNAME": "bond0",
        "NCCL_IB_TC": "106",
    }


def test_ethernet_needs_nothing_and_says_so_to_nccl() -> None:
    fabric = Fabric.model_validate({"kind": "ethernet"})
    assert not fabric.rdma
    assert fabric.nccl_settings() == {"NCCL_IB_DISABLE": "1"}


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"rdmaResource": None}, "a infiniband fabric needs rdmaResource"),
        ({"hcas": []}, "needs hcas"),
        ({"rdmaResource": None, "hcas": []}, "needs rdmaResource and hcas"),
        ({"kind": "roce"}, "a roce fabric needs gidIndex"),
        ({"gidIndex": 3}, "gidIndex is RoCE's"),
        ({"kind": "ethernet"}, "an ethernet fabric has no rdmaResource"),
        ({"hcas": ["mlx5 0"]}, "is not an HCA name"),
        ({"rdmaResource": "rdma ib"}, "resource name"),
        ({"shmSize": "lots"}, "is not a size like 64Gi"),
        ({"ncclEnv": {"LD_PRELOAD": "/x.so"}}, "is not an NCCL setting"),
        ({"socketInterface": "eth0; reboot"}, "socketInterface"),
    ],
)
def test_a_fabric_that_cannot_work_is_refused_naming_why(change: dict[str, Any], expected: str) -> None:
    with pytest.raises(ValidationError, match=expected):
        Fabric.model_validate({**IB, **change})
