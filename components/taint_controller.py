"""TaintController: puts the NoSchedule burst taint on the virtual node while in-cluster GPUs are free.

The daemon (``gpucluster-taint-controller``, daemons/taint_controller/) reads GPU headroom and pending inference
pods from Prometheus and, with hysteresis and hold times, adds or removes one taint on one Node. Extra replicas
stand by behind a Lease; only the leader patches.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.constants import SETTINGS_LABEL
from components.model import check_qualified_name
from components.rbac import grant
from components.taint_controller_settings import TAINT_EFFECT, TaintControllerSettings

APP = "gpucluster-taint-controller"
SETTINGS_DIR = "/etc/gpucluster/taint-controller"
SETTINGS_FILE = "settings.json"
METRICS_PORT = 9102
PART_OF = {"app.kubernetes.io/part-of": "gpucluster", "app.kubernetes.io/component": "burst"}
_NONROOT = 65534


def cluster_rules(node_name: str) -> list[dict[str, Any]]:
    """Nodes only. list/watch cannot be narrowed to a name; get and patch (the taint) touch the virtual node only."""
    return [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"], "resourceNames": [node_name]},
    ]


def namespace_rules(lease_name: str) -> list[dict[str, Any]]:
    """In its own namespace: leader election on one Lease."""
    return [
        # A Lease that does not exist yet can only be created without a name restriction.
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "update", "patch"],
            "resourceNames": [lease_name],
        },
    ]


#: The API server accepts Events about a Node (cluster-scoped) only in this namespace.
EVENTS_NAMESPACE = "default"


def event_rules() -> list[dict[str, Any]]:
    """In ``default``: Events about the virtual node (what it decided, and why it could not)."""
    return [{"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]}]


def taint_controller_pod_spec(settings: TaintControllerSettings, config_map: str) -> dict[str, Any]:
    return {
        "serviceAccountName": APP,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": _NONROOT,
            "runAsGroup": _NONROOT,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        # Standby replicas on other nodes, so losing one node never leaves the taint unmanaged.
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": {"app.kubernetes.io/name": APP}},
            }
        ],
        "containers": [
            {
                "name": "controller",
                "image": settings.image,
                "command": ["gpucluster-taint-controller"],
                "args": [
                    "--settings",
                    f"{SETTINGS_DIR}/{SETTINGS_FILE}",
                    "--listen",
                    f"0.0.0.0:{METRICS_PORT}",
                ],
                "env": [
                    # The Lease holder identity.
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                ],
                "ports": [{"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}],
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": "metrics"}, "periodSeconds": 10},
                "livenessProbe": {
                    "httpGet": {"path": "/healthz", "port": "metrics"},
                    "periodSeconds": 20,
                    "failureThreshold": 3,
                },
                "resources": {"requests": {"cpu": "20m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"]},
                },
                "volumeMounts": [{"name": "settings", "mountPath": SETTINGS_DIR, "readOnly": True}],
            }
        ],
        "volumes": [{"name": "settings", "configMap": {"name": config_map}}],
    }


@dataclass(frozen=True)
class TaintControllerArgs:
    #: Complete settings: ``nodeName`` and ``taintKey`` filled from the virtual node and ``burstTaintKey``.
    settings: TaintControllerSettings
    labels: Mapping[str, str] = field(default_factory=dict)
    depends_on: tuple[pulumi.Resource, ...] = field(default=())

    def __post_init__(self) -> None:
        s = self.settings
        if not isinstance(s, TaintControllerSettings):
            raise TypeError(f"TaintControllerArgs.settings: expected TaintControllerSettings, got {type(s).__name__}")
        if not s.enabled:
            raise ValueError("TaintControllerArgs.settings.enabled: the controller is disabled; build none")
        if s.taint_effect != TAINT_EFFECT:
            raise ValueError(f"TaintControllerArgs.settings.taint_effect: {s.taint_effect!r}; only NoSchedule")
        if s.taint_key.startswith("virtual-kubelet.io/"):
            raise ValueError(
                f"TaintControllerArgs.settings.taint_key: {s.taint_key!r} is the virtual node's own taint; "
                "give the burst taint key"
            )
        for key in self.labels:
            check_qualified_name(key, "TaintControllerArgs.labels key")


class TaintController(pulumi.ComponentResource):
    """ServiceAccount, nodes-only ClusterRole, a lease-and-events Role, settings ConfigMap, the Deployment."""

    def __init__(self, name: str, args: TaintControllerArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpucluster:burst:TaintController", name, None, opts)
        s = args.settings
        ns = s.namespace
        labels = {**args.labels, **PART_OF, "app.kubernetes.io/name": APP}
        selector = {"app.kubernetes.io/name": APP}
        child = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))
        subject = [{"kind": "ServiceAccount", "name": APP, "namespace": ns}]
        role_name = f"{APP}-{s.node_name}"

        self.service_account = k8s.core.v1.ServiceAccount(
            f"{name}-sa", metadata={"name": APP, "namespace": ns, "labels": labels}, opts=child
        )
        rbac = {
            "service_account": self.service_account,
            "subject": subject,
            "labels": labels,
            "depends_on": list(args.depends_on),
        }
        self.cluster_role, self.cluster_role_binding = grant(
            self,
            (f"{name}-clusterrole", f"{name}-clusterrolebinding"),
            name=role_name,
            rules=cluster_rules(s.node_name),
            **rbac,
        )
        self.role, self.role_binding = grant(
            self,
            (f"{name}-role", f"{name}-rolebinding"),
            name=APP,
            namespace=ns,
            rules=namespace_rules(s.lease_name),
            **rbac,
        )
        self.events_role, self.events_role_binding = grant(
            self,
            (f"{name}-events-role", f"{name}-events-rolebinding"),
            name=f"{APP}-events",
            namespace=EVENTS_NAMESPACE,
            rules=event_rules(),
            **rbac,
        )
        config_name = f"{APP}-settings"
        self.config_map = k8s.core.v1.ConfigMap(
            f"{name}-settings",
            metadata={
                "name": config_name,
                "namespace": ns,
                "labels": {**labels, SETTINGS_LABEL: "taint-controller"},
            },
            data={SETTINGS_FILE: s.to_json()},
            opts=child,
        )
        scrape = {
            "prometheus.io/scrape": "true",
            "prometheus.io/port": str(METRICS_PORT),
            "prometheus.io/path": "/metrics",
        }
        self.deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment",
            metadata={"name": APP, "namespace": ns, "labels": labels},
            spec={
                "replicas": s.replicas,
                "selector": {"matchLabels": selector},
                "template": {
                    "metadata": {"labels": labels, "annotations": scrape},
                    "spec": taint_controller_pod_spec(s, config_name),
                },
            },
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[
                    self.service_account,
                    self.cluster_role_binding,
                    self.role_binding,
                    self.config_map,
                    *args.depends_on,
                ],
            ),
        )
        self.register_outputs(
            {
                "deployment": APP,
                "namespace": ns,
                "replicas": s.replicas,
                "nodeName": s.node_name,
                "taintKey": s.taint_key,
            }
        )
