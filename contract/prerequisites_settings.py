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

from typing import Any

from pydantic import model_validator

from contract.chart_settings import ChartSource
from contract.model import ConfigModel, DnsLabel, SemVerOrV

#: NVIDIA's Helm repository, which serves both operators' charts.
NVIDIA_HELM_REPO = "https://helm.ngc.nvidia.com/nvidia"
DEFAULT_GPU_OPERATOR_VERSION = "v25.3.4"
DEFAULT_NETWORK_OPERATOR_VERSION = "v25.10.0"


#: What the GPU Operator is always given, by chart value and container env: a container that asks for no GPU does
#: not see its node's GPUs through its image's ``NVIDIA_VISIBLE_DEVICES=all`` (every CUDA base image sets it). The
#: toolkit ignores the variable in unprivileged containers and takes the device list from volume mounts, which only
#: the device plugin makes, for the GPUs it allocated (NVIDIA's "preventing unprivileged access to GPUs").
GPU_VISIBILITY_LOCKDOWN: dict[str, dict[str, str]] = {
    "toolkit": {
        "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED": "false",
        "ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS": "true",
    },
    "devicePlugin": {"DEVICE_LIST_STRATEGY": "volume-mounts"},
}


class OperatorChart(ConfigModel):
    """One operator the stack may install, at a pinned chart version, into a namespace of its own."""

    install: bool = False
    chart: ChartSource
    chart_version: SemVerOrV
    namespace: DnsLabel
    #: Laid over the chart's defaults (a cluster's driver, MOFED and device plugin choices are its own).
    values: dict[str, object] = {}

    def chart_values(self) -> dict[str, Any]:
        """The values the chart is installed with."""
        return dict(self.values)


def _env(values: dict[str, object], part: str) -> list[object]:
    section = values.get(part)
    env = section.get("env") if isinstance(section, dict) else None
    return list(env) if isinstance(env, list) else []


class GpuOperatorChart(OperatorChart):
    chart: ChartSource = ChartSource(repo=NVIDIA_HELM_REPO, name="gpu-operator")
    chart_version: SemVerOrV = DEFAULT_GPU_OPERATOR_VERSION
    namespace: DnsLabel = "gpu-operator"

    @model_validator(mode="after")
    def _keeps_gpu_visibility_locked(self) -> GpuOperatorChart:
        for part, locked in GPU_VISIBILITY_LOCKDOWN.items():
            section = self.values.get(part, {})
            if not isinstance(section, dict):
                raise ValueError(f"values.{part}: expected a mapping")
            if not isinstance(section.get("env", []), list):
                raise ValueError(f"values.{part}.env: expected a list of {{name, value}}")
            for i, item in enumerate(_env(self.values, part)):
                if not isinstance(item, dict):
                    continue
                name = str(item.get("name"))
                if name in locked and str(item.get("value")) != locked[name]:
                    raise ValueError(
                        f"values.{part}.env[{i}]: {name} must stay {locked[name]!r}: otherwise a container that asks "
                        "for no GPU sees every GPU of its node through its image's NVIDIA_VISIBLE_DEVICES"
                    )
        return self

    def chart_values(self) -> dict[str, Any]:
        """``values`` with :data:`GPU_VISIBILITY_LOCKDOWN` added to the toolkit's and the device plugin's env."""
        out: dict[str, Any] = dict(self.values)
        for part, locked in GPU_VISIBILITY_LOCKDOWN.items():
            env = [e for e in _env(self.values, part) if not (isinstance(e, dict) and e.get("name") in locked)]
            section = out.get(part)
            out[part] = {
                **(section if isinstance(section, dict) else {}),
                "env": [*env, *({"name": k, "value": v} for k, v in locked.items())],
            }
        return out


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
