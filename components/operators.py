"""NVIDIA's GPU Operator and Network Operator, for a cluster that lets the stack own them
(``gpucluster:prerequisites``' ``gpuOperator`` / ``networkOperator`` with ``install: true``).

The GPU Operator runs the driver, the container toolkit and the device plugin that advertises ``nvidia.com/gpu``;
the Network Operator the NIC drivers and the RDMA device plugin that advertises a fabric's RDMA resource. Each goes
into a namespace of its own, labelled for Pod Security ``privileged`` (its pods load kernel modules and see every
device), from its chart at the pinned version. What the cluster runs already is not installed twice: the
prerequisites check (``components/prerequisites.py``) asks the cluster for what the stack does not install.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from components.charts import helm_chart, resolve_chart
from contract.guardrails_settings import POD_SECURITY_PREFIX
from contract.model import check_qualified_name
from contract.prerequisites_settings import OperatorChart, PrerequisitesSettings


@dataclass(frozen=True)
class OperatorsArgs:
    settings: PrerequisitesSettings
    labels: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.settings, PrerequisitesSettings):
            raise TypeError(
                f"OperatorsArgs.settings: expected PrerequisitesSettings, got {type(self.settings).__name__}"
            )
        for key in self.labels:
            check_qualified_name(key, "OperatorsArgs.labels key")

    @property
    def installed(self) -> dict[str, OperatorChart]:
        """The operators to install, by their chart's name."""
        s = self.settings
        return {
            name: o
            for name, o in (("gpu-operator", s.gpu_operator), ("network-operator", s.network_operator))
            if o.install
        }


class Operators(pulumi.ComponentResource):
    """A privileged namespace and a chart for each operator the stack installs."""

    def __init__(self, name: str, args: OperatorsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpucluster:prerequisites:Operators", name, None, opts)
        self.charts: dict[str, k8s.helm.v4.Chart] = {}
        for chart_name, operator in args.installed.items():
            labels = {
                **args.labels,
                **{f"{POD_SECURITY_PREFIX}{m}": "privileged" for m in ("enforce", "warn", "audit")},
            }
            namespace = k8s.core.v1.Namespace(
                f"{name}-{chart_name}-ns",
                metadata={"name": operator.namespace, "labels": labels},
                opts=pulumi.ResourceOptions(parent=self),
            )
            self.charts[chart_name] = helm_chart(
                f"{name}-{chart_name}",
                resolve_chart(operator.chart, operator.chart_version),
                namespace=operator.namespace,
                values=operator.chart_values(),
                opts=pulumi.ResourceOptions(parent=self, depends_on=[namespace]),
            )
        self.register_outputs(
            {name: {"namespace": o.namespace, "chartVersion": o.chart_version} for name, o in args.installed.items()}
        )
