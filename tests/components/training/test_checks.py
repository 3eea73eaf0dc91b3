"""Each check of a spec against the stack, one case that passes and one that fails, registered once."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from components.config import StackConfig, parse_stack_config
from components.training import checks
from components.training.checks import (
    CHECKS,
    check_spec,
    confinement_stays_on,
    flavor_fits,
    gpu_visibility_is_requested,
    launcher_leaves_the_gang_to_the_package,
    priority_allowed_for_team,
    priority_exists,
    spec_issues,
    team_exists,
    team_queue_exists,
)
from components.training.spec import SpecError, parse_spec
from tests.components.training.conftest import local_raw, spec_doc


def found(check: Any, stack: StackConfig, **change: Any) -> list[str]:
    return [str(i) for i in check(parse_spec(spec_doc(**change)), stack)]


def test_every_check_is_registered_once() -> None:
    """Every public function of the module shaped as a check (a spec and the stack in, issues out) is in CHECKS,
    and once: a check written but never registered would never run."""
    shaped = {
        fn
        for name, fn in vars(checks).items()
        if inspect.isfunction(fn)
        and not name.startswith("_")
        and fn.__module__ == checks.__name__
        and list(inspect.signature(fn).parameters) == ["spec", "stack"]
        and inspect.signature(fn).return_annotation == "Iterator[ConfigIssue]"
    }
    assert len(shaped) >= 12
    assert len(set(CHECKS)) == len(CHECKS)
    assert set(CHECKS) == shaped


def test_a_valid_spec_passes_every_check(stack: StackConfig) -> None:
    assert spec_issues(parse_spec(spec_doc()), stack) == []
    check_spec(parse_spec(spec_doc(flavor="h100", nodes=4)), stack)


def test_team_exists(stack: StackConfig) -> None:
    assert found(team_exists, stack, team="vision") == []
    (issue,) = found(team_exists, stack, team="robotics")
    assert issue.startswith("spec.team: no team 'robotics' in the stack (teams: ['foundation', 'vision'])")


def test_priority_exists(stack: StackConfig) -> None:
    assert found(priority_exists, stack, priority="research-urgent") == []
    (issue,) = found(priority_exists, stack, priority="urgent")
    assert issue.startswith("spec.priority: no WorkloadPriorityClass 'urgent'")
    assert "research-default" in issue


def test_priority_allowed_for_team(stack: StackConfig) -> None:
    assert found(priority_allowed_for_team, stack, priority="research-urgent") == []  # foundation may
    (issue,) = found(priority_allowed_for_team, stack, team="vision", priority="research-urgent")
    assert issue.startswith("spec.priority: team 'vision' may not name 'research-urgent'")
    assert "research-default" in issue
    assert found(priority_allowed_for_team, stack, team="vision", priority="research-default") == []


@pytest.mark.parametrize("name", ["NVIDIA_VISIBLE_DEVICES", "NVIDIA_MIG_MONITOR_DEVICES"])
def test_gpu_visibility_is_requested(stack: StackConfig, name: str) -> None:
    assert found(gpu_visibility_is_requested, stack, env={"CUDA_VISIBLE_DEVICES": "0"}) == []
    (issue,) = found(gpu_visibility_is_requested, stack, env={name: "all"})
    assert issue.startswith(f"spec.env.{name}: the NVIDIA runtime would show the pod GPUs it did not ask for")


def test_confinement_stays_on(stack: StackConfig) -> None:
    kept = {"container.apparmor.security.beta.kubernetes.io/trainer": "runtime/default"}
    assert found(confinement_stays_on, stack, podAnnotations=kept) == []
    off = {"container.apparmor.security.beta.kubernetes.io/trainer": "Unconfined"}
    (issue,) = found(confinement_stays_on, stack, podAnnotations=off)
    assert issue == "spec.podAnnotations.container.apparmor.security.beta.kubernetes.io/trainer: turns confinement off"


def test_team_queue_exists() -> None:
    raw = local_raw()
    # A stack whose team points at a queue it lacks is refused by the stack rules already; the check stands on its
    # own for a StackConfig assembled otherwise (the Pulumi component's callers).
    good = parse_stack_config(raw)
    assert found(team_queue_exists, good) == []
    teams = tuple(t.model_copy(update={"cluster_queue": "gone"}) for t in good.teams)
    broken = StackConfig(**{**good.__dict__, "teams": teams})
    (issue,) = found(team_queue_exists, broken)
    assert issue == "spec.team: team 'foundation' points at ClusterQueue 'gone', which the stack does not declare"


def test_a_named_flavor_must_exist(stack: StackConfig) -> None:
    assert found(flavor_fits, stack, flavor="h100") == []
    (issue,) = found(flavor_fits, stack, flavor="a100")
    assert issue.startswith("spec.flavor: no flavor 'a100' in the stack (flavors: ['h100'])")


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"gpusPerNode": 9, "flavor": "h100"}, "spec.gpusPerNode: does not fit: 9 GPUs per node, but a h100 node"),
        ({"nodes": 5, "flavor": "h100"}, "spec.nodes: does not fit: 5 nodes, but the h100 flavor has 4"),
        ({"gpusPerNode": 9}, "spec.gpusPerNode: fits no flavor of the team's queue: 9 GPUs per node"),
        ({"nodes": 5}, "spec.nodes: fits no flavor of the team's queue: 5 nodes, but the h100 flavor has 4"),
    ],
)
def test_a_gang_no_flavor_can_hold_is_refused(stack: StackConfig, change: dict[str, Any], expected: str) -> None:
    (issue,) = found(flavor_fits, stack, **change)
    assert issue.startswith(expected)


def test_the_largest_gang_that_fits_passes(stack: StackConfig) -> None:
    assert found(flavor_fits, stack, nodes=4, gpusPerNode=8) == []
    assert found(flavor_fits, stack, nodes=4, gpusPerNode=8, flavor="h100") == []


def test_a_flavor_outside_the_team_queue_is_refused() -> None:
    raw = local_raw()
    raw["flavors"] = [
        *raw["flavors"],
        {"name": "a100", "nodeLabels": {"nvidia.com/gpu.product": "A100"}, "gpusPerNode": 8, "nodeCount": 2},
    ]
    stack = parse_stack_config(raw)
    (issue,) = found(flavor_fits, stack, flavor="a100")
    assert issue == "spec.flavor: the team's queue has no quota of flavor 'a100'"


def test_check_spec_raises_every_problem_with_the_source(stack: StackConfig) -> None:
    with pytest.raises(SpecError) as err:
        check_spec(parse_spec(spec_doc(team="robotics", priority="urgent")), stack, "job.yaml")
    assert str(err.value).startswith("job.yaml: 2 problem(s)")
    assert [i.path for i in err.value.issues] == ["spec.team", "spec.priority"]


def test_torchrun_options_the_package_sets_are_refused_and_matching_sizes_pass(stack: StackConfig) -> None:
    check = launcher_leaves_the_gang_to_the_package
    assert found(check, stack, args=["--nnodes=2", "--nproc-per-node", "8", "train.py", "--node-rank=3"]) == []
    issues = found(check, stack, args=["--nnodes", "4", "--node_rank=1", "--standalone", "train.py"])
    assert issues == [
        "spec.args[0]: --nnodes='4' disagrees with spec.nodes (2); drop it, the package sets it from the spec",
        "spec.args[2]: --node-rank is set by the package for every pod (PET_* environment: node rank from the "
        "completion index, rendezvous on the leader pod); remove it",
        "spec.args[3]: --standalone is set by the package for every pod (PET_* environment: node rank from the "
        "completion index, rendezvous on the leader pod); remove it",
    ]
    (issue,) = found(
        check, stack, command=["python", "-m", "torch.distributed.run", "--rdzv-endpoint=h:1"], args=["t.py"]
    )
    assert issue.startswith("spec.command: --rdzv-endpoint is set by the package")
    # another launcher's options are its own
    assert found(check, stack, command=["deepspeed"], args=["--num_nodes=4", "train.py"]) == []
