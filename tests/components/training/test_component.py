"""TrainingJob under Pulumi's mocks: one JobSet, the same manifest ``gpucluster submit`` prints, parented to the
component, Kueue's unsuspend not diffed; args refused when they are not what the component takes."""

from __future__ import annotations

from typing import Any

import pytest

from components.config import StackConfig
from components.training.component import TOKEN, TrainingJob, TrainingJobArgs
from components.training.manifest import checkpoint_interval, job_context, jobset_manifest
from components.training.spec import SpecError, parse_spec
from contract.constants import ENVIRONMENT_LABEL
from tests.components.training.conftest import spec_doc
from tests.support.pulumi_harness import Graph, deploy

JOBSET = "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"


@pytest.fixture(scope="module")
def graph(stack: StackConfig) -> Graph:
    args = TrainingJobArgs.from_stack(parse_spec(spec_doc()), stack, labels={ENVIRONMENT_LABEL: "local"})
    return deploy(lambda: TrainingJob("pretrain", args))


def test_one_jobset_with_the_manifest_submit_prints(graph: Graph, stack: StackConfig) -> None:
    spec = parse_spec(spec_doc())
    expected = jobset_manifest(spec, job_context(spec, stack, checkpoint_interval(spec, stack, None)))
    js = graph.one(JOBSET, "pretrain-jobset")
    assert js.inputs["apiVersion"] == "jobset.x-k8s.io/v1alpha2"
    assert js.inputs["kind"] == "JobSet"
    assert js.inputs["spec"] == expected["spec"]
    assert js.inputs["metadata"]["labels"] == {ENVIRONMENT_LABEL: "local", **expected["metadata"]["labels"]}
    assert js.inputs["metadata"]["annotations"] == expected["metadata"]["annotations"]
    assert js.inputs["metadata"]["namespace"] == "team-foundation"


def test_the_jobset_is_parented_and_kueue_unsuspending_it_is_no_drift(graph: Graph) -> None:
    component = next(r for r in graph.resources if r.type == TOKEN)
    (js,) = graph.of_type(JOBSET)
    assert js.parent == component.urn
    assert js.ignore_changes == ["spec.suspend"]
    assert component.outputs == {
        "jobsetName": "llm-pretrain",
        "namespace": "team-foundation",
        "checkpointIntervalSeconds": 930,
    }


def test_from_stack_refuses_a_spec_the_stack_cannot_run(stack: StackConfig) -> None:
    with pytest.raises(SpecError) as err:
        TrainingJobArgs.from_stack(parse_spec(spec_doc(nodes=5, priority="urgent")), stack)
    assert [i.path for i in err.value.issues] == ["spec.priority", "spec.nodes"]
    assert str(err.value).startswith("TrainingJob llm-pretrain: 2 problem(s)")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"spec": spec_doc()}, "TrainingJobArgs.spec: expected JobSpec, got dict"),
        ({"context": None}, "TrainingJobArgs.context: expected JobContext, got NoneType"),
        ({"labels": {"bad key!": "x"}}, "TrainingJobArgs.labels key"),
    ],
)
def test_args_are_validated(stack: StackConfig, change: dict[str, Any], message: str) -> None:
    good = TrainingJobArgs.from_stack(parse_spec(spec_doc()), stack)
    fields = {"spec": good.spec, "context": good.context, "labels": {}, **change}
    with pytest.raises((TypeError, ValueError), match=message):
        TrainingJobArgs(**fields)
