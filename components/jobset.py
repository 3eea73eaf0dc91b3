"""The JobSet controller: the gang workload that training jobs are (``components/training``).

Installed from its pinned chart: the ``jobsets.jobset.x-k8s.io`` CRD, the controller and its webhooks. Kueue's
``jobset.x-k8s.io/jobset`` integration (on in ``queues.kueue_manager_config``) then admits each JobSet as one
workload, and the JobSet failure policy the training manifest sets restarts the whole gang in place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.charts import helm_chart, resolve_chart
from contract.jobset_settings import JobSetSettings


@dataclass(frozen=True)
class JobSetArgs:
    settings: JobSetSettings
    labels: Mapping[str, str] = field(default_factory=dict)
    #: Labels of its namespace besides ``labels`` (Pod Security's).
    namespace_labels: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.settings.enabled:
            raise ValueError("JobSetArgs.settings: jobset.enabled is false; do not create the component")


def jobset_chart_values(settings: JobSetSettings) -> dict[str, Any]:
    """Helm values for the JobSet chart: two controller replicas with leader election, the controller's image at the
    chart's release and where it runs, plus the stack's extras."""
    controller = {"replicas": 2, "leaderElection": {"enable": True}, **settings.placement_values()}
    values: dict[str, Any] = {"image": settings.image_values(), "controller": controller}
    for key, value in settings.extra_values.items():
        if isinstance(value, Mapping) and isinstance(values.get(key), dict):
            values[key] = {**values[key], **value}
        else:
            values[key] = value
    return values


#: The chart's webhook certificate Secret: rendered with empty keys that the controller fills in (internal
#: certificate management). Pulumi must neither put the empty values back nor keep the certificate in clear.
WEBHOOK_SECRET_SUFFIX = "webhook-server-cert"


def webhook_secret_transform(args: pulumi.ResourceTransformArgs) -> pulumi.ResourceTransformResult | None:
    """The chart's webhook certificate Secret: its data a secret output that Pulumi leaves to the controller."""
    if args.type_ != "kubernetes:core/v1:Secret":
        return None
    metadata = args.props.get("metadata")
    name = str(metadata.get("name") or "") if isinstance(metadata, dict) else ""
    if not name.endswith(WEBHOOK_SECRET_SUFFIX):
        return None
    opts = pulumi.ResourceOptions.merge(
        args.opts, pulumi.ResourceOptions(additional_secret_outputs=["data"], ignore_changes=["data"])
    )
    return pulumi.ResourceTransformResult(props=args.props, opts=opts)


class JobSet(pulumi.ComponentResource):
    """The JobSet controller from its pinned chart, in its own namespace."""

    def __init__(self, name: str, args: JobSetArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpucluster:jobset:JobSet", name, None, opts)
        s = args.settings
        self.namespace = k8s.core.v1.Namespace(
            f"{name}-namespace",
            metadata={"name": s.namespace, "labels": {**args.labels, **args.namespace_labels}},
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.chart = helm_chart(
            f"{name}-chart",
            resolve_chart(s.chart, s.chart_version),
            namespace=s.namespace,
            values=jobset_chart_values(s),
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=[self.namespace], transforms=[webhook_secret_transform]
            ),
        )
        self.register_outputs({"namespace": s.namespace, "chartVersion": s.chart_version})
