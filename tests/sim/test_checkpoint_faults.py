"""sim/checkpoint_faults.py's save: what the fake trainer writes is a checkpoint the verifier passes, the newest
under the job's directory, the oldest beyond ``keep`` gone, and a named corruption caught as its class."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemons.checkpoint_verifier.check import newest_checkpoint
from daemons.checkpoint_verifier.files import read_listing
from daemons.checkpoint_verifier.verify import judge
from sim.checkpoint_faults import CORRUPTIONS, save_checkpoint


def test_a_save_is_a_verified_checkpoint_and_keeps_the_newest(tmp_path: Path) -> None:
    job = tmp_path / "llm"
    for step in (10, 20, 30, 40):
        save_checkpoint(job, step, keep=2)
    assert sorted(p.name for p in job.iterdir()) == ["step-30", "step-40"]
    newest = newest_checkpoint(job)
    assert newest == job / "step-40"
    verdict = judge(read_listing(newest), last_verified=30)
    assert verdict.ok, verdict.summary()
    assert verdict.hashed == 3  # the manifest names every file: hashed, not only sized
    save_checkpoint(job, 40, keep=2)  # written again: still one, still good
    assert judge(read_listing(job / "step-40"), last_verified=30).ok


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_a_save_spoilt_by_a_corruption_is_refused_as_its_class(tmp_path: Path, corruption: str) -> None:
    saved = save_checkpoint(tmp_path / "llm", 50, corruption=corruption)
    verdict = judge(read_listing(saved), last_verified=None)
    assert CORRUPTIONS[corruption][1] in {str(f.problem) for f in verdict.findings}, verdict.summary()
