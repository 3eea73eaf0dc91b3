"""The one scratch Pulumi project that make policy and make render run the engine in (sim/scratch_project.py)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.sim import load_sim_module

# The tests share the scratch project's directories under .state: one worker runs them, one after another.
pytestmark = pytest.mark.xdist_group("scratch-project")

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


# --- the two scripts that run the engine in it, with a stand-in engine -------------------------------------------

PULUMI = """#!/bin/sh
echo "$(pwd) PULUMI_BACKEND_URL=$PULUMI_BACKEND_URL PULUMI_HOME=$PULUMI_HOME offline=${GPUCLUSTER_OFFLINE_CHARTS:-} \
pulumi $*" >>"$FAKE_TOOLS_LOG"
echo "${PULUMI_CONFIG_PASSPHRASE:-}" >>"$FAKE_TOOLS_LOG.passphrases"
if [ "$1" = up ]; then
  out="$(sed -n 's/^ *kubernetes:renderYamlToDirectory: //p' stacks/*.yaml)"
  mkdir -p "$out/1-manifest" && echo "kind: Namespace" >"$out/1-manifest/ns.yaml"
fi
exit 0
"""


@pytest.fixture
def engine(tmp_path: Path) -> dict[str, str]:
    """A scratch tool cache whose pulumi logs how it was called (and renders one manifest on up)."""
    bin_dir = tmp_path / "cache" / "tools" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("pulumi", "pulumi-language-python", "pulumi-language-python-exec", "pulumi-resource-kubernetes"):
        (bin_dir / name).write_text(PULUMI if name == "pulumi" else "#!/bin/sh\nexit 0\n")
        (bin_dir / name).chmod(0o755)
    # No simulated cluster answers this kubectl: the local stack's preview is the one that cannot run.
    (bin_dir / "kubectl").write_text("#!/bin/sh\nexit 1\n")
    (bin_dir / "kubectl").chmod(0o755)
    return {**os.environ, "GPUCLUSTER_CACHE": str(tmp_path / "cache"), "FAKE_TOOLS_LOG": str(tmp_path / "calls")}


def _calls(env: dict[str, str]) -> list[str]:
    return Path(env["FAKE_TOOLS_LOG"]).read_text().splitlines()


def test_make_policy_previews_offline_in_the_scratch_project(engine: dict[str, str]) -> None:
    proc = subprocess.run(
        ["bash", str(ROOT / "policies" / "preview-stacks.sh"), "dev"],
        capture_output=True,
        text=True,
        env=engine,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    work = ROOT / ".state" / "policy" / "dev"
    try:
        state = f"PULUMI_BACKEND_URL=file://{work}/state PULUMI_HOME={work}/pulumi-home"
        assert _calls(engine) == [
            f"{work} {state} offline= pulumi login --non-interactive file://{work}/state",
            f"{work} {state} offline= pulumi stack init --non-interactive dev",
            f"{work} {state} offline=1 pulumi preview --stack dev --non-interactive --suppress-progress --diff=false "
            f"--policy-pack {ROOT}/policies",
        ]
        stack = yaml.safe_load((work / "stacks" / "Pulumi.dev.yaml").read_text())
        assert stack["config"]["kubernetes:renderYamlToDirectory"] == f"{work}/rendered"
        assert (work / "rendered").is_dir()
        assert proc.stdout.splitlines()[-1] == "==> policy preview passed: dev"
    finally:
        shutil.rmtree(work, ignore_errors=True)
        with contextlib.suppress(OSError):
            work.parent.rmdir()


@pytest.mark.parametrize(("ci", "rc"), [("", 0), ("true", 1)])
def test_the_local_stack_without_the_simulated_cluster_skips_saying_so_and_fails_under_ci(
    engine: dict[str, str], ci: str, rc: int
) -> None:
    proc = subprocess.run(
        ["bash", str(ROOT / "policies" / "preview-stacks.sh"), "local"],
        capture_output=True,
        text=True,
        env={**engine, "CI": ci},
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == rc, proc.stdout + proc.stderr
    if rc == 0:
        assert "local: skipped" in proc.stderr
        assert proc.stdout.splitlines()[-1] == (
            "==> policy preview passed: none; skipped: local (the simulated cluster is not up)"
        )
    else:
        assert proc.stderr.splitlines()[-1] == (
            "preview-stacks.sh: error: policy preview failed for: local (CI=true and the simulated cluster is not "
            "up: run make up first)"
        )
    assert not Path(engine["FAKE_TOOLS_LOG"]).exists(), "nothing may be previewed without the cluster"


def test_make_render_updates_the_scratch_project_into_the_output_directory(
    engine: dict[str, str], tmp_path: Path
) -> None:
    out = tmp_path / "rendered" / "dev"
    proc = subprocess.run(
        [str(ROOT / "sim" / "render.sh"), "dev", str(out)],
        capture_output=True,
        text=True,
        env=engine,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    work = ROOT / ".state" / "render" / "dev"
    up = [c for c in _calls(engine) if " pulumi up " in c]
    assert up == [
        f"{work} PULUMI_BACKEND_URL=file://{work}/state PULUMI_HOME={work}/pulumi-home offline= pulumi up --stack dev "
        "--yes --non-interactive --skip-preview --suppress-progress --diff=false"
    ]
    assert (out / "1-manifest" / "ns.yaml").exists()
    assert proc.stdout.splitlines()[-1] == f"==> rendered 1 manifest(s) into {out} (1-manifest)"
    assert not work.exists(), "the scratch project is removed after rendering"
    with contextlib.suppress(OSError):
        work.parent.rmdir()


@pytest.mark.parametrize(("stack", "passphrase"), [("dev", "render-dev"), ("local", "gpucluster-local")])
def test_make_render_unseals_a_stack_file_with_its_own_passphrase(
    engine: dict[str, str], tmp_path: Path, stack: str, passphrase: str
) -> None:
    """A stack file without secrets gets a throwaway passphrase; the local one keeps its salt and sealed secret."""
    env = {k: v for k, v in engine.items() if k != "PULUMI_CONFIG_PASSPHRASE"}
    out = tmp_path / "rendered" / stack
    render = [str(ROOT / "sim" / "render.sh"), stack, str(out)]
    proc = subprocess.run(render, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stderr
    used = set(Path(engine["FAKE_TOOLS_LOG"] + ".passphrases").read_text().split())
    assert used == {passphrase}
