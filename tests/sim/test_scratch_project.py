"""The one scratch Pulumi project that make policy and make render run the engine in (sim/scratch_project.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.support.sim import load_sim_module

ROOT = Path(__file__).resolve().parents[2]
scratch = load_sim_module("scratch_project")
STACKS = sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in (ROOT / "stacks").glob("Pulumi.*.yaml"))


@pytest.mark.parametrize("stack", STACKS)
def test_the_project_runs_the_repository_program_and_renders(stack: str, tmp_path: Path) -> None:
    src = ROOT / "stacks" / f"Pulumi.{stack}.yaml"
    before = src.read_bytes()
    out = scratch.write(tmp_path / "work", src, stack, tmp_path / "rendered")
    project = yaml.safe_load((tmp_path / "work" / "Pulumi.yaml").read_text())
    repo = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())
    assert project["main"] == str(ROOT)
    assert project["stackConfigDir"] == "stacks"
    assert project["runtime"] == {"name": "python", "options": {"virtualenv": str(ROOT / ".venv")}}
    assert {k: v for k, v in project.items() if k not in ("main", "runtime")} == {
        k: v for k, v in repo.items() if k != "runtime"
    }
    assert out == tmp_path / "work" / "stacks" / f"Pulumi.{stack}.yaml"
    copied = yaml.safe_load(out.read_text())
    original = yaml.safe_load(before)
    assert copied["config"].pop("kubernetes:renderYamlToDirectory") == str(tmp_path / "rendered")
    assert copied == original
    assert src.read_bytes() == before, "the stack file must never be modified"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("config: [unclosed", "the stack file is not YAML (line 1)"),
        ("- a list\n", "the stack file is not a mapping"),
        ("encryptionsalt: x\n", "the stack file has no config mapping"),
    ],
)
def test_a_stack_file_it_cannot_use_is_refused_naming_it(
    content: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "Pulumi.bad.yaml"
    bad.write_text(content)
    args = ["--work", str(tmp_path / "w"), "--stack-file", str(bad), "--stack", "bad", "--render-dir", str(tmp_path)]
    assert scratch.main(args) == 2
    assert capsys.readouterr().err == f"sim/scratch_project.py: {bad}: {message}\n"
    assert not (tmp_path / "w" / "Pulumi.yaml").exists()


def test_a_stack_name_that_is_a_path_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = str(ROOT / "stacks" / "Pulumi.dev.yaml")
    args = ["--work", str(tmp_path), "--stack-file", src, "--stack", "../dev", "--render-dir", str(tmp_path)]
    assert scratch.main(args) == 2
    assert "is not a stack name" in capsys.readouterr().err
