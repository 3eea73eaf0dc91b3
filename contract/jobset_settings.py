"""Settings of the JobSet controller (``components/jobset.py``): ``gpucluster:jobset``.

JobSet (sigs.k8s.io/jobset) is the gang workload training jobs are submitted as: Kueue admits it all or nothing,
and its failure policy restarts the whole gang in place without giving its quota up. The chart is pinned to the
version Kueue v0.19.2 itself requires (its go.mod; JobSet v0.12.0's webhooks answer a refusal as 422 Invalid,
not 403 Forbidden).
"""

from __future__ import annotations

from typing import Any, ClassVar

from contract.chart_settings import ChartController, ChartSource
from contract.model import DnsLabel, SemVer

JOBSET_CHART_VERSION = "0.12.0"
JOBSET_IMAGE_REPOSITORY = "registry.k8s.io/jobset/jobset"
#: The API the training JobSets are written in.
JOBSET_API = "jobset.x-k8s.io/v1alpha2"


class JobSetSettings(ChartController):
    """The JobSet controller, installed from its pinned chart (CRD, controller, webhooks)."""

    IMAGE_REPOSITORY: ClassVar[str] = JOBSET_IMAGE_REPOSITORY
    enabled: bool = True
    chart_version: SemVer = JOBSET_CHART_VERSION
    chart: ChartSource = ChartSource(oci="oci://registry.k8s.io/jobset/charts/jobset")
    namespace: DnsLabel = "jobset-system"
    extra_values: dict[str, Any] = {}
