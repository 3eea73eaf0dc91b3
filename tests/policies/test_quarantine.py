"""training-never-tolerates-quarantine: training templates in team namespaces or under Kueue pass without the
toleration and fail with it (by key, or by the match-everything toleration); inference may tolerate it."""

from __future__ import annotations

from typing import Any

import pytest
from pulumi_policy import PolicyResource

from policies.quarantine import tolerates_quarantine, training_never_tolerates_quarantine
from tests.policies.support import NA, check_stack, resource

NS = "kubernetes:core/v1:Namespace"
JOB = "kubernetes:batch/v1:Job"
JOBSET = "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"
PYTORCH = "kubernetes:kubeflow.org/v1:PyTorchJob"
DEPLOY = "kubernetes:apps/v1:Deployment"
QUARANTINE = {"key": "gpucluster.io/quarantine", "operator": "Exists"}
NOEXEC = "NoExecute"
GPU = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def namespace(name: str, role: str) -> PolicyResource:
    return resource(NS, {"metadata": {"name": name, "labels": {"gpucluster.io/workload": role}}}, name)


def pod(tolerations: list[dict[str, Any]]) -> dict[str, Any]:
    return {"tolerations": tolerations, "containers": [{"name": "train", "image": "r/t:1"}]}


def job(ns: str, tolerations: list[dict[str, Any]], labels: dict[str, str] | None = None) -> PolicyResource:
    props = {
        "metadata": {"name": "train", "namespace": ns, "labels": labels or {}},
        "spec": {"template": {"spec": pod(tolerations)}},
    }
    return resource(JOB, props, "train")


def jobset(ns: str, tolerations: list[dict[str, Any]]) -> PolicyResource:
    replicated = [
        {"name": "driver", "template": {"spec": {"template": {"spec": pod([GPU])}}}},
        {"name": "workers", "template": {"spec": {"template": {"spec": pod(tolerations)}}}},
    ]
    props = {"metadata": {"name": "gang", "namespace": ns}, "spec": {"replicatedJobs": replicated}}
    return resource(JOBSET, props, "gang")


STACK = [namespace("team-a", "training"), namespace("inference", "inference")]


def test_a_training_job_without_the_toleration_passes_and_with_it_fails() -> None:
    assert check_stack(training_never_tolerates_quarantine, [*STACK, job("team-a", [GPU])]) == []
    (violation,) = check_stack(training_never_tolerates_quarantine, [*STACK, job("team-a", [GPU, QUARANTINE])])
    assert "team-a/train (Job, training) pod template tolerations[1] tolerates gpucluster.io/quarantine" in violation


def test_the_match_everything_toleration_fails_too() -> None:
    (violation,) = check_stack(training_never_tolerates_quarantine, [*STACK, job("team-a", [{"operator": "Exists"}])])
    assert "the match-everything toleration" in violation


def test_a_jobset_is_checked_in_every_replicated_job() -> None:
    assert check_stack(training_never_tolerates_quarantine, [*STACK, jobset("team-a", [GPU])]) == []
    (violation,) = check_stack(training_never_tolerates_quarantine, [*STACK, jobset("team-a", [QUARANTINE])])
    assert "replicatedJobs[1] (workers)" in violation


def test_a_pytorch_job_is_checked_in_every_replica_spec() -> None:
    props = {
        "metadata": {"name": "pt", "namespace": "team-a"},
        "spec": {
            "pytorchReplicaSpecs": {"Worker": {"template": {"spec": pod([{**QUARANTINE, "effect": "NoExecute"}])}}}
        },
    }
    (violation,) = check_stack(training_never_tolerates_quarantine, [*STACK, resource(PYTORCH, props, "pt")])
    assert "pytorchReplicaSpecs.Worker" in violation


def test_a_kueue_workload_is_training_in_any_namespace() -> None:
    queued = job("research", [QUARANTINE], labels={"kueue.x-k8s.io/queue-name": "team-a"})
    (violation,) = check_stack(training_never_tolerates_quarantine, [queued])
    assert "research/train" in violation
    assert check_stack(training_never_tolerates_quarantine, [job("research", [QUARANTINE])]) == NA


def test_inference_may_tolerate_it() -> None:
    props = {
        "metadata": {"name": "serve", "namespace": "inference"},
        "spec": {"template": {"spec": pod([QUARANTINE])}},
    }
    assert check_stack(training_never_tolerates_quarantine, [*STACK, resource(DEPLOY, props, "serve")]) == []


def test_team_namespaces_may_come_from_the_config() -> None:
    config = {"teamNamespaces": ["team-b"]}
    (violation,) = check_stack(training_never_tolerates_quarantine, [job("team-b", [QUARANTINE])], config)
    assert "team-b/train" in violation


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        ({"key": "gpucluster.io/quarantine", "operator": "Exists"}, True),
        ({"key": "gpucluster.io/quarantine", "operator": "Equal", "value": "xid", "effect": "NoExecute"}, True),
        ({"key": "gpucluster.io/quarantine", "operator": "Exists", "effect": "NoSchedule"}, False),
        ({"operator": "Exists"}, True),
        ({"operator": "Exists", "effect": "NoSchedule"}, False),
        ({"key": "nvidia.com/gpu", "operator": "Exists"}, False),
        ({"key": "", "operator": "Equal"}, False),
    ],
)
def test_which_tolerations_let_a_pod_stay(toleration: dict[str, Any], tolerated: bool) -> None:
    assert tolerates_quarantine(toleration) is tolerated
