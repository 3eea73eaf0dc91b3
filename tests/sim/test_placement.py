"""sim/placement.py: before ``pulumi up``, a stack whose pods could not run on the simulated cluster is refused by
key: one of ours or a chart's controller off the real node, not tolerating it, or a chart's image other than the
one built here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from components.config import load_stack_file
from contract.queues_settings import KUEUE_CHART_VERSION
from contract.registry import CONTROLLERS
from sim import placement

ROOT = Path(__file__).resolve().parents[2]
LOCAL = ROOT / "stacks" / "Pulumi.local.yaml"


def _stack(tmp_path: Path, edit: Any) -> Any:
    doc = yaml.safe_load(LOCAL.read_text())
    edit(doc["config"])
    path = tmp_path / "Pulumi.edited.yaml"
    path.write_text(yaml.safe_dump(doc))
    return load_stack_file(path)


@pytest.mark.parametrize("stack", ["local", "bench:scale96", "bench:scale512", "bench:capacity96"])
def test_the_stacks_the_sim_deploys_place_every_pod_on_the_real_node(stack: str) -> None:
    path = ROOT / "benchmarks" / "stacks" / f"Pulumi.{stack[6:]}.yaml" if stack.startswith("bench:") else LOCAL
    config = load_stack_file(path)
    assert placement.problems(config) == []
    pods = placement.pods(config)
    assert all(pod.placed and pod.tolerated for pod in pods)
    names = [pod.name for pod in pods]
    running = [spec.name for spec in CONTROLLERS if config.running(spec) is not None]
    assert running, "the stack runs controllers of ours"
    assert names[: len(running)] == running
    assert {"virtual-node", "kueue", "jobset", "descheduler"} <= set(names)


def test_kueue_off_the_real_node_is_refused_by_its_key(tmp_path: Path) -> None:
    config = _stack(tmp_path, lambda c: c["gpucluster:kueue"].pop("podNodeSelector"))
    (problem,) = placement.problems(config)
    assert problem.startswith("gpucluster:kueue.podNodeSelector does not select the real node")
    assert "kueue would land on a kwok node, where nothing runs it though kwok reports it Ready" in problem


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ("gpucluster:stallDetector", "gpucluster:stallDetector.nodeSelector"),
        ("gpucluster:metricsAdapter", "gpucluster:metricsAdapter.nodeSelector"),
        ("gpucluster:descheduler", "gpucluster:descheduler.podNodeSelector"),
    ],
)
def test_one_of_ours_or_the_descheduler_off_the_real_node_is_refused(tmp_path: Path, section: str, key: str) -> None:
    """No local process stands in for a pod the stack deploys: left on a kwok node, it would never run."""
    field = "podNodeSelector" if key.endswith("podNodeSelector") else "nodeSelector"
    config = _stack(tmp_path, lambda c: c[section].pop(field))
    (problem,) = placement.problems(config)
    assert problem.startswith(f"{key} does not select the real node")


def test_the_virtual_node_and_the_taint_controller_are_refused_by_their_burst_keys(tmp_path: Path) -> None:
    def edit(c: dict[str, Any]) -> None:
        c["gpucluster:burst"]["virtualNode"].pop("nodeSelector")
        c["gpucluster:burst"]["taintController"].pop("tolerations")

    assert placement.problems(_stack(tmp_path, edit)) == [
        "gpucluster:burst.taintController.tolerations does not tolerate the real node's taint "
        "sim.gpucluster.io/real-node (NoSchedule)",
        'gpucluster:burst.virtualNode.nodeSelector does not select the real node (sim.gpucluster.io/real-node: "true"):'
        " virtual-node would land on a kwok node, where nothing runs it though kwok reports it Ready",
    ]


def test_a_controller_the_stack_turns_off_and_an_adapter_run_outside_need_no_place(tmp_path: Path) -> None:
    def edit(c: dict[str, Any]) -> None:
        c["gpucluster:stallDetector"] = {"enabled": False}
        adapter = c["gpucluster:metricsAdapter"]
        del adapter["nodeSelector"], adapter["tolerations"]
        adapter["externalAddress"] = "localhost:18445"

    config = _stack(tmp_path, edit)
    assert placement.problems(config) == []
    names = {pod.name for pod in placement.pods(config)}
    assert not names & {"stall-detector", "metrics-adapter"}


def test_jobset_not_tolerating_the_node_is_refused(tmp_path: Path) -> None:
    config = _stack(tmp_path, lambda c: c["gpucluster:jobset"].pop("podTolerations"))
    assert placement.problems(config) == [
        "gpucluster:jobset.podTolerations does not tolerate the real node's taint sim.gpucluster.io/real-node "
        "(NoSchedule)"
    ]


def test_an_image_the_node_does_not_have_is_refused(tmp_path: Path) -> None:
    config = _stack(tmp_path, lambda c: c["gpucluster:kueue"].update(image="registry.k8s.io/kueue/kueue:v0.16.0"))
    (problem,) = placement.problems(config)
    assert problem.startswith("gpucluster:kueue.image is registry.k8s.io/kueue/kueue:v0.16.0, but the real node has ")
    assert f"registry.k8s.io/kueue/kueue:v{KUEUE_CHART_VERSION} alone" in problem


def test_the_cli_exits_2_naming_the_stack_and_the_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = yaml.safe_load(LOCAL.read_text())
    doc["config"]["gpucluster:jobset"].pop("podNodeSelector")
    bad = tmp_path / "Pulumi.bad.yaml"
    bad.write_text(yaml.safe_dump(doc))
    monkeypatch.setenv("GPUCLUSTER_SIM_STACK", str(bad))
    assert placement.main(["check"]) == 2
    assert f"{bad}: gpucluster:jobset.podNodeSelector does not select" in capsys.readouterr().err
    monkeypatch.setenv("GPUCLUSTER_SIM_STACK", str(LOCAL))
    assert placement.main(["check"]) == 0
