"""Settings of the JobSet controller (``components/jobset.py``): ``gpucluster:jobset``.

JobSet (sigs.k8s.io/jobset) is the gang workload training jobs are submitted as: Kueue admits it all or nothing,
and its failure policy restarts the whole gang in place without giving its quota up. The chart is pinned to the
version Kueue v0.17.0 itself requires.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from components.chart_settings import ChartSource, image_problems
from components.model import ConfigModel, DnsLabel, Image, Problem, QualifiedName, SemVer, Toleration

JOBSET_CHART_VERSION = "0.11.1"
JOBSET_IMAGE_REPOSITORY = "registry.k8s.io/jobset/jobset"
#: The API the training JobSets are written in.
JOBSET_API = "jobset.x-k8s.io/v1alpha2"


class JobSetSettings(ConfigModel):
    """The JobSet controller, installed from its pinned chart (CRD, controller, webhooks)."""

    enabled: bool = True
    chart_version: SemVer = JOBSET_CHART_VERSION
    chart: ChartSource = ChartSource(oci="oci://registry.k8s.io/jobset/charts/jobset")
    namespace: DnsLabel = "jobset-system"
    #: The controller's image (``repository:tag``, a digest may follow). Unset: upstream's at the chart's release,
    #: ``registry.k8s.io/jobset/jobset:v<chartVersion>``. Always set in the chart's values, never left to the chart:
    #: the chart inside JobSet's Go module names a staging image at the tag ``main``, pulled Always.
    image: Image | None = None
    #: Where the controller's pods run (the chart's nodeSelector and tolerations), as a rule system nodes.
    pod_node_selector: dict[QualifiedName, str] = {}
    pod_tolerations: list[Toleration] = []
    extra_values: dict[str, Any] = {}

    @property
    def controller_image(self) -> str:
        return self.image or f"{JOBSET_IMAGE_REPOSITORY}:v{self.chart_version.removeprefix('v')}"

    def rule_problems(self) -> Iterator[Problem]:
        yield from image_problems(self.image, JOBSET_IMAGE_REPOSITORY, self.chart_version)
