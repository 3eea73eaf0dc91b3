"""images-pinned: every image pinned by a version tag or a digest; prod-images-by-digest: by digest in prod."""

from __future__ import annotations

from typing import Any

import pytest

from contract.constants import ENVIRONMENT_LABEL
from policies.images import image_problem, images_pinned, prod_images_by_digest
from tests.policies.support import (
    CM,
    DEPLOY,
    NA,
    app_deployment,
    check_resource,
)


@pytest.mark.parametrize(
    ("image", "pinned"),
    [
        ("registry.example/app:1.2.3", True),
        ("registry.example:5000/app:v2", True),
        ("app@sha256:" + "a" * 64, True),
        ("registry.example/app:latest", False),
        ("registry.example:5000/app", False),
        ("app", False),
    ],
)
def test_image_pinning_rules(image: str, pinned: bool) -> None:
    assert (image_problem(image) is None) is pinned


def test_images_pinned_policy() -> None:
    assert check_resource(images_pinned, DEPLOY, app_deployment()) == []
    (violation,) = check_resource(images_pinned, DEPLOY, app_deployment(image="registry.example/app:latest"))
    assert "inference/app containers/app: image 'registry.example/app:latest' uses the floating tag" in violation
    assert check_resource(images_pinned, CM, {"data": {}}) == NA


# --- prod-images-by-digest --------------------------------------------------------------------------------------------

DIGEST = "sha256:" + "a" * 64


def in_environment(environment: str | None, image: str, **labels: str) -> dict[str, Any]:
    """The test Deployment, labelled with the stack's environment as components/cluster.py labels ours."""
    props = app_deployment(image=image)
    props["metadata"]["labels"] = {**({ENVIRONMENT_LABEL: environment} if environment else {}), **labels}
    return props


def test_a_prod_deployment_pinned_by_digest_passes() -> None:
    image = f"registry.internal.example/serving/llm-serve:2.3.1@{DIGEST}"
    assert check_resource(prod_images_by_digest, DEPLOY, in_environment("prod", image)) == []
    assert check_resource(prod_images_by_digest, DEPLOY, in_environment("prod", f"r.example/app@{DIGEST}")) == []


def test_a_prod_deployment_by_tag_is_refused_with_the_fix() -> None:
    image = "registry.internal.example/serving/llm-serve:2.3.1"
    (violation,) = check_resource(prod_images_by_digest, DEPLOY, in_environment("prod", image))
    assert f"inference/app containers/app: image '{image}' is not pinned by digest" in violation
    assert "in prod every image is pinned by digest: `make images PIN=prod` writes ours into the stack" in violation
    assert "the inference services' images are their teams' releases by digest" in violation


def test_every_container_is_checked_init_containers_too() -> None:
    props = in_environment("prod", f"r.example/app@{DIGEST}")
    props["spec"]["template"]["spec"]["initContainers"] = [{"name": "warm", "image": "r.example/warm:1.0.0"}]
    (violation,) = check_resource(prod_images_by_digest, DEPLOY, props)
    assert "initContainers/warm: image 'r.example/warm:1.0.0'" in violation


def test_not_applicable_outside_prod_unlabelled_or_without_pods() -> None:
    assert check_resource(prod_images_by_digest, DEPLOY, in_environment("staging", "r.example/app:1.2.3")) == NA
    assert check_resource(prod_images_by_digest, DEPLOY, in_environment(None, "r.example/app:1.2.3")) == NA
    assert check_resource(prod_images_by_digest, CM, {"metadata": {"labels": {ENVIRONMENT_LABEL: "prod"}}}) == NA


def test_chart_rendered_workloads_are_out_of_reach() -> None:
    # The descheduler chart's commonLabels carry the environment; the chart's own labels tell it apart.
    image = "registry.k8s.io/descheduler/descheduler:v0.35.0"
    chart = in_environment("prod", image, **{"helm.sh/chart": "descheduler-0.35.0"})
    managed = in_environment("prod", image, **{"app.kubernetes.io/managed-by": "Helm"})
    assert check_resource(prod_images_by_digest, DEPLOY, chart) == NA
    assert check_resource(prod_images_by_digest, DEPLOY, managed) == NA


def test_the_environments_are_configurable() -> None:
    staging = in_environment("staging", "r.example/app:1.2.3")
    prod = in_environment("prod", "r.example/app:1.2.3")
    config = {"environments": ["staging"]}
    (violation,) = check_resource(prod_images_by_digest, DEPLOY, staging, config)
    assert "in staging every image is pinned by digest: `make images PIN=staging`" in violation
    assert check_resource(prod_images_by_digest, DEPLOY, prod, config) == NA
