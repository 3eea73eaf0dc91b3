"""The checkpoint cadence's arithmetic: Young/Daly's interval and the ETTR the first-order model predicts."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from contract.storage_settings import Checkpointing, StorageSettings, checkpoint_interval_seconds, predicted_ettr

HOUR = 3600.0


def test_krea_figures_give_an_interval_in_their_20_to_30_minute_range() -> None:
    # 1 TB written in 30 s, one interruption every 8 h.
    minutes = checkpoint_interval_seconds(30.0, 8 * HOUR) / 60.0
    assert 20.0 <= minutes <= 30.0
    assert minutes == pytest.approx(21.9, abs=0.05)


def test_young_daly_interval_beats_a_fixed_two_hours_at_the_same_failure_rate() -> None:
    tau = checkpoint_interval_seconds(30.0, 8 * HOUR)
    assert predicted_ettr(tau, 30.0, 8 * HOUR, 300.0) > predicted_ettr(2 * HOUR, 30.0, 8 * HOUR, 300.0) + 0.05


def test_young_daly_interval_is_the_optimum_of_the_model_without_restart_cost() -> None:
    tau = checkpoint_interval_seconds(30.0, 8 * HOUR)
    best = predicted_ettr(tau, 30.0, 8 * HOUR, 0.0)
    for factor in (0.5, 0.8, 1.25, 2.0):
        assert predicted_ettr(tau * factor, 30.0, 8 * HOUR, 0.0) < best


def test_no_failures_costs_only_the_writes() -> None:
    assert predicted_ettr(600.0, 60.0, math.inf, 0.0) == pytest.approx(600.0 / 660.0)


def test_a_restart_longer_than_the_mtbf_keeps_nothing() -> None:
    assert predicted_ettr(600.0, 30.0, 100.0, 200.0) == 0.0


@pytest.mark.parametrize(
    ("interval", "write", "mtbf", "restart"),
    [(0.0, 30.0, HOUR, 0.0), (600.0, -1.0, HOUR, 0.0), (600.0, 30.0, 0.0, 0.0), (600.0, 30.0, HOUR, -5.0)],
)
def test_bad_inputs_are_refused(interval: float, write: float, mtbf: float, restart: float) -> None:
    with pytest.raises(ValueError, match="positive"):
        predicted_ettr(interval, write, mtbf, restart)


def test_the_prior_is_stated_for_a_job_size_and_read_per_node() -> None:
    per_node = Checkpointing.model_validate({"mtbfHours": 8})
    assert per_node.node_mtbf_seconds() == 8 * HOUR
    assert per_node.job_mtbf_seconds(64) == 8 * HOUR / 64
    big_job = Checkpointing.model_validate({"mtbfHours": 8, "mtbfJobNodes": 256})
    assert big_job.node_mtbf_seconds() == 2048 * HOUR
    assert big_job.job_mtbf_seconds(256) == 8 * HOUR


@pytest.mark.parametrize(("field", "value"), [("mtbfJobNodes", 0), ("mtbfJobNodes", 100_001), ("mtbfHours", 1e308)])
def test_a_prior_out_of_range_is_refused_naming_the_field(field: str, value: float) -> None:
    with pytest.raises(ValidationError, match=field):
        Checkpointing.model_validate({field: value})
    Checkpointing.model_validate({field: 1})


# --- CephFS (ceph-csi) ------------------------------------------------------------------------------------------

CEPH = {
    "clusterID": "b9127830-b0cc-4e34-aa47-9d1a2e9949a8",
    "fsName": "ckpt",
    "provisionerSecret": {"name": "csi-cephfs-provisioner", "namespace": "ceph-csi"},
    "nodeSecret": {"name": "csi-cephfs-node", "namespace": "ceph-csi"},
}
CEPHFS = {"driver": "cephfs", "provisioner": "cephfs.csi.ceph.com", "ceph": CEPH}


def test_cephfs_gives_ceph_csi_its_cluster_filesystem_and_secrets() -> None:
    dynamic = StorageSettings.model_validate(CEPHFS)
    assert dynamic.ceph is not None
    assert dynamic.ceph.storage_class_parameters() == {
        "clusterID": CEPH["clusterID"],
        "fsName": "ckpt",
        "csi.storage.k8s.io/provisioner-secret-name": "csi-cephfs-provisioner",
        "csi.storage.k8s.io/provisioner-secret-namespace": "ceph-csi",
        "csi.storage.k8s.io/controller-expand-secret-name": "csi-cephfs-provisioner",
        "csi.storage.k8s.io/controller-expand-secret-namespace": "ceph-csi",
        "csi.storage.k8s.io/node-stage-secret-name": "csi-cephfs-node",
        "csi.storage.k8s.io/node-stage-secret-namespace": "ceph-csi",
    }
    rook = {**CEPHFS, "provisioner": "rook-ceph.cephfs.csi.ceph.com", "mode": "static", "volumeHandlePrefix": "/gpu"}
    static = StorageSettings.model_validate(rook)
    assert static.ceph is not None
    assert static.ceph.static_volume_attributes("/gpu/team-a/checkpoints") == {
        "clusterID": CEPH["clusterID"],
        "fsName": "ckpt",
        "staticVolume": "true",
        "rootPath": "/gpu/team-a/checkpoints",
    }


@pytest.mark.parametrize(
    ("change", "where", "words"),
    [
        ({"ceph": None}, "ceph", "driver cephfs needs it"),
        ({"driver": "lustre", "provisioner": "lustre.csi.example.com"}, "ceph", "only applies to driver cephfs"),
        ({"provisioner": "nfs.csi.k8s.io"}, "provisioner", "ceph-csi's"),
        ({"parameters": {"fsName": "other"}}, "parameters.fsName", "is set from ceph"),
        ({"mode": "static", "volumeHandlePrefix": "gpu/teams"}, "volumeHandlePrefix", "an absolute path"),
        ({"mode": "static", "volumeHandlePrefix": "/gpu/../etc"}, "volumeHandlePrefix", "an absolute path"),
        ({"ceph": {**CEPH, "fsName": "ckpt fs"}}, "ceph.fsName", "letters, digits"),
        ({"ceph": {**CEPH, "clusterID": ""}}, "ceph.clusterID", "letters, digits"),
        (
            {"ceph": {**CEPH, "nodeSecret": {"name": "Node_Secret", "namespace": "ceph-csi"}}},
            "ceph.nodeSecret.name",
            "",
        ),
        ({"ceph": {k: v for k, v in CEPH.items() if k != "provisionerSecret"}}, "ceph.provisionerSecret", "required"),
    ],
)
def test_a_cephfs_setting_that_ceph_csi_could_not_use_is_refused_at_its_key(
    change: dict[str, object], where: str, words: str
) -> None:
    doc = {k: v for k, v in {**CEPHFS, **change}.items() if v is not None}
    with pytest.raises(ValidationError) as refused:
        StorageSettings.model_validate(doc)
    errors = refused.value.errors()
    assert where in {".".join(str(p) for p in e["loc"]) for e in errors}, errors
    assert any(words in e["msg"] for e in errors), errors
