"""The gradual return: the descheduler brings burst inference home a bounded few pods at a time.

While in-cluster GPUs are free, the taint controller puts the NoSchedule burst taint on the virtual node. The
descheduler's ``RemovePodsViolatingNodeTaints`` then evicts inference pods there that do not tolerate it —
only that taint, only in inference namespaces, only on the virtual node, only when the pod fits elsewhere,
through the eviction API (so PodDisruptionBudgets hold), and never more than the configured few per interval.
A NoExecute taint would do the same in one stroke and take production down; this never does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi

from components.charts import helm_chart, resolve_chart
from contract.descheduler_settings import DeschedulerSettings
from contract.image_refs import tag_of

POLICY_API_VERSION = "descheduler/v1alpha2"
PROFILE = "gpucluster-burst-return"
#: The DefaultEvictor's handling of ``descheduler.alpha.kubernetes.io/prefer-no-eviction`` (descheduler v0.36.0:
#: ``Mandatory`` filters such pods out of every eviction; ``Preferred`` treats it as a preference).
NO_EVICTION_POLICY = "Mandatory"
NO_EVICTION_ANNOTATION = "descheduler.alpha.kubernetes.io/prefer-no-eviction"


@dataclass(frozen=True)
class DeschedulerArgs:
    settings: DeschedulerSettings
    burst_taint_key: str
    inference_namespaces: Sequence[str]
    labels: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.burst_taint_key:
            raise ValueError("DeschedulerArgs.burst_taint_key: the taint to act on is required")
        if not self.inference_namespaces:
            raise ValueError("DeschedulerArgs.inference_namespaces: name at least one; never deschedule everything")


def descheduler_policy(
    settings: DeschedulerSettings, burst_taint_key: str, namespaces: Sequence[str]
) -> dict[str, Any]:
    """The DeschedulerPolicy (``descheduler/v1alpha2``) without apiVersion/kind, as the chart's values take it."""
    policy: dict[str, Any] = {
        "maxNoOfPodsToEvictPerNode": settings.max_pods_to_evict_per_node,
        "maxNoOfPodsToEvictTotal": settings.max_pods_to_evict_total,
        "profiles": [
            {
                "name": PROFILE,
                "pluginConfig": [
                    # A replica make-before-break moved on purpose carries prefer-no-eviction: never evict it
                    # (Mandatory; the default, Preferred, makes the annotation only a preference).
                    {
                        "name": "DefaultEvictor",
                        "args": {"nodeFit": settings.node_fit, "noEvictionPolicy": NO_EVICTION_POLICY},
                    },
                    {
                        "name": "RemovePodsViolatingNodeTaints",
                        "args": {
                            "includedTaints": [burst_taint_key],
                            "namespaces": {"include": list(namespaces)},
                        },
                    },
                ],
                "plugins": {"deschedule": {"enabled": ["RemovePodsViolatingNodeTaints"]}},
            }
        ],
    }
    if settings.node_selector:
        policy["nodeSelector"] = settings.node_selector
    if settings.max_pods_to_evict_per_namespace is not None:
        policy["maxNoOfPodsToEvictPerNamespace"] = settings.max_pods_to_evict_per_namespace
    return policy


def descheduler_chart_values(
    settings: DeschedulerSettings, burst_taint_key: str, namespaces: Sequence[str]
) -> dict[str, Any]:
    image = tag_of(settings.image)
    assert image is not None, "DeschedulerSettings refuses an image without a tag"
    values: dict[str, Any] = {
        "kind": "Deployment",
        "image": {"repository": image[0], "tag": image[1]},
        "deschedulingInterval": settings.interval,
        "deschedulerPolicyAPIVersion": POLICY_API_VERSION,
        "deschedulerPolicy": descheduler_policy(settings, burst_taint_key, namespaces),
    }
    if settings.pod_node_selector:
        values["nodeSelector"] = dict(settings.pod_node_selector)
    if settings.pod_tolerations:
        values["tolerations"] = [t.to_k8s() for t in settings.pod_tolerations]
    return values


class Descheduler(pulumi.ComponentResource):
    """kubernetes-sigs descheduler from its pinned chart, running only the burst-return profile."""

    def __init__(self, name: str, args: DeschedulerArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpucluster:descheduler:Descheduler", name, None, opts)
        s = args.settings
        chart = resolve_chart(s.chart, s.chart_version)
        self.policy = descheduler_policy(s, args.burst_taint_key, args.inference_namespaces)
        self.chart = helm_chart(
            f"{name}-chart",
            chart,
            namespace=s.namespace,
            values={
                **descheduler_chart_values(s, args.burst_taint_key, args.inference_namespaces),
                "commonLabels": dict(args.labels),
            },
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs(
            {
                "namespace": s.namespace,
                "interval": s.interval,
                "maxPodsToEvictPerNode": s.max_pods_to_evict_per_node,
                "maxPodsToEvictTotal": s.max_pods_to_evict_total,
            }
        )
