"""The kubelet's environment model that feeds torchrun in the rendezvous benchmark, and the example pods' env."""

from __future__ import annotations

import pytest

from components.config import parse_stack_config, read_stack_file
from components.training.checks import check_spec
from components.training.manifest import checkpoint_interval, job_context, jobset_manifest, launcher_env
from components.training.spec import LAUNCHER_ENV, load_spec
from sim.pod_env import PodEnvError, PodMeta, container_env
from tests.components.training.conftest import EXAMPLE, LOCAL_STACK

POD = PodMeta("job-node-0-1-abcde", "team-a", labels={"l": "x"}, annotations={"idx": "1"})


def test_field_refs_expansion_and_the_completion_index() -> None:
    env = container_env(
        [
            {"name": "RANK", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['idx']"}}},
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "MISSING", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['none']"}}},
            {"name": "FILE", "value": "/ckpt/rank-$(RANK).$(L).$$(RANK)"},
            {"name": "L", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['l']"}}},
        ],
        POD,
        completion_index=1,
    )
    assert env == {
        "RANK": "1",
        "POD": "job-node-0-1-abcde",
        "NS": "team-a",
        "MISSING": "",
        # defined earlier: expanded; defined later: left as written; $$ escapes
        "FILE": "/ckpt/rank-1.$(L).$(RANK)",
        "L": "x",
        "JOB_COMPLETION_INDEX": "1",
    }
    # a container's own JOB_COMPLETION_INDEX is kept, as the Job controller keeps it
    assert container_env([{"name": "JOB_COMPLETION_INDEX", "value": "7"}], POD, 1) == {"JOB_COMPLETION_INDEX": "7"}


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ({"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}, "env S: valueFrom secretKeyRef"),
        ({"name": "C", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}, "fieldRef 'spec.nodeName'"),
        ({"value": "x"}, r"env\[0\]: no name"),
    ],
)
def test_what_is_not_modelled_is_refused_not_guessed(item: dict[str, object], expected: str) -> None:
    with pytest.raises(PodEnvError, match=expected):
        container_env([item], POD)


def test_the_example_pods_get_their_node_rank_and_the_leaders_rendezvous() -> None:
    spec = load_spec(EXAMPLE)
    stack = parse_stack_config(read_stack_file(LOCAL_STACK), str(LOCAL_STACK))
    check_spec(spec, stack)
    m = jobset_manifest(spec, job_context(spec, stack, checkpoint_interval(spec, stack, None)))
    (container,) = m["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["torchrun"]
    assert container["args"][0] == "train.py"  # torchrun's own options all come from the environment
    annotation = "batch.kubernetes.io/job-completion-index"
    envs = [
        container_env(container["env"], PodMeta(f"p{i}", "team-foundation", annotations={annotation: str(i)}), i)
        for i in range(spec.nodes)
    ]
    assert [e["PET_NODE_RANK"] for e in envs] == ["0", "1"]
    for env in envs:
        assert (env["PET_NNODES"], env["PET_NPROC_PER_NODE"]) == ("2", "8")
        assert env["PET_RDZV_ENDPOINT"] == "llm-pretrain-node-0-0.llm-pretrain:29500"
        assert (env["PET_RDZV_BACKEND"], env["PET_MAX_RESTARTS"]) == ("static", "0")
    # the leader's name is the one JobSet publishes: pod 0 of job 0 under the JobSet's subdomain
    assert m["spec"]["network"] == {
        "enableDNSHostnames": True,
        "subdomain": spec.name,
        "publishNotReadyAddresses": True,
    }


def test_a_spec_cannot_set_what_the_launcher_reads() -> None:
    spec = load_spec(EXAMPLE)
    assert {e["name"] for e in launcher_env(spec)} == LAUNCHER_ENV
