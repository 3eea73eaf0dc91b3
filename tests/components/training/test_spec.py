"""The job spec: a valid one parses, and each bad field is refused naming ``spec.<field>``, every problem at once,
never a stack trace; a file that is not YAML is refused naming the file and the line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from components.training.spec import MAX_NAME, MAX_NODES, JobSpec, SpecError, load_spec, parse_spec
from tests.components.training.conftest import EXAMPLE, spec_doc


def problems(**change: Any) -> list[str]:
    with pytest.raises(SpecError) as err:
        parse_spec(spec_doc(**change))
    return [str(i) for i in err.value.issues]


def test_a_valid_spec_parses_with_its_defaults_left_to_the_stack() -> None:
    spec = parse_spec(spec_doc())
    assert spec.nodes == 2
    assert spec.gpus_per_node == 8
    assert spec.checkpoint_write_seconds is None
    assert spec.max_restarts_per_hour is None
    assert spec.max_restarts is None
    assert spec.flavor is None
    assert spec.env == {}


def test_the_example_spec_parses() -> None:
    spec = load_spec(EXAMPLE)
    assert isinstance(spec, JobSpec)
    assert spec.team == "foundation"


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"nodes": 0}, "spec.nodes: must be at least 1"),
        ({"nodes": -3}, "spec.nodes: must be at least 1"),
        ({"gpusPerNode": 0}, "spec.gpusPerNode: must be between 1 and 16 (got 0)"),
        ({"gpusPerNode": 17}, "spec.gpusPerNode: must be between 1 and 16 (got 17)"),
        ({"checkpointWriteSeconds": 0}, "spec.checkpointWriteSeconds: must be more than 0 and at most 86400 seconds"),
        ({"name": "a" * (MAX_NAME + 1)}, f"spec.name: {'a' * (MAX_NAME + 1)!r} is longer than {MAX_NAME}"),
        ({"name": "9lives"}, "spec.name: '9lives' must start with a letter"),
        ({"name": "Big_Job"}, "spec.name: 'Big_Job' must start with a letter"),
        ({"image": "has space:1"}, "spec.image: 'has space:1' holds white space"),
        ({"command": []}, "spec.command: List should have at least 1 item"),
        ({"team": "Not A Label"}, "spec.team: 'Not A Label' is not a DNS label"),
        ({"priority": None}, "spec.priority: required key is missing"),
        ({"maxRestartsPerHour": 0}, "spec.maxRestartsPerHour: Input should be greater than or equal to 1"),
        ({"maxRestarts": -1}, "spec.maxRestarts: Input should be greater than or equal to 0"),
        ({"replicas": 3}, "spec.replicas: unknown key"),
        ({"env": {"GPUCLUSTER_JOB_NAME": "x"}}, "spec.env: GPUCLUSTER_JOB_NAME is set by the package"),
        ({"env": {"MASTER_ADDR": "x"}}, "spec.env: MASTER_ADDR is set by the package"),
        ({"env": {"1BAD": "x"}}, "spec.env: '1BAD' is not an environment variable name"),
        ({"env": {"PORT": 8080}}, "spec.env.PORT: Input should be a valid string"),
        ({"stallAfter": "9s"}, "spec.stallAfter: '9s' must be at least 10s and less than 7 days"),
        ({"stallAfter": "168h"}, "spec.stallAfter: '168h' must be at least 10s and less than 7 days"),
        ({"stallAfter": "soon"}, "spec.stallAfter:"),
    ],
)
def test_a_bad_field_is_refused_by_name(change: dict[str, Any], expected: str) -> None:
    found = problems(**change)
    assert any(p.startswith(expected) for p in found), found


def test_boundaries_that_are_allowed() -> None:
    assert parse_spec(spec_doc(stallAfter="10s")).stall_after == "10s"
    assert parse_spec(spec_doc(stallAfter="167h")).stall_after == "167h"
    spec = parse_spec(spec_doc(name="a" * MAX_NAME, nodes=1, gpusPerNode=16, env={"MY_GPUCLUSTER_X": "1"}))
    assert spec.gpus_per_node == 16
    assert spec.env == {"MY_GPUCLUSTER_X": "1"}


def test_every_problem_is_reported_at_once() -> None:
    found = problems(nodes=0, gpusPerNode=99, image="")
    assert [p.split(":")[0] for p in found] == ["spec.image", "spec.nodes", "spec.gpusPerNode"]


def test_a_document_that_is_not_a_map_is_refused() -> None:
    with pytest.raises(SpecError, match="spec: expected a map of job fields"):
        parse_spec(["name", "x"])


def test_yaml_that_does_not_parse_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("name: x\nnodes: [1, 2\nteam: a\n")
    with pytest.raises(SpecError) as err:
        load_spec(path)
    text = str(err.value)
    assert str(path) in text
    assert "line 3" in text
    assert "invalid YAML" in text


def test_a_missing_file_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"job\.yaml: cannot read"):
        load_spec(tmp_path / "job.yaml")


def test_the_error_names_the_file_it_came_from(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(
        "name: x\nteam: foundation\nimage: reg.example/i:1\ncommand: [a]\nnodes: 0\ngpusPerNode: 8\npriority: p\n"
    )
    with pytest.raises(SpecError) as err:
        load_spec(path)
    assert str(err.value).startswith(f"{path}: 1 problem(s)")
    assert "spec.nodes: must be at least 1" in str(err.value)


def test_the_longest_name_leaves_jobset_pod_names_valid() -> None:
    # The JobSet webhook checks <name>-<replicatedJob>-<jobIndex>-<podIndex>-<5 characters> is a DNS-1035 label.
    longest = f"{'a' * MAX_NAME}-node-0-{MAX_NODES - 1}-abcde"
    assert len(longest) <= 63


def test_a_credential_in_the_env_is_refused_naming_the_variable_never_the_value() -> None:
    token = "hf_" + "Zq9" * 10
    (said,) = problems(env={"HF_TOKEN": token, "EPOCHS": "3"})
    assert said.startswith("spec.env: HF_TOKEN (its value is a key or token): a credential in the job spec would")
    assert "secretEnv" in said
    assert token not in said
    (said,) = problems(env={"WANDB_API_KEY": "0123456789abcdef" * 2})
    assert "WANDB_API_KEY" in said
    assert "0123456789abcdef" not in said
    # a name with a credential word as a whole part only; a path is a file the pod mounts
    fine = {"TOKENIZERS_PARALLELISM": "false", "GOOGLE_APPLICATION_CREDENTIALS": "/var/run/secrets/gpucluster/gcp/k"}
    assert parse_spec(spec_doc(env=fine)).env == fine


def test_secrets_of_the_teams_namespace_are_named_not_held() -> None:
    spec = parse_spec(spec_doc(secretEnv={"HF_TOKEN": {"secret": "hf", "key": "token"}}, secretFiles=["gcp"]))
    assert (spec.secret_env["HF_TOKEN"].secret, spec.secret_env["HF_TOKEN"].key) == ("hf", "token")
    assert spec.secret_files == ["gcp"]
    said = problems(
        env={"HF_TOKEN": "x"},
        secretEnv={"HF_TOKEN": {"secret": "hf", "key": "token"}, "MASTER_PORT": {"secret": "a", "key": "b"}},
        secretFiles=["gcp", "gcp"],
    )
    assert any("spec.secretEnv: MASTER_PORT is set by the package" in p for p in said), said
    both = problems(secretEnv={"HF_TOKEN": {"secret": "hf", "key": "token"}}, env={"HF_TOKEN": "/x"})
    assert both == ["spec: env and secretEnv both set HF_TOKEN: set each name once"]
    assert problems(secretFiles=["a", "a"]) == ["spec: secretFiles names a Secret twice"]
