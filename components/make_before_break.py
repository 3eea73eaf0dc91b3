"""MakeBeforeBreak: the Kueue AdmissionCheck that holds a training gang until its GPUs are free, and its controller.

The check (``make-before-break``, ``controllerName: gpucluster.io/make-before-break``) is listed on every
ClusterQueue that admits training (``components/queues.py``). While it is Pending, the controller
(``gpucluster-make-before-break``, daemons/make_before_break/) reserves the nodes the gang needs and rolls the
inference Deployments off them, make-before-break; it sets the check Ready once those GPUs are free, so the
gang's pods land without preempting anything. Extra replicas stand by behind a Lease; only the leader writes.

Least privilege, the daemon's own rules (``daemons/make_before_break/rbac.py``): cluster-wide it reads what it
plans from (Workloads, ResourceFlavors, Nodes, the pods bound to them) and writes only Workload status, the one
AdmissionCheck's status and Nodes (its reservation label and taint). Deployments and pod annotations it writes
only in the inference namespaces, and one Lease in its own namespace. Events it creates only where their objects
live: the team namespaces (Workloads), the inference namespaces (Deployments) and ``default`` (Nodes, the
AdmissionCheck), not cluster-wide.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
from components.make_before_break_settings import CHECK_NAME, CONTROLLER_NAME, MakeBeforeBreakSettings
from components.model import check_dns_label, check_qualified_name
from components.queues import KUEUE_API
from components.rbac import grant
from daemons.make_before_break import rbac as daemon_rbac

APP = "gpucluster-make-before-break"
SETTINGS_DIR = "/etc/gpucluster/make-before-break"
METRICS_PORT = 9104
PART_OF = {"app.kubernetes.io/part-of": "gpucluster", "app.kubernetes.io/component": "burst"}
#: The API server accepts Events about a Node or the AdmissionCheck (cluster-scoped) only in this namespace.
EVENTS_NAMESPACE = "default"


def cluster_rules(check_name: str = CHECK_NAME) -> list[dict[str, Any]]:
    """The ClusterRole: the daemon's cluster-wide rules (``daemons/make_before_break/rbac.py``) without Events,
    which are granted only where their objects live (:func:`event_rules`)."""
    return [r.to_k8s() for r in daemon_rbac.cluster_rules(check_name) if "events" not in r.resources]


def inference_rules() -> list[dict[str, Any]]:
    """In each inference namespace: mark replicas to go first (pods), roll their Deployments."""
    return [r.to_k8s() for r in daemon_rbac.inference_rules()]


def lease_rules(lease_name: str) -> list[dict[str, Any]]:
    """In its own namespace: leader election on one Lease."""
    return [r.to_k8s() for r in daemon_rbac.lease_rules(lease_name)]


def event_rules() -> list[dict[str, Any]]:
    """Where Events go: about Workloads in their (team) namespaces, about Deployments in the inference namespaces,
    about Nodes and the check in ``default``."""
    return [r.to_k8s() for r in daemon_rbac.CLUSTER_RULES if "events" in r.resources]


def _shape(settings: MakeBeforeBreakSettings) -> DaemonShape:
    return DaemonShape(app=APP, image=settings.image, settings_dir=SETTINGS_DIR, metrics_port=METRICS_PORT)


def make_before_break_pod_spec(settings: MakeBeforeBreakSettings, config_map: str) -> dict[str, Any]:
    return daemon_pod_spec(_shape(settings), config_map)


@dataclass(frozen=True)
class MakeBeforeBreakArgs:
    #: Complete settings: the virtual node, burst taint key and inference namespaces filled from the stack.
    settings: MakeBeforeBreakSettings
    #: Where training Workloads live: Events about them go there.
    workload_namespaces: Sequence[str]
    labels: Mapping[str, str] = field(default_factory=dict)
    #: Namespaces (its own, the inference and team ones) that must exist before its Roles.
    depends_on: tuple[pulumi.Resource, ...] = field(default=())

    def __post_init__(self) -> None:
        s = self.settings
        if not isinstance(s, MakeBeforeBreakSettings):
            raise TypeError(f"MakeBeforeBreakArgs.settings: expected MakeBeforeBreakSettings, got {type(s).__name__}")
        if not s.enabled:
            raise ValueError("MakeBeforeBreakArgs.settings.enabled: the controller is disabled; build none")
        if not self.workload_namespaces:
            raise ValueError("MakeBeforeBreakArgs.workload_namespaces: name the team namespaces training runs in")
        for ns in self.workload_namespaces:
            check_dns_label(ns)
        if s.reservation_key == s.burst_taint_key:
            raise ValueError(
                f"MakeBeforeBreakArgs.settings.reservation_key: {s.reservation_key!r} is the burst taint key"
            )
        overlap = sorted(set(self.workload_namespaces) & set(s.inference_namespaces))
        if overlap:
            raise ValueError(f"MakeBeforeBreakArgs.workload_namespaces: also inference namespaces: {overlap}")
        for key in self.labels:
            check_qualified_name(key, "MakeBeforeBreakArgs.labels key")


class MakeBeforeBreak(pulumi.ComponentResource):
    """The AdmissionCheck, ServiceAccount, least-privilege RBAC, settings ConfigMap and the controller's Deployment."""

    def __init__(self, name: str, args: MakeBeforeBreakArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpucluster:burst:MakeBeforeBreak", name, None, opts)
        s = args.settings
        ns = s.namespace
        labels = {**args.labels, **PART_OF, "app.kubernetes.io/name": APP}
        child = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))

        # Kueue's CRDs come with its chart, which the ClusterQueues listing the check wait for too.
        self.admission_check = k8s.apiextensions.CustomResource(
            f"{name}-admission-check",
            api_version=KUEUE_API,
            kind="AdmissionCheck",
            metadata={"name": CHECK_NAME, "labels": labels},
            spec={"controllerName": CONTROLLER_NAME},
            opts=child,
        )
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
        self.lease_role, self.lease_role_binding = grant(
            self,
            (f"{name}-role", f"{name}-rolebinding"),
            name=APP,
            namespace=ns,
            rules=lease_rules(s.lease_name),
            **rbac,
        )
        self.inference_roles: dict[str, Any] = {}
        self.inference_role_bindings: dict[str, Any] = {}
        for inf_ns in s.inference_namespaces:
            self.inference_roles[inf_ns], self.inference_role_bindings[inf_ns] = grant(
                self,
                (f"{name}-role-{inf_ns}", f"{name}-rolebinding-{inf_ns}"),
                name=APP,
                namespace=inf_ns,
                rules=inference_rules(),
                **rbac,
            )
        self.events_roles: dict[str, Any] = {}
        self.events_role_bindings: dict[str, Any] = {}
        for ev_ns in dict.fromkeys((EVENTS_NAMESPACE, *args.workload_namespaces, *s.inference_namespaces)):
            self.events_roles[ev_ns], self.events_role_bindings[ev_ns] = grant(
                self,
                (f"{name}-events-role-{ev_ns}", f"{name}-events-rolebinding-{ev_ns}"),
                name=f"{APP}-events",
                namespace=ev_ns,
                rules=event_rules(),
                **rbac,
            )
        config_name = f"{APP}-settings"
        # The daemon's settings file is the whole model (the daemon ignores image and replicas).
        document = s.to_json()
        self.config_map = k8s.core.v1.ConfigMap(
            f"{name}-settings",
            metadata={
                "name": config_name,
                "namespace": ns,
                "labels": {**labels, SETTINGS_LABEL: "make-before-break"},
            },
            data={SETTINGS_FILE: document},
            opts=child,
        )
        bindings = [
            self.cluster_role_binding,
            self.lease_role_binding,
            *self.inference_role_bindings.values(),
            *self.events_role_bindings.values(),
        ]
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
                *bindings,
                self.config_map,
                self.admission_check,
                *args.depends_on,
            ],
        )
        self.register_outputs(
            {
                "admissionCheck": CHECK_NAME,
                "controllerName": CONTROLLER_NAME,
                "deployment": APP,
                "namespace": ns,
                "replicas": s.replicas,
                "maxHold": s.max_hold,
                "reservationKey": s.reservation_key,
            }
        )
