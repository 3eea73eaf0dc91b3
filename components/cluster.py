"""GpuCluster: the whole shared cluster of one stack, one component per capability."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components.config import StackConfig
from components.descheduler import Descheduler, DeschedulerArgs
from components.queues import Queues, QueuesArgs
from components.storage import Storage, StorageArgs
from components.telemetry import Telemetry, TelemetryArgs


@dataclass(frozen=True)
class GpuClusterArgs:
    config: StackConfig

    def __post_init__(self) -> None:
        overlap = set(self.config.training_namespaces) & set(self.config.inference_namespaces)
        if overlap:
            raise ValueError(f"GpuClusterArgs.config: namespaces both training and inference: {sorted(overlap)}")


class GpuCluster(pulumi.ComponentResource):
    """Namespaces, queues and priorities, checkpoint storage, the gradual-return descheduler and telemetry."""

    def __init__(self, name: str, args: GpuClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpucluster:cluster:GpuCluster", name, None, opts)
        cfg = args.config
        labels = {"app.kubernetes.io/part-of": "gpucluster", "gpucluster.io/environment": cfg.environment}

        self.namespaces: dict[str, k8s.core.v1.Namespace] = {}
        for ns, role in [
            *((n, "training") for n in cfg.training_namespaces),
            *((n, "inference") for n in cfg.inference_namespaces),
        ]:
            self.namespaces[ns] = k8s.core.v1.Namespace(
                f"{name}-ns-{ns}",
                metadata={"name": ns, "labels": {**labels, "gpucluster.io/workload": role}},
                opts=pulumi.ResourceOptions(parent=self),
            )

        self.queues = Queues(
            f"{name}-queues",
            QueuesArgs(
                kueue=cfg.kueue,
                cohort=cfg.cohort,
                flavors=cfg.flavors,
                queues=cfg.queues,
                teams=cfg.teams,
                priorities=cfg.priorities,
                labels=labels,
                namespaces=self.namespaces,
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.storage = Storage(
            f"{name}-storage",
            StorageArgs(
                settings=cfg.storage,
                namespaces=cfg.training_namespaces,
                labels=labels,
                namespace_resources=self.namespaces,
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.descheduler: Descheduler | None = None
        if cfg.descheduler.enabled:
            self.descheduler = Descheduler(
                f"{name}-descheduler",
                DeschedulerArgs(
                    settings=cfg.descheduler,
                    burst_taint_key=cfg.burst_taint_key,
                    inference_namespaces=cfg.inference_namespaces,
                    labels=labels,
                ),
                opts=pulumi.ResourceOptions(parent=self),
            )

        self.telemetry = Telemetry(
            f"{name}-telemetry", TelemetryArgs(settings=cfg.telemetry), opts=pulumi.ResourceOptions(parent=self)
        )

        self.outputs: dict[str, object] = {
            "environment": cfg.environment,
            "gpus": {f.name: f.capacity for f in cfg.flavors},
            "clusterQueues": {q: dict(spec.quota) for q, spec in cfg.queues.items()},
            "localQueues": sorted(self.queues.local_queues),
            "priorityClasses": {
                "training": cfg.priorities.pod.training.name,
                "inference": cfg.priorities.pod.inference.name,
            },
            "workloadPriorityClasses": [w.name for w in cfg.priorities.workload],
            "storageClass": cfg.storage.storage_class_name,
            "checkpointIntervalMinutes": round(self.storage.checkpoint_interval_minutes, 1),
            "burstTaintKey": cfg.burst_taint_key,
            "gpuTempLimitC": cfg.telemetry.alerts.gpu_temp_limit_c,
        }
        self.register_outputs(self.outputs)
