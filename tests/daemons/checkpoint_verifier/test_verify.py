"""The verdict on one checkpoint directory: every corruption class caught on a copy of a real DCP checkpoint
(torch 2.15.0's, ``tests/fixtures/dcp/``), each with the good checkpoint it was made from taken."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from contract.checkpoints import MANIFEST
from daemons.checkpoint_verifier.check import TERMINATION_MESSAGE_BYTES, main, termination_message
from daemons.checkpoint_verifier.files import read_listing
from daemons.checkpoint_verifier.verify import ManifestError, Problem, judge, read_manifest
from sim.checkpoint_faults import CAPTURED, CORRUPTIONS, write_manifest


def copy(tmp: Path, step: str = "step-100") -> Path:
    return Path(shutil.copytree(CAPTURED / step, tmp / step))


@pytest.mark.parametrize("step", ["step-100", "step-200", "step-300"])
def test_every_real_checkpoint_counts_with_and_without_a_manifest(tmp_path: Path, step: str) -> None:
    directory = copy(tmp_path, step)
    bare = judge(read_listing(directory), last_verified=None)
    assert bare.ok, bare.summary()
    assert bare.hashed == 0
    write_manifest(directory, int(step.split("-")[1]))
    hashed = judge(read_listing(directory), last_verified=int(step.split("-")[1]) - 1)
    assert hashed.ok, hashed.summary()
    assert hashed.hashed == len(list(directory.iterdir())) - 1


def _shard_is_a_link(d: Path) -> None:
    (d / "__1_0.distcp").rename(d.parent / "elsewhere")
    (d / "__1_0.distcp").symlink_to(d.parent / "elsewhere")


#: Every class ``make bench`` injects (``sim/checkpoint_faults.py``), and two more of the reader's and manifest's.
CLASSES: dict[str, tuple[Callable[[Path], None], str]] = {
    **CORRUPTIONS,
    "a shard that is a symbolic link": (_shard_is_a_link, "missing-shard"),
    "an unreadable manifest": (lambda d: (d / MANIFEST).write_text("{"), "unreadable-manifest"),
}


@pytest.mark.parametrize("corruption", list(CLASSES))
def test_each_corruption_is_caught_as_its_class(tmp_path: Path, corruption: str) -> None:
    spoil, problem = CLASSES[corruption]
    directory = copy(tmp_path)
    assert judge(read_listing(directory), last_verified=None).ok
    spoil(directory)
    verdict = judge(read_listing(directory), last_verified=None)
    assert not verdict.ok
    assert problem in {str(f.problem) for f in verdict.findings}, verdict.summary()
    assert "refused" in verdict.summary()


@pytest.mark.parametrize(("last", "ok"), [(None, True), (99, True), (100, False), (150, False)])
def test_a_step_counts_only_when_newer_than_the_last_verified(tmp_path: Path, last: int | None, ok: bool) -> None:
    verdict = judge(read_listing(copy(tmp_path)), last_verified=last)
    assert verdict.ok is ok
    if not ok:
        assert [f.problem for f in verdict.findings] == [Problem.STALE_STEP]


def test_a_directory_that_names_no_step_is_refused(tmp_path: Path) -> None:
    directory = Path(shutil.copytree(CAPTURED / "step-100", tmp_path / "latest"))
    verdict = judge(read_listing(directory), last_verified=None)
    assert [f.problem for f in verdict.findings] == [Problem.STALE_STEP]
    assert "'latest' names no step" in verdict.summary()


@pytest.mark.parametrize(
    ("doc", "words"),
    [
        ("[]", "is not a JSON object"),
        ('{"step": -1, "files": [{"path": "a", "size": 1, "sha256": "' + "0" * 64 + '"}]}', "step is -1"),
        ('{"step": 1, "files": []}', "files is not a list of files"),
        ('{"step": 1, "files": [{"path": "../a", "size": 1, "sha256": "' + "0" * 64 + '"}]}', r"files\[0\]\.path"),
        ('{"step": 1, "files": [{"path": "a", "size": true, "sha256": "' + "0" * 64 + '"}]}', r"files\[0\]\.size"),
        ('{"step": 1, "files": [{"path": "a", "size": 1, "sha256": "XYZ"}]}', r"files\[0\]\.sha256"),
    ],
)
def test_a_manifest_that_does_not_read_is_refused_naming_the_field(doc: str, words: str) -> None:
    with pytest.raises(ManifestError, match=words):
        read_manifest(doc.encode())


def test_the_command_prints_the_verdict_and_exits_by_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = copy(tmp_path)
    assert main([str(directory)]) == 0
    good = json.loads(capsys.readouterr().out)
    assert good["ok"] is True
    assert good["step"] == 100
    assert good["findings"] == []
    (directory / "__0_0.distcp").unlink()
    assert main([str(directory), "--last-verified-step", "50"]) == 1
    bad = json.loads(capsys.readouterr().out)
    assert bad["findings"] == [{"problem": "missing-shard", "detail": "__0_0.distcp (named by .metadata) is not there"}]
    assert main([str(tmp_path / "absent")]) == 2
    assert "is not a directory this pod can read" in capsys.readouterr().err


def test_hashing_on_several_workers_gives_the_same_hashes(tmp_path: Path) -> None:
    directory = copy(tmp_path)
    write_manifest(directory, 100)
    one, four = read_listing(directory), read_listing(directory, workers=4)
    assert one.hashes == four.hashes
    assert sorted(one.hashes) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    with pytest.raises(SystemExit) as refused:
        main([str(directory), "--workers", "0"])
    assert refused.value.code == 2


def test_newest_under_checks_the_highest_step_and_writes_a_short_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = tmp_path / "job"
    job.mkdir()
    for step in ("step-100", "step-200", "step-300"):
        copy(job, step)
    (job / "latest").mkdir()  # names no step: never the newest
    (job / "step-900.tmp-notes").write_text("a file, not a directory")
    log = tmp_path / "termination-log"
    assert main(["--newest-under", str(job), "--last-verified-step", "200", "--termination-log", str(log)]) == 0
    assert json.loads(capsys.readouterr().out)["step"] == 300
    short = json.loads(log.read_text())
    assert (short["ok"], short["step"], short["directory"], short["problems"]) == (True, 300, "step-300", [])
    # the same checkpoint is stale once it is the last verified one
    assert main(["--newest-under", str(job), "--last-verified-step", "300", "--termination-log", str(log)]) == 1
    assert json.loads(log.read_text())["problems"] == ["stale-step"]


def test_newest_under_an_empty_job_directory_is_a_verdict_not_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "termination-log"
    assert main(["--newest-under", str(tmp_path), "--termination-log", str(log)]) == 1
    assert json.loads(log.read_text())["problems"] == ["no-checkpoint"]
    assert "no directory under" in json.loads(capsys.readouterr().out)["summary"]


def test_the_termination_message_stays_under_the_kubelets_limit(tmp_path: Path) -> None:
    directory = copy(tmp_path)
    for shard in directory.glob("*.distcp"):
        shard.unlink()
    write_manifest(directory, 100)
    many = json.loads((directory / MANIFEST).read_text())
    many["files"] = [{"path": f"{'x' * 1000}-{i}", "size": 1, "sha256": "0" * 64} for i in range(200)]
    (directory / MANIFEST).write_text(json.dumps(many))
    verdict = judge(read_listing(directory), last_verified=None)
    assert len(verdict.summary()) > TERMINATION_MESSAGE_BYTES
    assert len(termination_message(verdict, 1.0).encode()) < TERMINATION_MESSAGE_BYTES


def test_a_check_that_cannot_write_its_termination_log_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = copy(tmp_path)
    assert main([str(directory), "--termination-log", str(tmp_path / "absent" / "log")]) == 2
    assert "cannot write" in capsys.readouterr().err
