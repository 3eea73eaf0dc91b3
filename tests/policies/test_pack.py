"""The pack as a whole: the real stacks pass every policy; every policy is mandatory but the advisory ones."""

from __future__ import annotations

import dataclasses

import pytest
from pulumi_policy import (
    ResourceValidationPolicy,
    StackValidationPolicy,
)

from components.cluster import GpuCluster, GpuClusterArgs
from components.config import load_stack_file
from contract.registry import MAKE_BEFORE_BREAK
from policies import ADVISORY, ALL_POLICIES
from tests.policies.support import (
    NA,
    ROOT,
    as_policy_resources,
    check_resource,
    check_stack,
)
from tests.support.pulumi_harness import deploy, secrets_of


@pytest.mark.parametrize("stack", ["local", "dev", "staging", "prod"])
def test_the_real_stacks_pass_every_policy(stack: str) -> None:
    cfg = load_stack_file(ROOT / "stacks" / f"Pulumi.{stack}.yaml")
    graph = deploy(lambda: GpuCluster(stack, GpuClusterArgs(config=cfg, secrets=secrets_of(cfg))))
    resources = as_policy_resources(graph)
    applied = 0
    for policy in ALL_POLICIES:
        if policy.name in ADVISORY:
            continue  # advice, not a refusal (test_the_advice_is_given_where_it_applies)
        if isinstance(policy, StackValidationPolicy):
            outcome = check_stack(policy, resources)
            applied += outcome != NA
            assert outcome in ([], NA), f"{policy.name}: {outcome}"
        else:
            assert isinstance(policy, ResourceValidationPolicy)
            for r in resources:
                outcome = check_resource(
                    policy, r.resource_type, r.props, secret_outputs=r.opts.additional_secret_outputs
                )
                assert outcome in ([], NA), f"{policy.name} on {r.name}: {outcome}"
    assert applied >= 4  # priorities (both), quota and storage looked at real resources


def test_the_pack_is_mandatory_by_default() -> None:
    names = [p.name for p in ALL_POLICIES]
    assert len(names) == len(set(names)) >= 10
    assert set(names) > ADVISORY
    for p in ALL_POLICIES:
        assert p.enforcement_level.value == ("advisory" if p.name in ADVISORY else "mandatory"), p.name


@pytest.mark.parametrize("advised", [True, False])
def test_the_advice_is_given_where_it_applies(advised: bool) -> None:
    """A stack that turns make-before-break off, or node acceptance, is told what that costs; the local stack runs
    both (make-before-break goes on only with bursting, and only the local stack bursts as shipped) and is not."""
    stack = "local"
    cfg = load_stack_file(ROOT / "stacks" / f"Pulumi.{stack}.yaml")
    if advised:
        off = cfg.controller(MAKE_BEFORE_BREAK).model_copy(update={"enabled": False})
        unaccepted = tuple(f.model_copy(update={"require_acceptance": False}) for f in cfg.flavors)
        cfg = dataclasses.replace(cfg, controllers={**cfg.controllers, MAKE_BEFORE_BREAK.name: off}, flavors=unaccepted)
    resources = as_policy_resources(
        deploy(lambda: GpuCluster(stack, GpuClusterArgs(config=cfg, secrets=secrets_of(cfg))))
    )
    for policy in ALL_POLICIES:
        if policy.name in ADVISORY:
            assert isinstance(policy, StackValidationPolicy)
            outcome = check_stack(policy, resources)
            assert (outcome not in ([], NA)) is advised, f"{policy.name}: {outcome}"
