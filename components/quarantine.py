"""Quarantine: the controller that takes a hot or erroring GPU node away from training and leaves it to inference.

The controller (``gpucluster-quarantine``, daemons/quarantine/) reads the firing quarantine alerts from Prometheus
and puts the NoExecute taint ``gpucluster.io/quarantine=<reason>`` on the node, with its label and reason and time
annotations, in one patch; Kubernetes' taint manager then evicts the training pods, inference tolerates the taint.
A circuit breaker caps the share of a flavor's nodes it may quarantine within a window. Every quarantined node is
listed in the ledger ConfigMap ``gpucluster-quarantine`` of its namespace. Extra replicas stand by behind a Lease;
only the leader writes.

Least privilege, the daemon's own rules (``daemons/quarantine/rbac.py``): cluster-wide it reads and patches Nodes
and nothing else; Events about Nodes only in ``default``; in its own namespace its Lease, the one ledger
ConfigMap and Events about the ledger.
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
from components.quarantine_settings import LEDGER_NAME, QuarantineSettings
from components.rbac import grant
from daemons.quarantine import rbac as daemon_rbac

APP = "gpucluster-quarantine"
SETTINGS_DIR = "/etc/gpucluster/quarantine"
METRICS_PORT = 9108
PART_OF = {"app.kubernetes.io/part-of": "gpucluster", "app.kubernetes.io/component": "capacity"}
#: The API server accepts Events about a Node (cluster-scoped) only in this namespace.
EVENTS_NAMESPACE = "default"


def cluster_rules() -> list[dict[str, Any]]:
    """The ClusterRole: Nodes (read all, patch the quarantine)."""
    return [r.to_k8s() for r in daemon_rbac.CLUSTER_RULES]


def node_event_rules() -> list[dict[str, Any]]:
    """In ``default``: Events about Nodes."""
    return [r.to_k8s() for r in daemon_rbac.NODE_EVENT_RULES]


def namespace_rules(lease_name: str) -> list[dict[str, Any]]:
    """In its own namespace: the Lease, the ledger ConfigMap and Events about the ledger."""
    return [r.to_k8s() for r in daemon_rbac.namespace_rules(lease_name)]


def _shape(settings: QuarantineSettings) -> DaemonShape:
    return DaemonShape(app=APP, image=settings.image, settings_dir=SETTINGS_DIR, metrics_port=METRICS_PORT)


def quarantine_pod_spec(settings: QuarantineSettings, config_map: str) -> dict[str, Any]:
    return daemon_pod_spec(_shape(settings), config_map)


@dataclass(frozen=True)
class QuarantineArgs:
    #: Complete settings: the GPU flavors filled from the stack.
    settings: QuarantineSettings
    labels: Mapping[str, str] = field(default_factory=dict)
    #: Its namespace (and Prometheus, where the stack deploys one) must exist before its Roles and Deployment.
    depends_on: tuple[pulumi.Resource, ...] = field(default=())

    def __post_init__(self) -> None:
        s = self.settings
        if not isinstance(s, QuarantineSettings):
            raise TypeError(f"QuarantineArgs.settings: expected QuarantineSettings, got {type(s).__name__}")
        if not s.enabled:
            raise ValueError("QuarantineArgs.settings.enabled: the controller is disabled; build none")
        if not s.flavors:
            raise ValueError(
                "QuarantineArgs.settings.flavors: no GPU flavor to quarantine nodes of (the stack fills it)"
            )
        for key in self.labels:
            check_qualified_name(key, "QuarantineArgs.labels key")


class Quarantine(pulumi.ComponentResource):
    """ServiceAccount, least-privilege RBAC, settings ConfigMap and the controller's Deployment."""

    def __init__(self, name: str, args: QuarantineArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpucluster:capacity:Quarantine", name, None, opts)
        s = args.settings
        ns = s.namespace
        labels = {**args.labels, **PART_OF, "app.kubernetes.io/name": APP}
        child = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))

        self.service_account, rbac = daemon_service_account(
            self, f"{name}-sa", app=APP, namespace=ns, labels=labels, depends_on=args.depends_on
        )
        self.cluster_role, self.cluster_role_binding = grant(
            self,
            (f"{name}-clusterrole", f"{name}-clusterrolebinding"),
            name=APP,
            rules=cluster_rules(),
            **rbac,
        )
        self.events_role, self.events_role_binding = grant(
            self,
            (f"{name}-events-role", f"{name}-events-rolebinding"),
            name=f"{APP}-events",
            namespace=EVENTS_NAMESPACE,
            rules=node_event_rules(),
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
        config_name = f"{APP}-settings"
        # The daemon's settings file is the whole model (the daemon ignores image and replicas).
        self.config_map = k8s.core.v1.ConfigMap(
            f"{name}-settings",
            metadata={"name": config_name, "namespace": ns, "labels": {**labels, SETTINGS_LABEL: "quarantine"}},
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
                self.events_role_binding,
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
                "ledger": f"{ns}/{LEDGER_NAME}",
                "maxShare": s.max_share,
                "breakerWindow": s.breaker_window,
                "flavors": [f.name for f in s.flavors],
            }
        )
