"""Make-before-break guardrails: burstable GPU inference Deployments roll with maxUnavailable 0; with the check
on, every training ClusterQueue lists it; with it off, the advisory policy says what that costs."""

from __future__ import annotations

from typing import Any

import pytest
from pulumi_policy import EnforcementLevel

from policies.make_before_break import (
    ADMISSION_CHECK,
    inference_deployments_make_before_break,
    rollout_problems,
    training_queues_carry_make_before_break,
    training_queues_make_before_break_off,
)
from tests.policies.support import DEPLOY, NA, check_resource, check_stack, resource

CQ = "kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue"
VK_TOLERATION = {
    "key": "virtual-kubelet.io/provider",
    "operator": "Equal",
    "value": "gpucluster",
    "effect": "NoSchedule",
}


def _deployment(
    strategy: Any = None, *, namespace: str = "inference", burstable: bool = True, gpus: str = "1"
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "template": {
            "spec": {
                "containers": [
                    {"name": "s", "image": "r.example/s:1.0.0", "resources": {"limits": {"nvidia.com/gpu": gpus}}}
                ],
                "tolerations": [VK_TOLERATION] if burstable else [],
            }
        }
    }
    if strategy is not None:
        spec["strategy"] = strategy
    return {"metadata": {"name": "sd", "namespace": namespace}, "spec": spec}


ROLLING_0 = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": "25%"}}


@pytest.mark.parametrize(
    "strategy",
    [ROLLING_0, {"rollingUpdate": {"maxUnavailable": "0%", "maxSurge": 1}}, {"rollingUpdate": {"maxUnavailable": 0.0}}],
    ids=["zero", "zero-percent-default-type", "zero-as-the-engine-hands-it"],
)
def test_a_rollout_that_never_drops_a_replica_passes(strategy: dict[str, Any]) -> None:
    assert check_resource(inference_deployments_make_before_break, DEPLOY, _deployment(strategy)) == []


@pytest.mark.parametrize(
    ("strategy", "fragment"),
    [
        (None, "maxUnavailable unset"),
        ({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}, "maxUnavailable 1"),
        ({"rollingUpdate": {"maxUnavailable": "25%"}}, "maxUnavailable 25%"),
        ({"type": "Recreate"}, "strategy Recreate"),
        ({"rollingUpdate": {"maxUnavailable": False}}, "maxUnavailable False"),
    ],
    ids=["unset", "one", "percent", "recreate", "boolean"],
)
def test_a_rollout_that_may_drop_replicas_is_refused(strategy: Any, fragment: str) -> None:
    found = check_resource(inference_deployments_make_before_break, DEPLOY, _deployment(strategy))
    assert isinstance(found, list)
    assert len(found) == 1
    assert fragment in found[0]
    assert "inference/sd" in found[0]


@pytest.mark.parametrize(
    "props",
    [_deployment(None, burstable=False), _deployment(None, namespace="team-a"), _deployment(None, gpus="0")],
    ids=["not-burstable", "not-inference", "no-gpu"],
)
def test_only_burstable_gpu_inference_deployments_are_held_to_it(props: dict[str, Any]) -> None:
    assert check_resource(inference_deployments_make_before_break, DEPLOY, props) == NA


def test_rollout_problems_reads_the_strategy_only() -> None:
    assert rollout_problems({"spec": {"strategy": ROLLING_0}}) == []
    assert rollout_problems({"spec": {"strategy": "nonsense"}})  # not a map: Kubernetes' default, 25%


# --- training queues -------------------------------------------------------------------------------------------


def _cq(name: str, checks: list[str] | None = None) -> Any:
    spec: dict[str, Any] = {"cohortName": "research"}
    if checks is not None:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": c} for c in checks]}
    return resource(CQ, {"metadata": {"name": name}, "spec": spec}, name)


def _check(controller: str = "gpucluster.io/make-before-break", name: str = "make-before-break") -> Any:
    return resource(ADMISSION_CHECK, {"metadata": {"name": name}, "spec": {"controllerName": controller}}, name)


def test_with_the_check_on_every_queue_lists_it() -> None:
    stack = [
        _check(),
        _cq("pretraining", ["make-before-break"]),
        _cq("evaluation", ["make-before-break"]),
    ]
    assert check_stack(training_queues_carry_make_before_break, stack) == []


def test_a_queue_without_the_check_is_refused_with_the_cost() -> None:
    found = check_stack(
        training_queues_carry_make_before_break,
        [_check(), _cq("pretraining", ["make-before-break"]), _cq("evaluation")],
    )
    assert isinstance(found, list)
    assert len(found) == 1
    assert "ClusterQueue evaluation" in found[0]
    assert "preempts every inference replica" in found[0]


def test_a_queue_listing_a_check_the_stack_does_not_create_is_refused() -> None:
    found = check_stack(training_queues_carry_make_before_break, [_cq("pretraining", ["make-before-break"])])
    assert isinstance(found, list)
    assert len(found) == 1
    assert "inactive" in found[0]
    # An AdmissionCheck of another controller is not ours.
    assert (
        check_stack(
            training_queues_carry_make_before_break, [_check("example.com/other"), _cq("p", ["make-before-break"])]
        )
        != []
    )


def test_with_make_before_break_off_the_mandatory_policy_does_not_apply() -> None:
    assert check_stack(training_queues_carry_make_before_break, [_cq("pretraining")]) == NA
    assert check_stack(training_queues_carry_make_before_break, []) == NA


def test_off_the_advisory_policy_says_what_it_costs() -> None:
    found = check_stack(training_queues_make_before_break_off, [_cq("pretraining"), _cq("evaluation")])
    assert isinstance(found, list)
    assert len(found) == 1
    assert "['evaluation', 'pretraining']" in found[0]
    assert "serving dips until the burst path" in found[0]
    assert training_queues_make_before_break_off.enforcement_level == EnforcementLevel.ADVISORY


def test_on_the_advisory_policy_is_silent() -> None:
    assert (
        check_stack(training_queues_make_before_break_off, [_check(), _cq("pretraining", ["make-before-break"])]) == NA
    )
    assert check_stack(training_queues_make_before_break_off, []) == NA


def _groups(*resources: str) -> list[dict[str, Any]]:
    return [{"coveredResources": list(resources), "flavors": [{"name": "f", "resources": []}]}]


def test_the_queue_of_cpu_only_work_needs_no_check_a_queue_of_gpus_does() -> None:
    cpu = resource(CQ, {"metadata": {"name": "cpu-only"}, "spec": {"resourceGroups": _groups("pods")}}, "cpu-only")
    stack = [_check(), _cq("pretraining", ["make-before-break"]), cpu]
    assert check_stack(training_queues_carry_make_before_break, stack) == []
    # Pods and GPUs: it can admit training, so it is held to the check like any other.
    both = resource(CQ, {"metadata": {"name": "mixed"}, "spec": {"resourceGroups": _groups("pods", "nvidia.com/gpu")}})
    found = check_stack(training_queues_carry_make_before_break, [*stack, both])
    assert isinstance(found, list)
    assert len(found) == 1
    assert "ClusterQueue mixed" in found[0]
