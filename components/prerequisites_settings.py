"""Settings of the cluster prerequisites: ``gpucluster:prerequisites``.

What the stack needs of the cluster that it does not deploy itself (``components/prerequisites.py`` derives the
list from the stack and checks it against the cluster before any resource is changed), and the two NVIDIA operators
a cluster may let the stack own instead (``components/operators.py``):

.. code-block:: yaml

   gpucluster:prerequisites:
     check: true            # refuse preview and up when the cluster lacks one (default)
     gpuOperator:
       install: false       # the stack installs NVIDIA's GPU Operator (it advertises nvidia.com/gpu)
     networkOperator:
       install: false       # the stack installs NVIDIA's Network Operator (it advertises the RDMA resources)

Pure pydantic (no Pulumi).
"""

from __future__ import annotations

from components.chart_settings import ChartSource
from components.model import ConfigModel, DnsLabel, SemVerOrV

#: NVIDIA's Helm repository, which serves both operators' charts.
NVIDIA_HELM_REPO = "https://helm.ngc.nvidia.com/nvidia"
DEFAULT_GPU_OPERATOR_VERSION = "v25.3.4"
DEFAULT_NETWORK_OPERATOR_VERSION = "v25.10.0"


class OperatorChart(ConfigModel):
    """One operator the stack may install, at a pinned chart version, into a namespace of its own."""

    install: bool = False
    chart: ChartSource
    chart_version: SemVerOrV
    namespace: DnsLabel
    #: Laid over the chart's defaults (a cluster's driver, MOFED and device plugin choices are its own).
    values: dict[str, object] = {}


class GpuOperatorChart(OperatorChart):
    chart: ChartSource = ChartSource(repo=NVIDIA_HELM_REPO, name="gpu-operator")
    chart_version: SemVerOrV = DEFAULT_GPU_OPERATOR_VERSION
    namespace: DnsLabel = "gpu-operator"


class NetworkOperatorChart(OperatorChart):
    chart: ChartSource = ChartSource(repo=NVIDIA_HELM_REPO, name="network-operator")
    chart_version: SemVerOrV = DEFAULT_NETWORK_OPERATOR_VERSION
    namespace: DnsLabel = "nvidia-network-operator"


class PrerequisitesSettings(ConfigModel):
    """The cluster add-ons the stack expects, checked before any change, and the operators it may own."""

    #: Refuse ``pulumi preview`` and ``pulumi up`` naming each add-on the cluster lacks.
    check: bool = True
    gpu_operator: GpuOperatorChart = GpuOperatorChart()
    network_operator: NetworkOperatorChart = NetworkOperatorChart()
