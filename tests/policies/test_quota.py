"""quota-within-capacity: ClusterQueue quotas against the flavors' GPUs."""

from __future__ import annotations

from typing import Any

from pulumi_policy import (
    PolicyResource,
)

from policies.quota import quota_within_capacity
from tests.policies.support import (
    check_stack,
    resource,
)


def _flavor(name: str, gpus: int | None) -> PolicyResource:
    meta: dict[str, Any] = {"name": name}
    if gpus is not None:
        meta["annotations"] = {"gpucluster.io/declared-gpus": str(gpus)}
    return resource("kubernetes:kueue.x-k8s.io/v1beta2:ResourceFlavor", {"metadata": meta}, name)


def _cq(name: str, **quota: int) -> PolicyResource:
    flavors = [{"name": f, "resources": [{"name": "nvidia.com/gpu", "nominalQuota": q}]} for f, q in quota.items()]
    spec = {"resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": flavors}]}
    return resource("kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue", {"metadata": {"name": name}, "spec": spec}, name)


def test_quota_within_declared_capacity() -> None:
    assert check_stack(quota_within_capacity, [_flavor("h100", 512), _cq("a", h100=448), _cq("b", h100=64)]) == []
    (violation,) = check_stack(quota_within_capacity, [_flavor("h100", 512), _cq("a", h100=448), _cq("b", h100=128)])
    assert "flavor h100: ClusterQueue quota 576 (a: 448, b: 128) exceeds the 512 GPUs declared" in violation
    missing = check_stack(quota_within_capacity, [_flavor("h100", None), _cq("a", h100=8)])
    assert any("does not declare its GPUs" in v for v in missing)


def test_a_count_of_pods_is_no_gpu_quota_but_gpus_on_a_flavor_of_none_are_refused() -> None:
    pods = [{"name": "cpu-only", "resources": [{"name": "pods", "nominalQuota": 16}]}]
    cpu = resource(
        "kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue",
        {
            "metadata": {"name": "cpu-only"},
            "spec": {"resourceGroups": [{"coveredResources": ["pods"], "flavors": pods}]},
        },
        "cpu-only",
    )
    stack = [_flavor("h100", 8), _cq("a", h100=8), _flavor("cpu-only", 0), cpu]
    assert check_stack(quota_within_capacity, stack) == []
    (violation,) = check_stack(quota_within_capacity, [*stack, _cq("b", **{"cpu-only": 1})])
    assert "flavor cpu-only: ClusterQueue quota 1 (b: 1) exceeds the 0 GPUs declared" in violation
