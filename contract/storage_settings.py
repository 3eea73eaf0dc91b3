"""Settings of the storage room (``components/storage.py``): ``gpucluster:storage`` and the checkpoint cadence.

A parallel filesystem reached through its CSI driver; one RWX ``checkpoints`` and ``datasets`` claim per team
namespace; and the inputs of the Young/Daly checkpoint interval (:func:`checkpoint_interval_seconds`).
"""

from __future__ import annotations

import math
import posixpath
import re
from collections.abc import Iterator
from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from contract.model import ByteQuantity, ConfigModel, DnsLabel, DnsSubdomain, Problem

StorageDriver = Literal["lustre", "weka", "vast", "gpfs", "nfs", "cephfs"]

#: Parameters each driver's StorageClass cannot work without (dynamic provisioning).
DRIVER_PARAMETERS: dict[str, tuple[str, ...]] = {"nfs": ("server", "share")}


_CEPH_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def _ceph_name(value: str) -> str:
    if not _CEPH_NAME.match(value):
        raise ValueError("letters, digits, '.', '_' and '-', starting with a letter or digit, at most 128")
    return value


CephName = Annotated[str, AfterValidator(_ceph_name)]
#: ceph-csi's drivers for CephFS: its own deployment's, or Rook's ``<operator namespace>.cephfs.csi.ceph.com``.
CEPHFS_PROVISIONER = re.compile(r"^([a-z0-9-]+\.)?cephfs\.csi\.ceph\.com$")


class SecretRef(ConfigModel):
    """A Secret the CSI driver reads (ceph-csi: ``userID``/``userKey``, or ``adminID``/``adminKey``)."""

    name: DnsSubdomain
    namespace: DnsLabel


class CephSettings(ConfigModel):
    """CephFS through ceph-csi: which Ceph cluster and filesystem, and the Secrets holding its Ceph users' keys.

    The StorageClass (dynamic) and each static PersistentVolume get from here what ceph-csi reads: ``clusterID`` and
    ``fsName``; the provisioner's Secret (creating and expanding subvolumes: an admin or a user with the ``fs
    subvolume`` caps) and the node's (mounting them). A static volume's ``rootPath`` is its volume handle
    (``<volumeHandlePrefix>/<namespace>/<claim>``: a directory or subvolume path in the filesystem).
    """

    #: The key of the cluster in ceph-csi's config map (the cluster's fsid, or Rook's namespace).
    cluster_id: CephName = Field(alias="clusterID")
    fs_name: CephName
    provisioner_secret: SecretRef
    node_secret: SecretRef

    def storage_class_parameters(self) -> dict[str, str]:
        prov, node = self.provisioner_secret, self.node_secret
        return {
            "clusterID": self.cluster_id,
            "fsName": self.fs_name,
            "csi.storage.k8s.io/provisioner-secret-name": prov.name,
            "csi.storage.k8s.io/provisioner-secret-namespace": prov.namespace,
            "csi.storage.k8s.io/controller-expand-secret-name": prov.name,
            "csi.storage.k8s.io/controller-expand-secret-namespace": prov.namespace,
            "csi.storage.k8s.io/node-stage-secret-name": node.name,
            "csi.storage.k8s.io/node-stage-secret-namespace": node.namespace,
        }

    def static_volume_attributes(self, root_path: str) -> dict[str, str]:
        return {"clusterID": self.cluster_id, "fsName": self.fs_name, "staticVolume": "true", "rootPath": root_path}


class Claim(ConfigModel):
    #: A whole number of bytes, such as 50Ti.
    size: ByteQuantity
    read_only: bool = False


class Checkpointing(ConfigModel):
    """Inputs of the Young/Daly checkpoint cadence.

    ``mtbfHours`` is the prior: the mean time between interruptions of a job of ``mtbfJobNodes`` nodes (1: per
    node). Failures of independent nodes add up, so a job of N nodes is interrupted N / ``mtbfJobNodes`` times as
    often; the measured reliability (node-seconds per interruption) is scaled to the job the same way.
    """

    size_tb: Annotated[float, Field(gt=0, le=1e6)] = 1.0
    write_seconds: Annotated[float, Field(gt=0, le=86400)] = 30.0
    mtbf_hours: Annotated[float, Field(gt=0, le=1e6)] = 8.0
    mtbf_job_nodes: Annotated[int, Field(ge=1, le=100_000)] = 1

    def node_mtbf_seconds(self) -> float:
        """The prior per node: node-seconds per interruption."""
        return self.mtbf_hours * 3600.0 * self.mtbf_job_nodes

    def job_mtbf_seconds(self, nodes: int) -> float:
        """The prior for a job of ``nodes`` nodes."""
        return self.node_mtbf_seconds() / nodes


class StorageSettings(ConfigModel):
    """A parallel filesystem reached through its CSI driver; one RWX checkpoint and dataset claim per team."""

    driver: StorageDriver
    provisioner: Annotated[str, Field(min_length=3)]
    mode: Literal["dynamic", "static"] = "dynamic"
    storage_class_name: DnsLabel = "parallel-fs"
    parameters: dict[str, str] = {}
    mount_options: list[str] = []
    #: static mode: the CSI volumeHandle of each PV is ``<volumeHandlePrefix>/<namespace>/<claim>``.
    volume_handle_prefix: str | None = None
    volume_attributes: dict[str, str] = {}
    checkpoints: Claim = Claim(size="50Ti")
    datasets: Claim = Claim(size="200Ti", read_only=True)
    checkpointing: Checkpointing = Checkpointing()
    #: driver cephfs: the Ceph cluster, filesystem and Secrets (and only then).
    ceph: CephSettings | None = None

    def rule_problems(self) -> Iterator[Problem]:
        if self.driver == "cephfs":
            yield from self._ceph_problems()
        elif self.ceph is not None:
            yield Problem(("ceph",), f"only applies to driver cephfs, not {self.driver}", None)
        yield from super().rule_problems()

    def _ceph_problems(self) -> Iterator[Problem]:
        if self.ceph is None:
            yield Problem(("ceph",), "driver cephfs needs it: clusterID, fsName, provisionerSecret, nodeSecret", None)
            return
        if not CEPHFS_PROVISIONER.match(self.provisioner):
            yield Problem(
                ("provisioner",),
                "driver cephfs is ceph-csi's: cephfs.csi.ceph.com, or Rook's <namespace>.cephfs.csi.ceph.com",
                self.provisioner,
            )
        # One home for each: ceph sets them, the free-form maps may not say them again.
        for key in sorted(set(self.parameters) & set(self.ceph.storage_class_parameters())):
            yield Problem(("parameters", key), "is set from ceph: say it there", self.parameters[key])
        for key in sorted(set(self.volume_attributes) & set(self.ceph.static_volume_attributes("/"))):
            yield Problem(("volumeAttributes", key), "is set from ceph: say it there", self.volume_attributes[key])
        prefix = self.volume_handle_prefix
        if (
            self.mode == "static"
            and prefix is not None
            and not (posixpath.isabs(prefix) and ".." not in prefix.split("/"))
        ):
            yield Problem(
                ("volumeHandlePrefix",),
                "driver cephfs: an absolute path in the filesystem (each claim's rootPath is under it)",
                prefix,
            )


def checkpoint_interval_seconds(write_seconds: float, mtbf_seconds: float) -> float:
    """Young/Daly first-order optimum: sqrt(2 x checkpoint write time x mean time between failures)."""
    if write_seconds <= 0 or mtbf_seconds <= 0:
        raise ValueError("write time and MTBF must both be positive")
    return math.sqrt(2.0 * write_seconds * mtbf_seconds)


def predicted_ettr(interval_seconds: float, write_seconds: float, mtbf_seconds: float, restart_seconds: float) -> float:
    """Effective training time ratio the first-order model predicts (the share of wall time that is kept work).

    Checkpointing every ``interval_seconds`` of work costs ``write_seconds`` each time, so at most
    ``interval / (interval + write)`` of the time runs training. Each interruption (one per ``mtbf_seconds`` on
    average) costs the time to run again (``restart_seconds``) plus the work since the last checkpoint, half a
    cycle on average. Clamped to [0, 1].
    """
    if interval_seconds <= 0 or write_seconds < 0 or mtbf_seconds <= 0 or restart_seconds < 0:
        raise ValueError("interval and MTBF must be positive, write and restart times not negative")
    cycle = interval_seconds + write_seconds
    kept = interval_seconds / cycle * (1.0 - (restart_seconds + cycle / 2.0) / mtbf_seconds)
    return min(1.0, max(0.0, kept))
