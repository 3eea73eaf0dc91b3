"""``python -m components.config check``: one line per valid stack, saying what it runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from components.config.cli import main

ROOT = Path(__file__).resolve().parents[3]


def test_the_check_line_says_whether_make_before_break_is_on(capsys: pytest.CaptureFixture[str]) -> None:
    stacks = [str(ROOT / "stacks" / f"Pulumi.{name}.yaml") for name in ("prod", "local")]
    assert main(["check", *stacks]) == 0
    prod, local = capsys.readouterr().out.splitlines()
    assert prod.endswith(", make-before-break on (maxHold 10m))")
    assert local.endswith(", make-before-break off)")
