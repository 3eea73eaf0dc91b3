"""Interruptions: the daemon that accounts for every interruption of the training JobSets and bounds their restarts.

The daemon (``gpucluster-interruptions``, daemons/interruptions/) reads the training JobSets, their pods, the nodes,
the Kueue Workloads they own, the Events on them and the checkpoint times the jobs report on their teams'
``checkpoints`` claims; it keeps each job's ledger in an annotation on the JobSet, exports interruptions by cause,
recovery time, work lost and ETTR per job and for the cluster, deactivates the Workload of a job past its restart
bound (with a ``RestartBoundReached`` Event saying how to resume) and writes the measured reliability ConfigMap the
next submission's checkpoint interval follows. Extra replicas stand by behind a Lease; only the leader writes.

Least privilege (``daemons/interruptions/rbac.py``): cluster-wide read of JobSets, pods, nodes, Workloads, Events and
claims; patch JobSets and Workloads; create Events; in its own namespace the reliability ConfigMap and one Lease.
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
from components.interruptions_settings import APP, InterruptionsSettings
from components.model import check_qualified_name
from components.rbac import grant
from daemons.interruptions import rbac as daemon_rbac

SETTINGS_DIR = "/etc/gpucluster/interruptions"
METRICS_PORT = 9112
PART_OF = {"app.kubernetes.io/part-of": "gpucluster", "app.kubernetes.io/component": "training"}


def cluster_rules() -> list[dict[str, Any]]:
    """The ClusterRole: read what the accounting is built from; patch JobSets and Workloads; create Events."""
    return [r.to_k8s() for r in daemon_rbac.CLUSTER_RULES]


def namespace_rules(settings: InterruptionsSettings) -> list[dict[str, Any]]:
    """In its own namespace: the reliability ConfigMap and its Lease."""
    return [r.to_k8s() for r in daemon_rbac.namespace_rules(settings.reliability_config_map, settings.lease_name)]


def _shape(settings: InterruptionsSettings) -> DaemonShape:
    return DaemonShape(app=APP, image=settings.image, settings_dir=SETTINGS_DIR, metrics_port=METRICS_PORT)


def interruptions_pod_spec(settings: InterruptionsSettings, config_map: str) -> dict[str, Any]:
    return daemon_pod_spec(_shape(settings), config_map)


@dataclass(frozen=True)
class InterruptionsArgs:
    settings: InterruptionsSettings
    labels: Mapping[str, str] = field(default_factory=dict)
    #: Its namespace (and the JobSet and Kueue CRDs, which it reads).
    depends_on: tuple[pulumi.Resource, ...] = field(default=())

    def __post_init__(self) -> None:
        s = self.settings
        if not isinstance(s, InterruptionsSettings):
            raise TypeError(f"InterruptionsArgs.settings: expected InterruptionsSettings, got {type(s).__name__}")
        if not s.enabled:
            raise ValueError("InterruptionsArgs.settings.enabled: the daemon is disabled; build none")
        for key in self.labels:
            check_qualified_name(key, "InterruptionsArgs.labels key")


class Interruptions(pulumi.ComponentResource):
    """ServiceAccount, least-privilege RBAC, settings ConfigMap and the daemon's Deployment."""

    def __init__(self, name: str, args: InterruptionsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpucluster:interruptions:Interruptions", name, None, opts)
        s = args.settings
        ns = s.namespace
        labels = {**args.labels, **PART_OF, "app.kubernetes.io/name": APP}
        child = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))

        self.service_account, rbac = daemon_service_account(
            self, f"{name}-sa", app=APP, namespace=ns, labels=labels, depends_on=args.depends_on
        )
        self.cluster_role, self.cluster_role_binding = grant(
            self, (f"{name}-clusterrole", f"{name}-clusterrolebinding"), name=APP, rules=cluster_rules(), **rbac
        )
        self.role, self.role_binding = grant(
            self,
            (f"{name}-role", f"{name}-rolebinding"),
            name=APP,
            namespace=ns,
            rules=namespace_rules(s),
            **rbac,
        )
        config_name = f"{APP}-settings"
        self.config_map = k8s.core.v1.ConfigMap(
            f"{name}-settings",
            metadata={"name": config_name, "namespace": ns, "labels": {**labels, SETTINGS_LABEL: "interruptions"}},
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
                "reliabilityConfigMap": f"{ns}/{s.reliability_config_map}",
                "defaultMaxRestartsPerHour": s.default_max_restarts_per_hour,
            }
        )
