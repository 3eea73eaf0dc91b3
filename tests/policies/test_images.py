"""images-pinned: every image pinned by a version tag or a digest."""

from __future__ import annotations

import pytest

from policies.images import image_problem, images_pinned
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
