"""The ServiceAccount and Deployment of one of our daemons that stand by behind a Lease (taint controller,
make-before-break): non-root and read-only, its settings file from a ConfigMap, health and metrics on one port of
the pod's own address (not every address: nothing on the node's other interfaces reaches it), replicas spread over
nodes, Prometheus scrape annotations.

The daemon's command is its spec's (``python3 -m daemons.<name>``: no console script to declare); it reads
``--settings <dir>/settings.json`` and serves ``/healthz`` and ``/metrics`` on ``--listen``. Only leader election
needs its pod's name and namespace (``POD_NAME``, ``POD_NAMESPACE``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.scraping import scrape_annotations
from contract.constants import nonroot_pod_security_context, settings_digest
from contract.spec import SETTINGS_FILE

#: The env var the downward API fills with the pod's address, which the daemon listens on.
POD_IP_ENV = "POD_IP"


@dataclass(frozen=True)
class DaemonShape:
    #: The Deployment and ServiceAccount name (``gpucluster-...``).
    app: str
    image: str
    #: The container's command (``ControllerSpec.command``).
    command: tuple[str, ...]
    #: Where the settings ConfigMap is mounted.
    settings_dir: str
    metrics_port: int
    #: Its series' own ``namespace`` and ``job`` labels win over the scrape's.
    honor_labels: bool = False
    #: Where its pods run: the stack's nodeSelector and tolerations (Kubernetes' shapes), none by default.
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: Sequence[Mapping[str, str]] = ()


def placement(shape: DaemonShape) -> dict[str, Any]:
    """The pod spec's nodeSelector and tolerations, each only when the stack sets it."""
    out: dict[str, Any] = {}
    if shape.node_selector:
        out["nodeSelector"] = dict(shape.node_selector)
    if shape.tolerations:
        out["tolerations"] = [dict(t) for t in shape.tolerations]
    return out


def daemon_pod_spec(shape: DaemonShape, config_map: str) -> dict[str, Any]:
    app = shape.app
    return {
        **placement(shape),
        "serviceAccountName": app,
        "securityContext": nonroot_pod_security_context(),
        # Standby replicas on other nodes, so losing one node never leaves the daemon's work without a leader.
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": {"app.kubernetes.io/name": app}},
            }
        ],
        "containers": [
            {
                "name": "controller",
                "image": shape.image,
                "command": list(shape.command),
                "args": [
                    "--settings",
                    f"{shape.settings_dir}/{SETTINGS_FILE}",
                    # The pod's own address only (Kubernetes expands $(POD_IP) from the env below).
                    "--listen",
                    f"$({POD_IP_ENV}):{shape.metrics_port}",
                ],
                "env": [
                    {"name": POD_IP_ENV, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    # The Lease holder identity.
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                ],
                "ports": [{"name": "metrics", "containerPort": shape.metrics_port, "protocol": "TCP"}],
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
                "volumeMounts": [{"name": "settings", "mountPath": shape.settings_dir, "readOnly": True}],
            }
        ],
        "volumes": [{"name": "settings", "configMap": {"name": config_map}}],
    }


def daemon_deployment(
    resource_name: str,
    shape: DaemonShape,
    *,
    namespace: str,
    replicas: int,
    labels: dict[str, str],
    config_map: str,
    settings: str,
    parent: pulumi.Resource,
    depends_on: Sequence[pulumi.Resource],
) -> k8s.apps.v1.Deployment:
    """The Deployment, selected by ``app.kubernetes.io/name``, scraped on its metrics port, its pods rolled when
    ``settings`` (the ConfigMap's document) change; it waits for ``depends_on`` (its ServiceAccount, RoleBindings and
    settings ConfigMap)."""
    scrape = scrape_annotations(shape.metrics_port, honor_labels=shape.honor_labels) | settings_digest(settings)
    return k8s.apps.v1.Deployment(
        resource_name,
        metadata={"name": shape.app, "namespace": namespace, "labels": labels},
        spec={
            "replicas": replicas,
            "selector": {"matchLabels": {"app.kubernetes.io/name": shape.app}},
            "template": {
                "metadata": {"labels": labels, "annotations": scrape},
                "spec": daemon_pod_spec(shape, config_map),
            },
        },
        opts=pulumi.ResourceOptions(parent=parent, depends_on=list(depends_on)),
    )


def daemon_service_account(
    parent: pulumi.Resource,
    resource_name: str,
    *,
    app: str,
    namespace: str,
    labels: dict[str, str],
    depends_on: Sequence[pulumi.Resource],
) -> tuple[k8s.core.v1.ServiceAccount, dict[str, Any]]:
    """The ServiceAccount ``app`` and the arguments :func:`components.rbac.grant` binds each Role to it with."""
    service_account = k8s.core.v1.ServiceAccount(
        resource_name,
        metadata={"name": app, "namespace": namespace, "labels": labels},
        opts=pulumi.ResourceOptions(parent=parent, depends_on=list(depends_on)),
    )
    rbac = {
        "service_account": service_account,
        "subject": [{"kind": "ServiceAccount", "name": app, "namespace": namespace}],
        "labels": labels,
        "depends_on": list(depends_on),
    }
    return service_account, rbac
