"""QuotaController: every ClusterQueue's quota follows the GPUs that are really there.

Kueue's quotas are numbers; nodes that are NotReady, cordoned, never accepted or quarantined still count in them,
so Kueue admits gangs that cannot run. The controller (``gpucluster-quota-controller``, daemons/quota_controller/)
counts each flavor's healthy GPUs and sets every queue's ``nominalQuota`` and ``borrowingLimit`` in the stack's
proportions, within seconds of a node change. It owns each queue's ``spec.resourceGroups`` (server-side apply); the
Queues component creates the queues with the numbers at full capacity and then leaves that field alone, so Pulumi
and the controller never fight. Extra replicas stand by behind a Lease; only the leader writes.

Least privilege (``daemons/quota_controller/rbac.py``): list Nodes; get and patch the stack's ClusterQueues, by name;
Events in ``default`` (where Events about cluster-scoped objects live); one Lease in its own namespace.
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
from components.quota_controller_settings import APP, QuotaControllerSettings
from components.rbac import grant
from daemons.quota_controller import rbac as daemon_rbac

SETTINGS_DIR = "/etc/gpucluster/quota-controller"
METRICS_PORT = 9106
PART_OF = {"app.kubernetes.io/part-of": "gpucluster", "app.kubernetes.io/component": "capacity"}


def cluster_rules(settings: QuotaControllerSettings) -> list[dict[str, Any]]:
    """The ClusterRole: list Nodes; get and apply the stack's ClusterQueues only."""
    return [r.to_k8s() for r in daemon_rbac.cluster_rules([q.name for q in settings.cluster_queues])]


def event_rules() -> list[dict[str, Any]]:
    return [r.to_k8s() for r in daemon_rbac.EVENT_RULES]


def lease_rules(lease_name: str) -> list[dict[str, Any]]:
    return [r.to_k8s() for r in daemon_rbac.lease_rules(lease_name)]


def _shape(settings: QuotaControllerSettings) -> DaemonShape:
    return DaemonShape(app=APP, image=settings.image, settings_dir=SETTINGS_DIR, metrics_port=METRICS_PORT)


def quota_controller_pod_spec(settings: QuotaControllerSettings, config_map: str) -> dict[str, Any]:
    return daemon_pod_spec(_shape(settings), config_map)


@dataclass(frozen=True)
class QuotaControllerArgs:
    #: Complete settings: the flavors and the queues' shares filled from the stack.
    settings: QuotaControllerSettings
    labels: Mapping[str, str] = field(default_factory=dict)
    #: Its namespace, and the ClusterQueues it takes the field of (they must exist first).
    depends_on: tuple[pulumi.Resource, ...] = field(default=())

    def __post_init__(self) -> None:
        s = self.settings
        if not isinstance(s, QuotaControllerSettings):
            raise TypeError(f"QuotaControllerArgs.settings: expected QuotaControllerSettings, got {type(s).__name__}")
        if not s.enabled:
            raise ValueError("QuotaControllerArgs.settings.enabled: the controller is disabled; build none")
        if not s.flavors or not s.cluster_queues:
            raise ValueError("QuotaControllerArgs.settings: no flavors or no clusterQueues to follow (fill them)")
        for key in self.labels:
            check_qualified_name(key, "QuotaControllerArgs.labels key")


class QuotaController(pulumi.ComponentResource):
    """ServiceAccount, least-privilege RBAC, settings ConfigMap and the controller's Deployment."""

    def __init__(self, name: str, args: QuotaControllerArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpucluster:capacity:QuotaController", name, None, opts)
        s = args.settings
        ns = s.namespace
        labels = {**args.labels, **PART_OF, "app.kubernetes.io/name": APP}
        child = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))

        self.service_account, rbac = daemon_service_account(
            self, f"{name}-sa", app=APP, namespace=ns, labels=labels, depends_on=args.depends_on
        )
        self.cluster_role, self.cluster_role_binding = grant(
            self, (f"{name}-clusterrole", f"{name}-clusterrolebinding"), name=APP, rules=cluster_rules(s), **rbac
        )
        self.events_role, self.events_role_binding = grant(
            self,
            (f"{name}-events-role", f"{name}-events-rolebinding"),
            name=f"{APP}-events",
            namespace=daemon_rbac.EVENTS_NAMESPACE,
            rules=event_rules(),
            **rbac,
        )
        self.lease_role, self.lease_role_binding = grant(
            self,
            (f"{name}-role", f"{name}-rolebinding"),
            name=APP,
            namespace=ns,
            rules=lease_rules(s.lease_name),
            **rbac,
        )
        config_name = f"{APP}-settings"
        self.config_map = k8s.core.v1.ConfigMap(
            f"{name}-settings",
            metadata={"name": config_name, "namespace": ns, "labels": {**labels, SETTINGS_LABEL: "quota-controller"}},
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
                self.lease_role_binding,
                self.config_map,
                *args.depends_on,
            ],
        )
        self.register_outputs(
            {
                "deployment": APP,
                "namespace": ns,
                "replicas": s.replicas,
                "clusterQueues": [q.name for q in s.cluster_queues],
                "notReadyGrace": s.not_ready_grace,
                "returnAfter": s.return_after,
            }
        )
