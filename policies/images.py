"""Container images are pinned: by tag or digest everywhere (`latest` and untagged images are refused), and by digest
in the environments that run releases (prod by default).

``prod-images-by-digest`` reads a workload's own ``gpucluster.io/environment`` label, which every workload of ours
carries (the daemons' Deployments, the virtual node, the fabric exporter's DaemonSet, the inference Deployments:
components/cluster.py passes the stack's labels to each). The chart-rendered workloads (Kueue, JobSet, the
descheduler, kube-state-metrics, the DCGM exporter) are out of this policy's reach: most do not carry the label, and
the one that does through the chart's ``commonLabels`` (the descheduler) is told apart by the labels every chart
sets (``helm.sh/chart``, ``app.kubernetes.io/managed-by: Helm``). They are pinned by chart version and image tag,
which ``images-pinned`` holds them to.
"""

from __future__ import annotations

from pulumi_policy import ResourceValidationArgs, ResourceValidationPolicy

from contract import image_refs as refs
from contract.constants import ENVIRONMENT_LABEL
from contract.issues import shown
from policies.common import MANDATORY, Report, config_value, containers, labels_of, object_ref, pod_spec, schema


def image_problem(image: str) -> str | None:
    """Why an image reference may not run (not a reference at all, or not pinned), or None when it may: the one
    rule of ``contract/image_refs.py``, which ``gpucluster submit`` holds job specs to as well."""
    problem = refs.image_problem(image)
    return None if problem is None else f"image {shown(image)} {problem}"


def _validate(args: ResourceValidationArgs, report: Report) -> None:
    spec = pod_spec(args.resource_type, args.props)
    if spec is None:
        args.not_applicable("no pod template")
        return
    for field, c in containers(spec):
        problem = image_problem(str(c.get("image") or ""))
        if problem:
            report(f"{object_ref(args.props, args.name)} {field}/{c.get('name')}: {problem}; name a tag or digest")


images_pinned = ResourceValidationPolicy(
    name="images-pinned",
    description="Container images carry a pinned tag or digest; latest is refused.",
    enforcement_level=MANDATORY,
    validate=_validate,
)


#: Environments whose every image is pinned by digest: a tag can be pushed again, a digest names one build.
DEFAULT_DIGEST_ENVIRONMENTS = ["prod"]
#: The labels a chart sets on what it renders.
CHART_LABEL = "helm.sh/chart"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"


def _validate_by_digest(args: ResourceValidationArgs, report: Report) -> None:
    spec = pod_spec(args.resource_type, args.props)
    if spec is None:
        args.not_applicable("no pod template")
        return
    labels = labels_of(args.props)
    if CHART_LABEL in labels or labels.get(MANAGED_BY_LABEL) == "Helm":
        args.not_applicable("rendered from a chart: pinned by chart version and image tag (images-pinned)")
        return
    environment = labels.get(ENVIRONMENT_LABEL)
    environments = [str(e) for e in config_value(args.get_config(), "environments", DEFAULT_DIGEST_ENVIRONMENTS)]
    if environment not in environments:
        args.not_applicable(f"{ENVIRONMENT_LABEL} {environment!r} is not one of {environments}")
        return
    for field, c in containers(spec):
        image = str(c.get("image") or "")
        if not refs.by_sha256(image):
            report(
                f"{object_ref(args.props, args.name)} {field}/{c.get('name')}: image {image!r} is not pinned by "
                f"digest; in {environment} every image is pinned by digest: `make images PIN={environment}` writes "
                "ours into the stack, and the inference services' images are their teams' releases by digest"
            )


prod_images_by_digest = ResourceValidationPolicy(
    name="prod-images-by-digest",
    description="In prod (the configured environments) every workload's images are pinned by sha256 digest.",
    enforcement_level=MANDATORY,
    validate=_validate_by_digest,
    config_schema=schema(
        environments={"type": "array", "items": {"type": "string"}, "default": DEFAULT_DIGEST_ENVIRONMENTS},
    ),
)
