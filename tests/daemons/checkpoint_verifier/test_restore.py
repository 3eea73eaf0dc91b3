"""A restore drill's load (``restore.py``) and its command (``drill.py``), held to the checkpoints torch 2.15.0's own
``dcp.save`` wrote (``tests/fixtures/dcp/``): every good one restores whole, every corruption the check catches is
refused here too, and what the check cannot see (a flipped byte with no manifest) is refused only here."""

from __future__ import annotations

import io
import json
import os
import pickle
import shutil
import struct
import zipfile
from pathlib import Path

import pytest

from contract.checkpoint_record import read_drill_verdict
from daemons.checkpoint_verifier import drill
from daemons.checkpoint_verifier.check import main as check_main
from daemons.checkpoint_verifier.restore import Problem, Reads, restore
from sim.checkpoint_faults import CAPTURED, CORRUPTIONS, SILENT

#: Every tensor and object each captured checkpoint holds (``capture.py``).
RECORDS = {"step-100": 8, "step-200": 5, "step-300": 5}


def copy(tmp_path: Path, step: str = "step-100") -> Path:
    return Path(shutil.copytree(CAPTURED / step, tmp_path / "job" / step))


@pytest.mark.parametrize("step", sorted(RECORDS))
def test_every_checkpoint_torch_wrote_restores_whole(step: str) -> None:
    restored = restore(CAPTURED / step)
    assert restored.ok, restored.findings
    assert (restored.read, restored.records) == (RECORDS[step], RECORDS[step])
    assert restored.step == int(step.split("-")[1])
    files = sum(p.stat().st_size for p in (CAPTURED / step).iterdir())
    # every record's bytes are read: all of each file but the ZIP framing zipfile seeks past
    assert 0.9 * files <= restored.bytes_read <= files


@pytest.mark.parametrize("name", sorted(set(CORRUPTIONS) - {"stale step", "partial directory", "hash mismatch"}))
def test_what_the_check_refuses_in_the_shards_or_metadata_does_not_restore(tmp_path: Path, name: str) -> None:
    directory = copy(tmp_path)
    corrupt, _problem = CORRUPTIONS[name]
    corrupt(directory)
    restored = restore(directory)
    assert not restored.ok, name
    assert restored.findings[0].problem in {
        Problem.MISSING_SHARD,
        Problem.TRUNCATED_SHARD,
        Problem.UNREADABLE_METADATA,
    }


def test_a_flipped_byte_with_no_manifest_passes_the_check_and_fails_the_restore(tmp_path: Path) -> None:
    directory = copy(tmp_path)
    corrupt, problem = SILENT["bit rot without a manifest"]
    corrupt(directory)
    assert check_main([str(directory)]) == 0  # sizes are right and DCP writes no hash: the check cannot see it
    restored = restore(directory)
    assert [str(f.problem) for f in restored.findings] == [problem]
    assert "CRC-32" in restored.findings[0].detail
    assert restored.read == RECORDS["step-100"] - 1


def _records(data: bytes) -> list[tuple[int, zipfile.ZipFile]]:
    out, start = [], 0
    while (start := data.find(b"PK\x03\x04", start)) >= 0:
        out.append((start, zipfile.ZipFile(io.BytesIO(data[start:]))))
        start += 4
    return out


def test_a_tensor_whose_pickle_names_anything_else_is_refused_and_never_run(tmp_path: Path) -> None:
    """A tensor record rewritten so its data.pkl calls os.mkdir: refused by name, and the directory never made."""
    directory = copy(tmp_path, "step-200")
    shard = directory / "__0_0.distcp"
    data = bytearray(shard.read_bytes())
    # model.embed.weight's record (the metadata's offset 2522, length 1705) rewritten with a hostile pickle
    record = bytes(data[2522 : 2522 + 1705])
    target = tmp_path / "made-by-the-pickle"
    evil = pickle.dumps(_Mkdir(str(target)), protocol=2)
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(record)) as old, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as new:
        for info in old.infolist():
            new.writestr(info.filename, evil if info.filename.endswith("data.pkl") else old.read(info))
    rewritten = out.getvalue()
    # pad to the same length so the metadata's offsets still hold (a ZIP comment takes the difference)
    assert len(rewritten) <= len(record)
    padded = rewritten[:-2] + struct.pack("<H", len(record) - len(rewritten)) + b"\0" * (len(record) - len(rewritten))
    data[2522 : 2522 + 1705] = padded
    shard.write_bytes(bytes(data))
    restored = restore(directory)
    assert [f.problem for f in restored.findings] == [Problem.WRONG_TENSOR]
    assert "names posix.mkdir" in restored.findings[0].detail
    assert not target.exists()


class _Mkdir:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.mkdir, (self.path,))


def test_a_record_of_another_dtype_than_the_metadata_says_is_refused(tmp_path: Path) -> None:
    """The metadata edited to say the bf16 embedding is quint4x2 (a name of the same length, so the pickle's frames
    still hold): its record, whole and unchanged, is not what the metadata names."""
    directory = copy(tmp_path, "step-200")
    metadata = (directory / ".metadata").read_bytes()
    assert metadata.count(b"bfloat16") == 1
    (directory / ".metadata").write_bytes(metadata.replace(b"bfloat16", b"quint4x2"))
    restored = restore(directory)
    assert [f.problem for f in restored.findings] == [Problem.WRONG_TENSOR]
    assert "'model.embed.weight'" in restored.findings[0].detail
    assert "it holds bfloat16, the metadata says quint4x2" in restored.findings[0].detail


def test_the_drill_command_prints_and_leaves_a_short_verdict_the_controller_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "termination-log"
    assert drill.main([str(CAPTURED / "step-100"), "--termination-log", str(log)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["ok"]
    assert printed["read"] == 8
    verdict = read_drill_verdict(log.read_text())
    assert verdict is not None
    assert (verdict.ok, verdict.step, verdict.directory) == (True, 100, "step-100")
    assert verdict.bytes_read == printed["bytes"] > 0
    directory = copy(tmp_path)
    SILENT["bit rot without a manifest"][0](directory)
    assert drill.main([str(directory), "--termination-log", str(log)]) == 1
    capsys.readouterr()
    verdict = read_drill_verdict(log.read_text())
    assert verdict is not None
    assert (verdict.ok, verdict.problems) == (False, ("corrupt-item",))
    assert len(log.read_bytes()) < 4096


def test_a_directory_that_cannot_be_read_is_exit_2_with_no_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert drill.main([str(tmp_path / "absent")]) == 2
    err = capsys.readouterr().err
    assert "is not a directory this pod can read" in err
    assert "Traceback" not in err


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_a_paced_restore_reads_no_faster_than_its_rate_and_an_unpaced_one_never_waits() -> None:
    clock = _Clock()
    paced = Reads(bytes_per_second=1000.0, clock=clock, sleep=clock.sleep)
    restored = restore(CAPTURED / "step-100", paced)
    assert restored.ok
    assert paced.total == restored.bytes_read
    # every read is read instantly on this clock: the waits alone bring the average down to the rate
    assert clock.now == pytest.approx(restored.bytes_read / 1000.0)
    assert paced.slept == pytest.approx(clock.now)
    fast = _Clock()
    unpaced = Reads(clock=fast, sleep=fast.sleep)
    assert restore(CAPTURED / "step-100", unpaced).ok
    assert (fast.now, unpaced.slept) == (0.0, 0.0)


@pytest.mark.parametrize("rate", ["0", "fast", "-5"])
def test_a_rate_that_is_no_rate_is_refused_by_name(rate: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        drill.main([str(CAPTURED / "step-100"), "--max-read-mbps", rate])
    assert exit_.value.code == 2
    assert "--max-read-mbps" in capsys.readouterr().err
