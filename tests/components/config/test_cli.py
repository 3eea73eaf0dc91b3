"""``python -m components.config check``: one line per valid stack, saying what it runs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from components.config.cli import main

ROOT = Path(__file__).resolve().parents[3]


def test_the_check_line_says_whether_make_before_break_is_on(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    document = yaml.safe_load((ROOT / "stacks" / "Pulumi.local.yaml").read_text())
    document["config"]["gpucluster:makeBeforeBreak"]["enabled"] = False
    off = tmp_path / "Pulumi.off.yaml"
    off.write_text(yaml.safe_dump(document))
    stacks = [str(ROOT / "stacks" / f"Pulumi.{name}.yaml") for name in ("prod", "local")]
    assert main(["check", *stacks, str(off)]) == 0
    prod, local, turned_off = capsys.readouterr().out.splitlines()
    assert prod.endswith(", bursting configured but off, make-before-break off)")  # on only with bursting
    assert local.endswith(", make-before-break on (maxHold 60s))")
    assert turned_off.endswith(", make-before-break off)")
