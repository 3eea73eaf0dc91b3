"""InferenceService: one production inference app that may burst to the virtual node and comes home gradually.

Stack config: ``gpucluster:inferenceServices``, a list of the entries ``contract/inference_settings.py`` models.

The pods tolerate the virtual node's own taint (``virtual-kubelet.io/provider=gpucluster:NoSchedule``), so they
may run there when the cluster is full, and deliberately do NOT tolerate the burst taint: while the taint
controller has it on the virtual node, no new replica goes out and the descheduler brings the running ones back.

They also tolerate the quarantine taint (``gpucluster.io/quarantine``, NoExecute, any value, no time limit): a GPU
too hot or erroring for training still serves inference, so a replica on a quarantined node keeps running and new
ones may land there; training, which never tolerates it (the policy pack refuses that), leaves the node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from contract.constants import (
    GPU_RESOURCE,
    GPU_TYPE_ANNOTATION,
    PODSET_UNCONSTRAINED_TOPOLOGY,
    QUARANTINE_TAINT_KEY,
    VIRTUAL_NODE_TAINT_KEY,
    VIRTUAL_NODE_TAINT_VALUE,
    WORKLOAD_LABEL,
)
from contract.inference_settings import REQUESTS_METRIC, InferenceServiceSpec
from contract.model import check_qualified_name

PORT_NAME = "http"
#: How often a replica's readiness is probed (in the cluster by the kubelet, rented by the burst provider).
READINESS_PERIOD_SECONDS = 5


def pod_labels(spec: InferenceServiceSpec) -> dict[str, str]:
    """The selector labels of the app's pods (Deployment, PDB, Service and HPA agree on them)."""
    return {"app.kubernetes.io/name": spec.name, "app.kubernetes.io/instance": f"{spec.namespace}.{spec.name}"}


#: Every effect of the quarantine taint, whatever its value (the reason word), for as long as it stays.
QUARANTINE_TOLERATION = {"key": QUARANTINE_TAINT_KEY, "operator": "Exists"}


def burst_tolerations(spec: InferenceServiceSpec) -> list[dict[str, str]]:
    """Tolerate the virtual node (to burst), the quarantine taint (to keep serving on a GPU training must leave) and
    the GPU nodes' taint; never the burst taint (to come home)."""
    out = [
        {
            "key": VIRTUAL_NODE_TAINT_KEY,
            "operator": "Equal",
            "value": VIRTUAL_NODE_TAINT_VALUE,
            "effect": "NoSchedule",
        },
        dict(QUARANTINE_TOLERATION),
    ]
    if spec.gpus_per_replica > 0:
        out.append({"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"})
    return out


def inference_pod_spec(spec: InferenceServiceSpec, priority_class_name: str) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "server",
        "image": spec.image,
        "ports": [{"name": PORT_NAME, "containerPort": spec.port, "protocol": "TCP"}],
        "resources": {
            "requests": {"cpu": spec.resources.cpu, "memory": spec.resources.memory},
            "limits": {"memory": spec.resources.memory},
        },
        # Ready (and sent traffic) only once the server says it can serve; the burst provider runs the same probe
        # against a rented replica. Every 5 s: a replica that finished loading takes traffic within 5 s.
        "readinessProbe": {
            "httpGet": {"path": spec.readiness_path, "port": PORT_NAME},
            "periodSeconds": READINESS_PERIOD_SECONDS,
        },
        "securityContext": {"allowPrivilegeEscalation": False},
    }
    if spec.drain_seconds > 0:
        # Serve on while the endpoints move traffic away (the kubelet runs this before it stops the container;
        # the burst provider keeps a rented instance as long).
        container["lifecycle"] = {"preStop": {"sleep": {"seconds": spec.drain_seconds}}}
    if spec.gpus_per_replica > 0:
        # Extended resources are requested through limits (requests default to them).
        container["resources"]["limits"][GPU_RESOURCE] = str(spec.gpus_per_replica)
    if spec.command is not None:
        container["command"] = list(spec.command)
    if spec.args is not None:
        container["args"] = list(spec.args)
    return {
        "priorityClassName": priority_class_name,
        "tolerations": burst_tolerations(spec),
        "containers": [container],
    }


def milli(value: float) -> str:
    """A quantity in thousandths (``2.5`` -> ``2500m``), the precision the HPA compares at."""
    return f"{round(value * 1000)}m"


def hpa_spec(spec: InferenceServiceSpec) -> dict[str, Any]:
    """The autoscaling/v2 spec: the Service's request rate per replica (through the metrics adapter), CPU, or both."""
    hpa = spec.hpa
    assert hpa is not None
    metrics: list[dict[str, Any]] = []
    if hpa.target_requests_per_replica is not None:
        metrics.append(
            {
                "type": "Object",
                "object": {
                    "describedObject": {"apiVersion": "v1", "kind": "Service", "name": spec.name},
                    "metric": {"name": REQUESTS_METRIC},
                    # AverageValue: the Service's rate divided by the replica count, against this target
                    "target": {
                        "type": "AverageValue",
                        "averageValue": f"{round(hpa.target_requests_per_replica * 1000)}m",
                    },
                },
            }
        )
    if hpa.cpu_target is not None:
        metrics.append(
            {
                "type": "Resource",
                "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": hpa.cpu_target}},
            }
        )
    return {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": spec.name},
        "minReplicas": hpa.min_replicas,
        "maxReplicas": hpa.max_replicas,
        "metrics": metrics,
        "behavior": {"scaleDown": {"stabilizationWindowSeconds": hpa.scale_down_stabilization_seconds}},
    }


@dataclass(frozen=True)
class InferenceServiceArgs:
    spec: InferenceServiceSpec
    #: The stack's inference PriorityClass (``priorities.pod.inference.name``): below training, always.
    priority_class_name: str
    #: The inference namespaces of the stack; the app must live in one of them.
    inference_namespaces: Sequence[str]
    #: The burst GPU type used when the spec names none (``burst.virtualNode.defaultGpuType``), if bursting is on.
    default_gpu_type: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    depends_on: tuple[pulumi.Resource, ...] = field(default=())
    #: Kueue places training by topology on some flavor: the replicas are marked so that its topology-aware
    #: scheduling counts the GPUs they hold as free to a gang (training preempts inference; make-before-break moves
    #: the replicas off the nodes Kueue assigns before the gang starts).
    yield_to_topology_aware_training: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.spec, InferenceServiceSpec):
            raise TypeError(f"InferenceServiceArgs.spec: expected InferenceServiceSpec, got {type(self.spec).__name__}")
        if not self.priority_class_name:
            raise ValueError("InferenceServiceArgs.priority_class_name: the inference PriorityClass is required")
        if self.spec.namespace not in self.inference_namespaces:
            raise ValueError(
                f"InferenceServiceArgs.spec.namespace: {self.spec.namespace!r} is not an inference namespace "
                f"({sorted(self.inference_namespaces)})"
            )
        for key in self.labels:
            check_qualified_name(key, "InferenceServiceArgs.labels key")

    @property
    def gpu_type(self) -> str | None:
        return self.spec.gpu_type or self.default_gpu_type


class InferenceService(pulumi.ComponentResource):
    """Deployment (inference priority, burstable), PodDisruptionBudget, ClusterIP Service and an optional HPA."""

    def __init__(self, name: str, args: InferenceServiceArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpucluster:inference:InferenceService", name, None, opts)
        spec = args.spec
        selector = pod_labels(spec)
        labels = {**args.labels, **selector, WORKLOAD_LABEL: "inference"}
        meta = {"name": spec.name, "namespace": spec.namespace, "labels": labels}
        child = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))
        annotations = dict(spec.pod_annotations)
        if args.gpu_type:
            annotations[GPU_TYPE_ANNOTATION] = args.gpu_type
        if args.yield_to_topology_aware_training:
            annotations[PODSET_UNCONSTRAINED_TOPOLOGY] = "true"

        deployment_spec: dict[str, Any] = {
            "selector": {"matchLabels": selector},
            # Never below the desired count during a rollout: a surge replica may burst, a missing one is an outage.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": spec.max_surge}},
            "template": {
                "metadata": {"labels": labels, "annotations": annotations},
                "spec": inference_pod_spec(spec, args.priority_class_name),
            },
        }
        if spec.hpa is None:
            # With an HPA the replica count is its to set; writing it here would undo its scaling on every update.
            deployment_spec["replicas"] = spec.replicas
        self.deployment = k8s.apps.v1.Deployment(f"{name}-deployment", metadata=meta, spec=deployment_spec, opts=child)
        self.pdb = k8s.policy.v1.PodDisruptionBudget(
            f"{name}-pdb",
            metadata=meta,
            spec={"minAvailable": spec.min_available, "selector": {"matchLabels": selector}},
            opts=child,
        )
        self.service = k8s.core.v1.Service(
            f"{name}-service",
            metadata=meta,
            spec={
                "type": "ClusterIP",
                "selector": selector,
                "ports": [{"name": PORT_NAME, "port": spec.port, "targetPort": PORT_NAME, "protocol": "TCP"}],
            },
            opts=child,
        )
        self.hpa: k8s.autoscaling.v2.HorizontalPodAutoscaler | None = None
        if spec.hpa is not None:
            self.hpa = k8s.autoscaling.v2.HorizontalPodAutoscaler(
                f"{name}-hpa",
                metadata=meta,
                spec=hpa_spec(spec),
                opts=pulumi.ResourceOptions(parent=self, depends_on=[self.deployment, *args.depends_on]),
            )
        self.register_outputs(
            {
                "deployment": spec.name,
                "namespace": spec.namespace,
                "service": spec.name,
                "podDisruptionBudget": spec.name,
                "horizontalPodAutoscaler": spec.name if spec.hpa is not None else None,
                "gpuType": args.gpu_type,
            }
        )
