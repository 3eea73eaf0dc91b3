"""A hostile or careless spec at the edges: numbers without a finite bound, image references the cluster would not
pull (or would float), a refusal as long as the spec is bad, and credentials echoed back: each refused or kept
out of what is printed."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from components.training.spec import SpecError, parse_spec
from contract.image_refs import image_problem, malformed, unpinned
from contract.issues import ConfigIssue
from tests.components.training.conftest import spec_doc
from tests.components.training.test_submit import Run, write_spec


@pytest.mark.parametrize("seconds", [1e308, float("inf"), float("nan"), 0, -1, 86_401])
def test_a_write_time_without_a_finite_bound_is_refused_naming_the_field(seconds: float) -> None:
    with pytest.raises(SpecError) as err:
        parse_spec(spec_doc(checkpointWriteSeconds=seconds))
    text = str(err.value)
    assert "spec.checkpointWriteSeconds: " in text
    expected = "at most 86400 seconds" if math.isfinite(seconds) else "finite number"
    assert expected in text
    assert parse_spec(spec_doc(checkpointWriteSeconds=86_400)).checkpoint_write_seconds == 86_400


@pytest.mark.parametrize(
    ("image", "why"),
    [
        ("ghcr.io/Example/Trainer:1.0", "has upper-case letters in its repository"),
        ("ghcr.io/example/trainer", "has no tag (it would float to latest)"),
        ("ghcr.io/example/trainer:latest", "uses the floating tag 'latest'"),
        ("ghcr.io/example/trainer:1.0;rm -rf /", "holds white space"),
        ("ghcr.io/example/trainer:1.0$(id)", "holds characters no image reference has"),
        ("ghcr.io/example/trainer:1.0`id`", "holds characters no image reference has"),
        ("ghcr.io//trainer:1.0", "is not registry/name[:tag][@digest]"),
        ("ghcr.io/example/trainer:-bad", "is not registry/name[:tag][@digest]"),
        ("", "is empty"),
    ],
)
def test_an_image_the_policy_pack_would_refuse_is_refused_by_submit_too(image: str, why: str) -> None:
    assert why in str(image_problem(image))
    with pytest.raises(SpecError, match=r"spec\.image: ") as err:
        parse_spec(spec_doc(image=image))
    assert why in str(err.value)


@pytest.mark.parametrize(
    "image",
    [
        "ghcr.io/example/trainer:1.0.0",
        "registry.example:5000/team/trainer:v2_rc.1",
        "localhost:5000/trainer:sim",
        "trainer@sha256:" + "a" * 64,
        "nvcr.io/nvidia/pytorch:25.01-py3@sha256:" + "b" * 64,
        "[::1]:5000/trainer:1",
    ],
)
def test_well_formed_pinned_images_pass(image: str) -> None:
    assert (malformed(image), unpinned(image)) == (None, None)
    assert parse_spec(spec_doc(image=image)).image == image


def test_a_refusal_lists_fifty_problems_and_counts_the_rest() -> None:
    err = SpecError([ConfigIssue(f"spec.env.X{i}", None, "bad") for i in range(200)])
    lines = str(err).splitlines()
    assert lines[0] == "job spec: 200 problem(s)"
    assert len(lines) == 1 + 50 + 1
    assert lines[50] == "  - spec.env.X49: bad"
    assert lines[-1] == "  ... and 150 more"
    assert err.issues[199].path == "spec.env.X199"  # every problem stays on the error for a caller to read


def test_a_spec_holding_a_credential_is_refused_and_the_refusal_prints_none(tmp_path: Path) -> None:
    token = "hf_AbCdEf0123456789AbCdEf0123456789"
    spec = write_spec(tmp_path, env={"WANDB_API_KEY": "0123456789abcdef0123456789abcdef", "MODEL_URL": token})
    run = Run()
    assert run(spec, dry_run=True) != 0
    said = "\n".join(run.out + run.err)
    assert (
        "spec.env: MODEL_URL (its value is a key or token), WANDB_API_KEY (its name says it holds a credential)" in said
    )
    assert token not in said
    assert "0123456789abcdef0123456789abcdef" not in said
    assert not run.clusters  # nothing was sent


def test_the_dry_run_shows_a_secret_by_reference(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, secretEnv={"HF_TOKEN": {"secret": "hf", "key": "token"}})
    run = Run()
    assert run(spec, dry_run=True) == 0
    printed = "\n".join(run.out)
    containers = yaml.safe_load(printed)["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "containers"
    ]
    env = {e["name"]: e for e in containers[0]["env"]}
    assert env["HF_TOKEN"] == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}
    assert env["GPUCLUSTER_CHECKPOINT_INTERVAL_SECONDS"]["value"] != "<redacted>"  # the package's own are shown
