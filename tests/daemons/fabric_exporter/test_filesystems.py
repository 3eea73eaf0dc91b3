"""The filesystem clients' statistics, held to real captured files: procfs's ``mountstats`` fixture (read from the Go
module cache) and lustre_exporter's llite ``stats`` (``tests/fixtures/filesystems/``, with their source)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from daemons.fabric_exporter.collectors import FilesystemCollector
from daemons.fabric_exporter.filesystems import parse_llite_stats, parse_mountstats
from tests.support.telemetry import LUSTRE_FIXTURE, llite_dirs, procfs_mountstats, start_exporter

LUSTRE = LUSTRE_FIXTURE


@pytest.fixture(scope="module")
def mountstats() -> str:
    return procfs_mountstats()


def test_procfs_mountstats_gives_the_nfs_export_its_bytes_and_rpcs(mountstats: str) -> None:
    mounts, problems = parse_mountstats(mountstats)
    assert problems == []
    (nfs,) = mounts  # rootfs, sysfs, proc and ext4 are no NFS client's
    assert (nfs.export, nfs.mountpoint, nfs.fstype) == ("192.168.1.1:/srv/test", "/mnt/nfs/test", "nfs4")
    assert (nfs.read_bytes, nfs.write_bytes, nfs.server_read_bytes) == (1207640230, 0, 1210214218)
    read = nfs.ops["READ"]
    assert (read.calls, read.transmissions, read.major_timeouts, read.bytes_received) == (1298, 1298, 0, 1210292152)
    assert (read.rtt_ms, read.execute_ms, read.errors) == (79386, 79407, None)  # 8 columns: no error count yet
    assert nfs.ops["WRITE"].calls == 0


def test_every_mount_of_one_export_is_one_series(mountstats: str) -> None:
    """The kubelet mounts a volume once per pod: the same export under many paths shares one client's counters."""
    block = mountstats[mountstats.index("device 192.168.1.1") :]
    again = block.replace("mounted on /mnt/nfs/test", "mounted on /var/lib/kubelet/pods/p2/volumes/ckpt/mount")
    mounts, problems = parse_mountstats(mountstats + again)
    assert problems == []
    assert [m.export for m in mounts] == ["192.168.1.1:/srv/test"]


@pytest.mark.parametrize(
    ("spoil", "words"),
    [
        (lambda t: t.replace("with fstype nfs4", "as nfs4"), "unreadable mount line"),
        (lambda t: re.sub(r"\tbytes:.*\n", "", t), "no bytes: line"),
        (lambda t: t.replace("bytes:\t1207640230", "bytes:\t12O7640230"), "is not a counter"),
        (lambda t: t.replace("bytes:\t1207640230 0 0 0", "bytes:\t1207640230"), "not 8"),
        (lambda t: t.replace("READ: 1298 1298", "READ: 1298 99999999999999999999999"), "beyond a 64-bit counter"),
    ],
    ids=["device-line", "no-bytes", "letter-in-counter", "short-bytes", "beyond-u64"],
)
def test_an_nfs_block_that_does_not_read_is_named_and_the_others_are_kept(
    mountstats: str, spoil: object, words: str
) -> None:
    other = "device 10.0.0.9:/ckpt mounted on /mnt/ckpt with fstype nfs statvers=1.1\n\tbytes:\t1 2 3 4 5 6 7 8\n"
    mounts, problems = parse_mountstats(spoil(mountstats) + other)  # type: ignore[operator]
    assert [m.export for m in mounts] == ["10.0.0.9:/ckpt"]
    assert len(problems) == 1
    assert words in problems[0].reason


@pytest.mark.parametrize(
    ("name", "read", "written", "opens"),
    [
        ("lustrefs-ffff88105db50000", 4194304, 93813797294080, 136),
        ("lustrefs-ffff88082d691000", 48567943168, 107462907658240, 10271),
    ],
)
def test_lustre_llite_stats_give_the_bytes_read_and_written(name: str, read: int, written: int, opens: int) -> None:
    stats = parse_llite_stats(name, (LUSTRE / f"{name}.stats").read_text())
    assert (stats.read_bytes, stats.write_bytes, stats.ops["open"]) == (read, written, opens)


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("write_bytes 5 samples [bytes]", "has no byte sum"),
        ("write_bytes 5 samples [bytes] 1 2 x", "is not a counter"),
        ("open 12", "is not '<op> <n> samples"),
    ],
)
def test_an_llite_line_that_does_not_read_is_refused_naming_it(line: str, words: str) -> None:
    text = (LUSTRE / "lustrefs-ffff88105db50000.stats").read_text() + line + "\n"
    with pytest.raises(ValueError, match=re.escape(words)):
        parse_llite_stats("lustrefs-x", text)


def _families(result: object) -> dict[str, dict[tuple[str, ...], float]]:
    return {f.name: dict(f.rows) for f in result.families}  # type: ignore[attr-defined]


def test_the_collector_serves_nfs_and_lustre_per_filesystem(tmp_path: Path, mountstats: str) -> None:
    (tmp_path / "mountstats").write_text(mountstats)
    llite = llite_dirs(tmp_path)
    collector = FilesystemCollector(
        str(tmp_path / "mountstats"), [str(llite), str(tmp_path / "absent")], {"node": "n0"}
    )
    result = collector.collect()
    assert result.problems == []
    assert result.devices == 3
    written = _families(result)["gpucluster_fabric_filesystem_write_bytes"]
    assert written[("lustre", "lustrefs-ffff88082d691000", "n0")] == 107462907658240
    assert written[("nfs4", "192.168.1.1:/srv/test", "n0")] == 0
    reads = _families(result)["gpucluster_fabric_filesystem_read_bytes"]
    assert reads[("nfs4", "192.168.1.1:/srv/test", "n0")] == 1207640230
    rtt = _families(result)["gpucluster_fabric_filesystem_rpc_rtt_seconds"]
    assert rtt[("nfs4", "192.168.1.1:/srv/test", "READ", "n0")] == pytest.approx(79.386)


def test_the_collector_names_what_it_cannot_read_and_serves_the_rest(tmp_path: Path) -> None:
    llite = tmp_path / "llite"
    (llite / "lustrefs-good").mkdir(parents=True)
    shutil.copy(LUSTRE / "lustrefs-ffff88105db50000.stats", llite / "lustrefs-good" / "stats")
    (llite / "lustrefs-bad").mkdir()
    (llite / "lustrefs-bad" / "stats").write_text("write_bytes 5 samples [bytes]\n")
    result = FilesystemCollector(str(tmp_path / "no-mountstats"), [str(llite)], {}).collect()
    assert sorted(p.kind for p in result.problems) == ["malformed", "unreadable"]
    assert result.devices == 1
    assert _families(result)["gpucluster_fabric_filesystem_write_bytes"] == {
        ("lustre", "lustrefs-good"): 93813797294080
    }


def test_the_exporter_process_serves_the_filesystem_series(tmp_path: Path, mountstats: str) -> None:
    """The real process with the flags the DaemonSet gives it (only the paths pointed at the captured files)."""
    (tmp_path / "mountstats").write_text(mountstats)
    (tmp_path / "llite" / "lustrefs-ffff88105db50000").mkdir(parents=True)
    shutil.copy(LUSTRE / "lustrefs-ffff88105db50000.stats", tmp_path / "llite" / "lustrefs-ffff88105db50000" / "stats")
    exp = start_exporter(
        "--collectors=filesystem",
        f"--mountstats={tmp_path / 'mountstats'}",
        f"--lustre-llite-dirs={tmp_path / 'llite'}",
        "--node-name=n1",
    )
    try:
        body = exp.get("/metrics")
    finally:
        code, _ = exp.stop()
    assert code == 0
    assert 'gpucluster_fabric_collector_success{collector="filesystem",node="n1"} 1\n' in body
    assert 'gpucluster_fabric_devices{collector="filesystem",node="n1"} 2\n' in body
    assert (
        'gpucluster_fabric_filesystem_write_bytes_total{filesystem="lustrefs-ffff88105db50000",fstype="lustre",'
        'node="n1"} 93813797294080\n' in body
    )
    assert (
        'gpucluster_fabric_filesystem_rpc_calls_total{filesystem="192.168.1.1:/srv/test",fstype="nfs4",node="n1",'
        'op="READ"} 1298\n' in body
    )
