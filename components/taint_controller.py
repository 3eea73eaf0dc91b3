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
from components.daemon_deployment import (
    SETTINGS_FILE,
    DaemonShape,
    daemon_deployment,
    daemon_pod_spec,
    daemon_service_account,
)
from components.model import check_qualified_name
from components.rbac import grant
from components.taint_controller_settings import TAINT_EFFECT, TaintControllerSettings

APP = "gpucluster-taint-controller"
SETTINGS_DIR = "/etc/gpucluster/taint-controller"
METRICS_PORT = 9102
PART_OF = {"app.kubernetes.io/part-of": "gpucluster", "app.kubernetes.io/component": "burst"}


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


def _shape(settings: TaintControllerSettings) -> DaemonShape:
    return DaemonShape(app=APP, image=settings.image, settings_dir=SETTINGS_DIR, metrics_port=METRICS_PORT)


def taint_controller_pod_spec(settings: TaintControllerSettings, config_map: str) -> dict[str, Any]:
    return daemon_pod_spec(_shape(settings), config_map)


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
        child = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))
        role_name = f"{APP}-{s.node_name}"

        self.service_account, rbac = daemon_service_account(
            self, f"{name}-sa", app=APP, namespace=ns, labels=labels, depends_on=args.depends_on
        )
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
        self.deployment = daemon_deployment(
            f"{name}-deployment",
            _shape(s),
            namespace=ns,
            replicas=s.replicas,
            labels=labels,
            config_map=config_name,
            parent=self,
            depends_on=[
                self.service_account,
                self.cluster_role_binding,
                self.role_binding,
                self.config_map,
                *args.depends_on,
            ],
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
