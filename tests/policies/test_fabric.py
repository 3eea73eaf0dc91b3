"""training-jobs-use-the-fabric: a JobSet that may land on an RDMA flavor asks for the fabric, both ways."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pulumi_policy import PolicyResource

from components.config import StackConfig
from components.queues import cluster_queue_spec, flavor_annotations
from components.training.manifest import checkpoint_interval, job_context, jobset_manifest
from components.training.spec import parse_spec
from policies import ALL_POLICIES
from policies.fabric import CLUSTER_QUEUE, JOBSET, LOCAL_QUEUE, RESOURCE_FLAVOR, training_jobs_use_the_fabric
from tests.components.training.conftest import spec_doc
from tests.components.training.test_fabric import IB, stack_with
from tests.policies.support import NA, check_stack, resource


def kueue_objects(stack: StackConfig) -> list[PolicyResource]:
    """The stack's ResourceFlavors, ClusterQueues and LocalQueues as components/queues.py writes them."""
    out = [
        resource(RESOURCE_FLAVOR, {"metadata": {"name": f.name, "annotations": flavor_annotations(f)}}, f.name)
        for f in stack.flavors
    ]
    for name, queue in stack.queues.items():
        spec = cluster_queue_spec(queue, "cohort", stack.flavors, [], [])
        out.append(resource(CLUSTER_QUEUE, {"metadata": {"name": name}, "spec": spec}, name))
    for team in stack.teams:
        props = {
            "metadata": {"name": team.local_queue, "namespace": team.namespace},
            "spec": {"clusterQueue": team.cluster_queue},
        }
        out.append(resource(LOCAL_QUEUE, props, f"lq-{team.name}"))
    return out


def rendered(stack: StackConfig, **change: Any) -> dict[str, Any]:
    spec = parse_spec(spec_doc(**change))
    return jobset_manifest(spec, job_context(spec, stack, checkpoint_interval(spec, stack, None)))


def found(stack: StackConfig, jobset: dict[str, Any]) -> list[str] | str:
    return check_stack(training_jobs_use_the_fabric, [*kueue_objects(stack), resource(JOBSET, jobset, "job")])


def trainer(jobset: dict[str, Any]) -> dict[str, Any]:
    """The trainer container itself (not a copy): the tests damage it in place."""
    container: dict[str, Any] = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "containers"
    ][0]
    return container


def test_the_rendered_jobset_on_an_infiniband_flavor_passes() -> None:
    stack = stack_with(IB)
    assert found(stack, rendered(stack)) == []


def strip_rdma(jobset: dict[str, Any]) -> None:
    c = trainer(jobset)
    for key in ("requests", "limits"):
        c["resources"][key].pop("rdma/ib")
    c.pop("securityContext")


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (strip_rdma, "container trainer does not request rdma/ib; container trainer lacks the IPC_LOCK capability"),
        (
            lambda js: trainer(js).update(
                volumeMounts=[m for m in trainer(js)["volumeMounts"] if m["mountPath"] != "/dev/shm"]
            ),
            "container trainer has no memory-backed /dev/shm",
        ),
        (
            lambda js: trainer(js)["env"].append({"name": "NCCL_IB_DISABLE", "value": "1"}),
            "container trainer sets NCCL_IB_DISABLE, which turns InfiniBand/RoCE off",
        ),
    ],
)
def test_a_jobset_without_the_fabric_on_an_infiniband_flavor_fails(damage: Any, expected: str) -> None:
    stack = stack_with(IB)
    jobset = copy.deepcopy(rendered(stack))
    damage(jobset)
    messages = found(stack, jobset)
    assert isinstance(messages, list)
    (message,) = messages
    assert message.startswith(
        "JobSet team-foundation/llm-pretrain replicatedJobs[0] may run on flavor gpu0 (an RDMA fabric, through "
        "ClusterQueue training) but "
    )
    assert expected in message


def test_the_same_jobset_passes_where_no_flavor_has_an_rdma_fabric() -> None:
    ib = stack_with(IB)
    jobset = copy.deepcopy(rendered(ib))
    strip_rdma(jobset)
    assert found(stack_with({"kind": "ethernet"}), jobset) == []
    assert found(stack_with(None), jobset) == []
    # a queue the stack does not hold is gpucluster submit's to check, not this policy's
    jobset["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "elsewhere"
    assert found(ib, jobset) == []


def test_the_policy_is_in_the_pack() -> None:
    assert training_jobs_use_the_fabric in ALL_POLICIES
    assert check_stack(training_jobs_use_the_fabric, []) in ([], NA)
