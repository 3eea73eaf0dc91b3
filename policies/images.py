"""Every container image is pinned by tag or digest; `latest` and untagged images are refused."""

from __future__ import annotations

import re

from pulumi_policy import ResourceValidationArgs, ResourceValidationPolicy

from policies.common import MANDATORY, Report, containers, object_ref, pod_spec

_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


def image_problem(image: str) -> str | None:
    """Why an image reference is not pinned, or None when it is."""
    if not image:
        return "has no image"
    if _DIGEST.search(image):
        return None
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return f"image {image!r} has no tag (it would float to latest)"
    tag = last.rsplit(":", 1)[1]
    if tag == "latest" or not tag:
        return f"image {image!r} uses the floating tag {tag or '(empty)'!r}"
    return None


def _validate(args: ResourceValidationArgs, report: Report) -> None:
    spec = pod_spec(args.resource_type, args.props)
    if spec is None:
        args.not_applicable("no pod template")
        return
    for field, c in containers(spec):
        problem = image_problem(str(c.get("image") or ""))
        if problem:
            report(f"{object_ref(args.props, args.name)} {field}/{c.get('name')}: {problem}; pin a tag or digest")


images_pinned = ResourceValidationPolicy(
    name="images-pinned",
    description="Container images carry a pinned tag or digest; latest is refused.",
    enforcement_level=MANDATORY,
    validate=_validate,
)
