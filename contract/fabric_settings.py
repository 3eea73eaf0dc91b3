"""A GPU flavor's fabric (``gpucluster:flavors[].fabric``): how its nodes talk to each other across nodes.

A multi-node training job reaches the fabric through three things the pod must ask for, and NCCL must be told
which devices to use:

* the RDMA devices, as the cluster's device plugin advertises them: the k8s RDMA shared device plugin's
  ``rdma/<name>`` resources, or what the NVIDIA network operator configures (an SR-IOV resource such as
  ``nvidia.com/<pool>`` with a Multus network attachment). Without one in the pod, NCCL finds no HCA and runs over
  TCP sockets, or fails;
* ``IPC_LOCK``: the verbs library pins (registers) memory, which needs more than the default locked-memory limit;
* a memory-backed ``/dev/shm``: NCCL's intra-node transport and PyTorch's DataLoader workers use shared memory,
  and the container runtime's default is 64 MiB.

NCCL's own settings come from the fabric: ``NCCL_IB_HCA`` (which HCAs, and so which rails), ``NCCL_SOCKET_IFNAME``
(the interface its bootstrap uses), ``NCCL_IB_GID_INDEX`` (RoCE's GID, absent on InfiniBand), and any other
``NCCL_*`` the operators set. A job's ``env`` may override any of them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from contract.issues import shown
from contract.model import ConfigModel, check_qualified_name

FabricKind = Literal["infiniband", "roce", "ethernet"]
#: Fabrics whose pods need RDMA devices, IPC_LOCK and a memory-backed /dev/shm.
RDMA_FABRICS: frozenset[str] = frozenset({"infiniband", "roce"})
#: The memory-backed /dev/shm a training pod gets unless the fabric says otherwise.
DEFAULT_SHM_SIZE = "64Gi"
#: What the verbs library needs to pin memory.
RDMA_CAPABILITY = "IPC_LOCK"

_HCA = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
_IFNAME = re.compile(r"^\^?=?[A-Za-z0-9_.:-]{1,15}$")
_NCCL_NAME = re.compile(r"^NCCL_[A-Z0-9_]+$")
_QUANTITY = re.compile(r"^[0-9]+(Ki|Mi|Gi|Ti)$")


def fabric_turned_off(env: Mapping[str, str]) -> Iterator[tuple[str, str]]:
    """(name, why) of each setting in ``env`` that makes NCCL leave the RDMA devices it was given and run over TCP
    sockets: what ``gpucluster submit`` and the policy pack refuse on an RDMA flavor."""
    if env.get("NCCL_IB_DISABLE", "0").strip() not in ("", "0"):
        yield "NCCL_IB_DISABLE", "turns InfiniBand/RoCE off"
    if env.get("NCCL_NET", "").strip().lower() == "socket":
        yield "NCCL_NET", "sends NCCL over TCP sockets"
    if "NCCL_IB_HCA" in env and not env["NCCL_IB_HCA"].strip().lstrip("=^"):
        yield "NCCL_IB_HCA", "names no HCA"


def _quantity(value: str) -> str:
    if not _QUANTITY.match(value):
        raise ValueError(f"{shown(value)} is not a size like 64Gi (Ki, Mi, Gi or Ti)")
    return value


def _hca(value: str) -> str:
    if not _HCA.match(value):
        raise ValueError(f"{shown(value)} is not an HCA name (mlx5_0, or mlx5_0:1 with its port)")
    return value


class Fabric(ConfigModel):
    """The fabric of one flavor's nodes; ``kind: ethernet`` needs nothing in the pod (NCCL over TCP sockets)."""

    kind: FabricKind
    #: The extended resource the cluster's RDMA device plugin advertises (``rdma/ib``, ``nvidia.com/rdma_ib``).
    rdma_resource: Annotated[str, AfterValidator(lambda v: check_qualified_name(v, "resource name"))] | None = None
    #: How many of ``rdmaResource`` one pod asks for: 1 for a shared-device plugin; one per rail for SR-IOV.
    rdma_per_pod: Annotated[int, Field(ge=1, le=64)] = 1
    #: The HCAs NCCL uses (``NCCL_IB_HCA``), in rail order; ``mlx5_0:1`` names a port.
    hcas: Annotated[list[Annotated[str, AfterValidator(_hca)]], Field(max_length=64)] = []
    #: The interface NCCL's bootstrap and the launcher's rendezvous use (``NCCL_SOCKET_IFNAME``).
    socket_interface: Annotated[str, Field(pattern=_IFNAME.pattern)] | None = None
    #: RoCE's GID index (``NCCL_IB_GID_INDEX``, 3 for RoCE v2 on IPv4 on most NICs); InfiniBand has none.
    gid_index: Annotated[int, Field(ge=0, le=255)] | None = None
    #: Pod annotations the fabric needs, such as Multus's ``k8s.v1.cni.cncf.io/networks`` for SR-IOV rails.
    pod_annotations: dict[str, str] = {}
    #: Size of the memory-backed /dev/shm (counts against the pod's memory).
    shm_size: Annotated[str, AfterValidator(_quantity)] = DEFAULT_SHM_SIZE
    #: Further NCCL settings (``NCCL_*`` only), after the ones above.
    nccl_env: dict[str, str] = {}

    @field_validator("pod_annotations")
    @classmethod
    def _annotations(cls, v: dict[str, str]) -> dict[str, str]:
        for key in v:
            check_qualified_name(key, "annotation key")
        return v

    @field_validator("nccl_env")
    @classmethod
    def _nccl(cls, v: dict[str, str]) -> dict[str, str]:
        for key in v:
            if not _NCCL_NAME.match(key):
                raise ValueError(f"{shown(key)} is not an NCCL setting (NCCL_ and upper-case letters, digits, '_')")
        return v

    @model_validator(mode="after")
    def _rdma_needs_devices(self) -> Fabric:
        if self.kind in RDMA_FABRICS:
            missing = [name for name, value in (("rdmaResource", self.rdma_resource), ("hcas", self.hcas)) if not value]
            if missing:
                raise ValueError(
                    f"a {self.kind} fabric needs {' and '.join(missing)}: without the RDMA devices in the pod and "
                    "the HCAs named, NCCL runs over TCP sockets or fails"
                )
            if self.kind == "roce" and self.gid_index is None:
                raise ValueError("a roce fabric needs gidIndex (NCCL_IB_GID_INDEX; 3 for RoCE v2 on most NICs)")
            if self.kind == "infiniband" and self.gid_index is not None:
                raise ValueError("gidIndex is RoCE's; an infiniband fabric routes by LID and has none")
        elif self.rdma_resource or self.hcas or self.gid_index is not None:
            raise ValueError("an ethernet fabric has no rdmaResource, hcas or gidIndex (NCCL runs over sockets)")
        return self

    @property
    def rdma(self) -> bool:
        return self.kind in RDMA_FABRICS

    def nccl_settings(self) -> dict[str, str]:
        """The NCCL environment this fabric gives a training container (before the job's own ``env``)."""
        env: dict[str, str] = {}
        if self.rdma:
            env["NCCL_IB_HCA"] = "=" + ",".join(self.hcas)
            if self.gid_index is not None:
                env["NCCL_IB_GID_INDEX"] = str(self.gid_index)
        else:
            env["NCCL_IB_DISABLE"] = "1"
        if self.socket_interface:
            env["NCCL_SOCKET_IFNAME"] = self.socket_interface
        return env | dict(self.nccl_env)


#: What every series of the fabric exporter begins with (``daemons/fabric_exporter/``).
METRICS_PREFIX = "gpucluster_fabric"
