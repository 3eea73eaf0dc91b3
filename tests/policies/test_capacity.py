"""Capacity guardrails: a quota controller following every ClusterQueue wherever there are queues; flavors that
do not select accepted nodes are advised against, with the cost."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pulumi_policy import EnforcementLevel

from policies.capacity import flavors_select_accepted_nodes, quota_controller_where_queues_are
from tests.policies.support import NA, check_stack, resource

CQ = "kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue"
FLAVOR = "kubernetes:kueue.x-k8s.io/v1beta2:ResourceFlavor"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"


def _cq(name: str) -> Any:
    return resource(CQ, {"metadata": {"name": name}, "spec": {"resourceGroups": []}}, name)


def _controller(module: str = "daemons.quota_controller") -> Any:
    spec = {"template": {"spec": {"containers": [{"name": "controller", "command": ["python3", "-m", module]}]}}}
    return resource(DEPLOYMENT, {"metadata": {"name": "gpucluster-quota-controller"}, "spec": spec}, "controller")


def _settings(*queues: str) -> Any:
    document = {"clusterQueues": [{"name": q, "quota": {"h100": 8}} for q in queues]}
    props = {
        "metadata": {
            "name": "gpucluster-quota-controller-settings",
            "labels": {"gpucluster.io/settings": "quota-controller"},
        },
        "data": {"settings.json": json.dumps(document)},
    }
    return resource(CONFIG_MAP, props, "settings")


def _flavor(labels: dict[str, str]) -> Any:
    return resource(FLAVOR, {"metadata": {"name": "h100"}, "spec": {"nodeLabels": labels}}, "h100")


def test_queues_followed_by_the_controller_pass() -> None:
    stack = [_cq("pretraining"), _cq("evaluation"), _controller(), _settings("pretraining", "evaluation")]
    assert check_stack(quota_controller_where_queues_are, stack) == []


class _Words(Sequence[str]):
    """A list as the engine hands one over: a sequence that is no list (pulumi_policy's proxy)."""

    def __init__(self, words: list[str]) -> None:
        self._words = words

    def __getitem__(self, i: Any) -> Any:
        return self._words[i]

    def __len__(self) -> int:
        return len(self._words)


def test_the_controller_is_found_when_the_engine_hands_its_command_over_as_a_proxy() -> None:
    controller = _controller()
    container = controller.props["spec"]["template"]["spec"]["containers"][0]
    container["command"] = _Words(container["command"])
    stack = [_cq("pretraining"), controller, _settings("pretraining")]
    assert check_stack(quota_controller_where_queues_are, stack) == []


def test_queues_without_the_controller_are_refused_with_the_cost() -> None:
    found = check_stack(quota_controller_where_queues_are, [_cq("pretraining"), _controller("daemons.quarantine")])
    assert isinstance(found, list)
    assert len(found) == 1
    assert "no gpucluster-quota-controller Deployment" in found[0]
    assert "waitForPodsReady evicts them later" in found[0]


def test_a_queue_the_controller_does_not_follow_is_refused() -> None:
    found = check_stack(
        quota_controller_where_queues_are,
        [_cq("pretraining"), _cq("evaluation"), _controller(), _settings("pretraining")],
    )
    assert found == [
        "ClusterQueue(s) ['evaluation'] are not in the gpucluster-quota-controller settings: their quotas stay static"
    ]


def test_no_queue_no_controller_needed() -> None:
    assert check_stack(quota_controller_where_queues_are, [_controller()]) == NA


def test_a_flavor_selecting_accepted_nodes_passes() -> None:
    stack = [_flavor({"nvidia.com/gpu.product": "H100", "gpucluster.io/accepted": "true"})]
    assert check_stack(flavors_select_accepted_nodes, stack) == []


def test_a_flavor_that_does_not_require_acceptance_is_advised_against() -> None:
    assert flavors_select_accepted_nodes.enforcement_level == EnforcementLevel.ADVISORY
    found = check_stack(flavors_select_accepted_nodes, [_flavor({"nvidia.com/gpu.product": "H100"})])
    assert isinstance(found, list)
    assert len(found) == 1
    assert "never passed the acceptance roles" in found[0]


def _cpu_queue(*resources: str) -> Any:
    groups = [{"coveredResources": list(resources), "flavors": [{"name": "cpu-only", "resources": []}]}]
    return resource(CQ, {"metadata": {"name": "cpu-only"}, "spec": {"resourceGroups": groups}}, "cpu-only")


def test_the_queue_of_cpu_only_work_is_not_the_quota_controllers() -> None:
    stack = [_cq("pretraining"), _controller(), _settings("pretraining"), _cpu_queue("pods")]
    assert check_stack(quota_controller_where_queues_are, stack) == []
    assert check_stack(quota_controller_where_queues_are, [_cpu_queue("pods")]) == NA
    # One that also covers a GPU is a GPU queue: the controller must follow it.
    found = check_stack(quota_controller_where_queues_are, [*stack[:3], _cpu_queue("pods", "nvidia.com/gpu")])
    assert isinstance(found, list)
    assert len(found) == 1
    assert "['cpu-only'] are not in" in found[0]


def test_a_flavor_that_declares_no_gpu_need_not_select_accepted_nodes() -> None:
    def flavor(gpus: str) -> Any:
        meta = {"name": "cpu-only", "annotations": {"gpucluster.io/declared-gpus": gpus}}
        return resource(FLAVOR, {"metadata": meta, "spec": {}}, "cpu-only")

    assert check_stack(flavors_select_accepted_nodes, [flavor("0")]) == NA
    found = check_stack(flavors_select_accepted_nodes, [flavor("8")])
    assert isinstance(found, list)
    assert len(found) == 1
    assert "ResourceFlavor cpu-only" in found[0]
