"""The pack as a whole: the real local and prod stacks pass every policy; every policy is mandatory."""

from __future__ import annotations

import pytest
from pulumi_policy import (
    ResourceValidationPolicy,
    StackValidationPolicy,
)

from components.cluster import GpuCluster, GpuClusterArgs
from components.config import load_stack_file
from policies import ALL_POLICIES
from tests.policies.support import (
    NA,
    ROOT,
    as_policy_resources,
    check_resource,
    check_stack,
)
from tests.support.pulumi_harness import deploy


@pytest.mark.parametrize("stack", ["local", "prod"])
def test_the_real_stacks_pass_every_policy(stack: str) -> None:
    cfg = load_stack_file(ROOT / "stacks" / f"Pulumi.{stack}.yaml")
    graph = deploy(lambda: GpuCluster(stack, GpuClusterArgs(config=cfg)))
    resources = as_policy_resources(graph)
    applied = 0
    for policy in ALL_POLICIES:
        if isinstance(policy, StackValidationPolicy):
            outcome = check_stack(policy, resources)
            applied += outcome != NA
            assert outcome in ([], NA), f"{policy.name}: {outcome}"
        else:
            assert isinstance(policy, ResourceValidationPolicy)
            for r in resources:
                outcome = check_resource(policy, r.resource_type, r.props)
                assert outcome in ([], NA), f"{policy.name} on {r.name}: {outcome}"
    assert applied >= 4  # priorities (both), quota and storage looked at real resources


def test_the_pack_is_mandatory_by_default() -> None:
    names = [p.name for p in ALL_POLICIES]
    assert len(names) == len(set(names)) >= 10
    assert all(p.enforcement_level.value == "mandatory" for p in ALL_POLICIES)
