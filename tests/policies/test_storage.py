"""checkpoint-claims-rwx: checkpoint claims are ReadWriteMany on a retained parallel filesystem."""

from __future__ import annotations

from pulumi_policy import (
    PolicyResource,
)

from policies.storage import checkpoint_claims_rwx
from tests.policies.support import (
    check_stack,
    resource,
)


def _class(reclaim: str = "Retain") -> PolicyResource:
    props = {
        "metadata": {"name": "lustre", "labels": {"gpucluster.io/storage-driver": "lustre"}},
        "reclaimPolicy": reclaim,
    }
    return resource("kubernetes:storage.k8s.io/v1:StorageClass", props, "lustre")


def _claim(modes: list[str], cls: str = "lustre") -> PolicyResource:
    props = {
        "metadata": {"name": "checkpoints", "namespace": "team-a", "labels": {"gpucluster.io/claim": "checkpoints"}},
        "spec": {"accessModes": modes, "storageClassName": cls},
    }
    return resource("kubernetes:core/v1:PersistentVolumeClaim", props, "ckpt")


def test_checkpoint_claims_rwx_on_parallel_fs() -> None:
    assert check_stack(checkpoint_claims_rwx, [_class(), _claim(["ReadWriteMany"])]) == []
    (rwo,) = check_stack(checkpoint_claims_rwx, [_class(), _claim(["ReadWriteOnce"])])
    assert "team-a/checkpoints has accessModes ['ReadWriteOnce']" in rwo
    (wrong_class,) = check_stack(checkpoint_claims_rwx, [_class(), _claim(["ReadWriteMany"], "standard")])
    assert "not a parallel-filesystem class" in wrong_class
    (deleted,) = check_stack(checkpoint_claims_rwx, [_class("Delete"), _claim(["ReadWriteMany"])])
    assert "not Retain" in deleted
