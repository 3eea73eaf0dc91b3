"""The PriorityClass and WorkloadPriorityClass policies: training above inference, the configured order."""

from __future__ import annotations

from pulumi_policy import (
    PolicyResource,
)

from policies.priorities import training_above_inference, workload_priorities_ordered
from tests.policies.support import (
    NA,
    check_stack,
    resource,
)

PC = "kubernetes:scheduling.k8s.io/v1:PriorityClass"
WPC = "kubernetes:kueue.x-k8s.io/v1beta2:WorkloadPriorityClass"


def _pc(name: str, tier: str, value: int) -> PolicyResource:
    return resource(PC, {"metadata": {"name": name, "labels": {"gpucluster.io/tier": tier}}, "value": value}, name)


def test_training_priority_above_inference() -> None:
    ok = [_pc("train", "training", 100000), _pc("serve", "inference", 10000)]
    assert check_stack(training_above_inference, ok) == []
    bad = [_pc("train", "training", 1000), _pc("serve", "inference", 10000)]
    (violation,) = check_stack(training_above_inference, bad)
    assert "train (training, 1000) must be above serve (inference, 10000)" in violation
    assert check_stack(training_above_inference, []) == NA


def test_workload_priorities_follow_the_configured_order() -> None:
    def wpc(name: str, value: int) -> PolicyResource:
        return resource(WPC, {"metadata": {"name": name}, "value": value}, name)

    config = {"order": ["urgent", "default", "scavenger"]}
    assert check_stack(workload_priorities_ordered, [wpc("urgent", 100), wpc("default", 10)], config) == []
    (violation,) = check_stack(workload_priorities_ordered, [wpc("urgent", 10), wpc("default", 10)], config)
    assert "urgent (10) must be above default (10)" in violation
