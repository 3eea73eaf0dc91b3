"""sim/chart_pods.py: before ``pulumi up``, a stack whose Kueue or JobSet controller could not run on the simulated
cluster (off the real node, not tolerating it, or an image other than the one built here) is refused by key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from components.config import load_stack_file
from sim import chart_pods

ROOT = Path(__file__).resolve().parents[2]
LOCAL = ROOT / "stacks" / "Pulumi.local.yaml"


def _stack(tmp_path: Path, edit: Any) -> Any:
    doc = yaml.safe_load(LOCAL.read_text())
    edit(doc["config"])
    path = tmp_path / "Pulumi.edited.yaml"
    path.write_text(yaml.safe_dump(doc))
    return load_stack_file(path)


@pytest.mark.parametrize("stack", ["local", "bench:scale96", "bench:scale512", "bench:capacity96"])
def test_the_stacks_the_sim_deploys_pass(stack: str) -> None:
    path = ROOT / "benchmarks" / "stacks" / f"Pulumi.{stack[6:]}.yaml" if stack.startswith("bench:") else LOCAL
    config = load_stack_file(path)
    assert chart_pods.problems(config) == []
    assert {p.section for p in chart_pods.chart_pods(config) if p.placed} >= {"kueue", "jobset"}


def test_kueue_off_the_real_node_is_refused_by_its_key(tmp_path: Path) -> None:
    config = _stack(tmp_path, lambda c: c["gpucluster:kueue"].pop("podNodeSelector"))
    (problem,) = chart_pods.problems(config)
    assert problem.startswith("gpucluster:kueue.podNodeSelector does not select the real node")
    assert "nothing serves its webhooks" in problem


def test_jobset_not_tolerating_the_node_is_refused(tmp_path: Path) -> None:
    config = _stack(tmp_path, lambda c: c["gpucluster:jobset"].pop("podTolerations"))
    assert chart_pods.problems(config) == [
        "gpucluster:jobset.podTolerations does not tolerate the real node's taint sim.gpucluster.io/real-node "
        "(NoSchedule)"
    ]


def test_an_image_the_node_does_not_have_is_refused(tmp_path: Path) -> None:
    config = _stack(tmp_path, lambda c: c["gpucluster:kueue"].update(image="registry.k8s.io/kueue/kueue:v0.16.0"))
    (problem,) = chart_pods.problems(config)
    assert problem.startswith("gpucluster:kueue.image is registry.k8s.io/kueue/kueue:v0.16.0, but the real node has ")
    assert "registry.k8s.io/kueue/kueue:v0.17.0 alone" in problem


def test_the_descheduler_may_stay_off_the_node_where_a_process_stands_in(tmp_path: Path) -> None:
    config = _stack(tmp_path, lambda c: c["gpucluster:descheduler"].pop("podNodeSelector"))
    assert chart_pods.problems(config) == []
    assert not chart_pods.placed(config, "descheduler")


def test_the_cli_exits_2_naming_the_stack_and_the_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = yaml.safe_load(LOCAL.read_text())
    doc["config"]["gpucluster:jobset"].pop("podNodeSelector")
    bad = tmp_path / "Pulumi.bad.yaml"
    bad.write_text(yaml.safe_dump(doc))
    monkeypatch.setenv("GPUCLUSTER_SIM_STACK", str(bad))
    assert chart_pods.main(["check"]) == 2
    assert f"{bad}: gpucluster:jobset.podNodeSelector does not select" in capsys.readouterr().err
    monkeypatch.setenv("GPUCLUSTER_SIM_STACK", str(LOCAL))
    assert chart_pods.main(["check"]) == 0
