"""Pulumi components for GPU and fabric telemetry.

* ``DcgmExporter``   — NVIDIA's dcgm-exporter chart (pinned) on GPU nodes, with our counters CSV ConfigMap.
* ``FabricExporter`` — our InfiniBand/NVLink exporter DaemonSet, ServiceAccount, Service, scrape target.
* ``GpuAlerts``      — the alert rules (PrometheusRule, or a rule-file ConfigMap without the operator).
* ``GpuDashboard``   — the Grafana dashboard ConfigMap for the Grafana sidecar.
* ``Telemetry``      — all of the above in one namespace.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from components.charts import helm_chart, offline_without_mirror, resolve_chart
from components.scraping import scrape_annotations
from components.telemetry.alerts import rule_groups
from components.telemetry.counters import counters_csv
from components.telemetry.dashboard import dashboard
from components.telemetry.settings import TelemetrySettings
from contract.constants import (
    ACCEPTANCE_FAILED_TAINT_KEY,
    DCGM_EXPORTER_APP,
    FABRIC_EXPORTER_APP,
    QUARANTINE_TAINT_KEY,
    nonroot_pod_security_context,
)
from contract.model import check_qualified_name

DCGM_COUNTERS_CONFIGMAP = "dcgm-exporter-counters"
DCGM_COUNTERS_KEY = "counters.csv"
DCGM_COUNTERS_PATH = "/etc/dcgm-exporter/gpucluster-counters.csv"
FABRIC_APP = FABRIC_EXPORTER_APP
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
PART_OF = {"app.kubernetes.io/part-of": "gpucluster", "app.kubernetes.io/component": "telemetry"}


#: The NVIDIA container toolkit's device list as volume mounts (``accept-nvidia-visible-devices-as-volume-mounts``):
#: a container is given the GPUs named by the mounts under it (``all``: every GPU).
GPU_DEVICE_LIST_DIR = "/var/run/nvidia-container-devices"


def _check_namespace(namespace: str, what: str) -> None:
    if len(namespace) > 63 or not _DNS_LABEL.match(namespace):
        raise ValueError(f"{what}.namespace: {namespace!r} is not a Kubernetes namespace name")


def telemetry_tolerations(settings: TelemetrySettings) -> list[dict[str, str]]:
    """The exporters' tolerations: the stack's GPU ones, and always the taints of ours on GPU nodes (any value,
    every effect): quarantine and failed acceptance, so a node out of service keeps being observed (its alerts say
    when it is healthy again), and make-before-break's reservation, which a running gang's nodes carry for the
    whole run, so a rolled DaemonSet does not leave them unwatched."""
    out = [t.to_k8s() for t in settings.gpu_tolerations]
    ours = [QUARANTINE_TAINT_KEY, ACCEPTANCE_FAILED_TAINT_KEY]
    if settings.reservation_taint_key is not None:
        ours.append(settings.reservation_taint_key)
    for key in ours:
        if not any(t.get("key") == key and t.get("operator") == "Exists" and "effect" not in t for t in out):
            out.append({"key": key, "operator": "Exists"})
    return out


def _check_labels(labels: Mapping[str, str], what: str) -> None:
    for key in labels:
        check_qualified_name(key, f"{what}.labels key")


def _check_settings(settings: Any, what: str) -> None:
    if not isinstance(settings, TelemetrySettings):
        raise TypeError(f"{what}.settings: expected TelemetrySettings, got {type(settings).__name__}")


# ------------------------------------------------------------------------------------------------ DCGM


@dataclass(frozen=True)
class DcgmExporterArgs:
    settings: TelemetrySettings
    namespace: str
    depends_on: tuple[pulumi.Resource, ...] = field(default=())

    def __post_init__(self) -> None:
        _check_settings(self.settings, "DcgmExporterArgs")
        _check_namespace(self.namespace, "DcgmExporterArgs")


def dcgm_values(settings: TelemetrySettings) -> dict[str, Any]:
    """Helm values for NVIDIA's dcgm-exporter chart."""
    d = settings.dcgm_exporter
    values: dict[str, Any] = {
        "image": {"repository": d.image_repository, "tag": d.image_tag},
        # Its Service, hence its scrape job under the Prometheus operator: the name the quarantine alerts match.
        "fullnameOverride": DCGM_EXPORTER_APP,
        "arguments": ["-f", DCGM_COUNTERS_PATH],
        "nodeSelector": dict(settings.gpu_node_selector),
        "tolerations": telemetry_tolerations(settings),
        "extraConfigMapVolumes": [
            {
                "name": "gpucluster-counters",
                "configMap": {
                    "name": DCGM_COUNTERS_CONFIGMAP,
                    "items": [{"key": DCGM_COUNTERS_KEY, "path": "gpucluster-counters.csv"}],
                },
            }
        ],
        "extraVolumeMounts": [
            {"name": "gpucluster-counters", "mountPath": DCGM_COUNTERS_PATH, "subPath": "gpucluster-counters.csv"}
        ],
        "serviceMonitor": {
            "enabled": settings.prometheus_operator,
            "interval": d.scrape_interval,
            # The exporter's namespace and pod (the pod using the GPU, from its pod mapping) win over the
            # target's, which would otherwise rename them exported_namespace and exported_pod.
            "honorLabels": True,
            "relabelings": [
                {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node", "action": "replace"}
            ],
        },
        # Pod mapping: the chart always sets DCGM_EXPORTER_KUBERNETES=true (each GPU's series carry the namespace,
        # pod and container using it, read from the kubelet's pod-resources socket); enablePodLabels also copies the
        # pod's labels (gpucluster.io/training-job -> gpucluster_io_training_job), with the chart's read-only RBAC
        # on pods, so the dashboard averages per training job.
        "kubernetes": {"enablePodLabels": True, "rbac": {"create": True}},
    }
    if not settings.prometheus_operator:
        values["podAnnotations"] = {
            "prometheus.io/scrape": "true",
            "prometheus.io/port": "9400",
            "prometheus.io/path": "/metrics",
        }
    return values


class DcgmExporter(pulumi.ComponentResource):
    def __init__(self, name: str, args: DcgmExporterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpucluster:telemetry:DcgmExporter", name, None, opts)
        s = args.settings
        self.counters = k8s.core.v1.ConfigMap(
            f"{name}-counters",
            metadata={
                "name": DCGM_COUNTERS_CONFIGMAP,
                "namespace": args.namespace,
                "labels": {**PART_OF, "app.kubernetes.io/name": "dcgm-exporter"},
            },
            data={DCGM_COUNTERS_KEY: counters_csv()},
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
        )
        self.chart: k8s.helm.v4.Chart | None = None
        dcgm = s.dcgm_exporter
        if not dcgm.install_chart:
            self.register_outputs({"countersConfigMap": self.counters.metadata["name"], "chart": None})
            return
        if offline_without_mirror(dcgm.chart, dcgm.chart_version):
            pulumi.log.warn(
                f"offline charts: no Go module carries the dcgm-exporter chart {dcgm.chart_version}; "
                "previewing without it (its counters ConfigMap is still checked)",
                resource=self,
            )
            self.register_outputs({"countersConfigMap": self.counters.metadata["name"], "chart": None})
            return
        resolved = resolve_chart(dcgm.chart, dcgm.chart_version)
        self.chart = helm_chart(
            f"{name}-chart",
            resolved,
            namespace=args.namespace,
            values=dcgm_values(s),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.counters, *args.depends_on]),
        )
        self.register_outputs({"countersConfigMap": self.counters.metadata["name"], "chart": resolved.chart})


# ------------------------------------------------------------------------------------------------ fabric


@dataclass(frozen=True)
class FabricExporterArgs:
    settings: TelemetrySettings
    namespace: str
    depends_on: tuple[pulumi.Resource, ...] = field(default=())
    #: The stack's labels (its environment among them) on the exporter's own objects; the selector stays its name.
    labels: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_settings(self.settings, "FabricExporterArgs")
        _check_namespace(self.namespace, "FabricExporterArgs")
        _check_labels(self.labels, "FabricExporterArgs")


def fabric_pod_spec(settings: TelemetrySettings) -> dict[str, Any]:
    """Pod spec of the exporter: /sys and the kubelet's volumes read-only, NVML through the NVIDIA runtime, no API
    token, no privileges."""
    f = settings.fabric_exporter
    spec: dict[str, Any] = {
        "serviceAccountName": FABRIC_APP,
        "automountServiceAccountToken": False,
        "nodeSelector": dict(settings.gpu_node_selector),
        "tolerations": telemetry_tolerations(settings),
        "securityContext": nonroot_pod_security_context(),
        "containers": [
            {
                "name": "exporter",
                "image": f.image,
                "command": ["gpucluster-fabric-exporter"],
                "args": [
                    "--sysfs-root=/host/sys",
                    f"--port={f.port}",
                    # The pod's own address only (Kubernetes expands $(POD_IP) from the env below).
                    "--listen-address=$(POD_IP)",
                    "--collectors=infiniband,nvlink,filesystem",
                ],
                "env": [
                    {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                    # NVML only: the utility capability mounts libnvidia-ml and the device nodes, nothing more.
                    {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                    {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility"},
                ],
                "ports": [{"name": "metrics", "containerPort": f.port, "protocol": "TCP"}],
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": "metrics"}, "periodSeconds": 10},
                "livenessProbe": {
                    "httpGet": {"path": "/healthz", "port": "metrics"},
                    "periodSeconds": 20,
                    "failureThreshold": 3,
                },
                "resources": {
                    "requests": {"cpu": "20m", "memory": "48Mi"},
                    "limits": {"memory": "128Mi"},
                },
                "securityContext": {
                    "privileged": False,
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"]},
                },
                "volumeMounts": [
                    {"name": "sys", "mountPath": "/host/sys", "readOnly": True},
                    # Where the node ignores NVIDIA_VISIBLE_DEVICES in unprivileged containers (the GPU visibility
                    # lockdown: the GPU Operator's, or the nvidia_container_toolkit role's), the toolkit passes the
                    # GPUs a container names by a mount here instead, as the device plugin does: every GPU, for NVML.
                    {"name": "all-gpus", "mountPath": GPU_DEVICE_LIST_DIR + "/all", "readOnly": True},
                    # The volumes the kubelet mounts for pods appear in the exporter's own mount table (and so in
                    # /proc/self/mountstats, with the NFS client's counters) as they come and go.
                    {
                        "name": "kubelet",
                        "mountPath": "/host/kubelet",
                        "readOnly": True,
                        "mountPropagation": "HostToContainer",
                    },
                ],
            }
        ],
        "volumes": [
            {"name": "sys", "hostPath": {"path": "/sys", "type": "Directory"}},
            {"name": "all-gpus", "hostPath": {"path": "/dev/null", "type": "CharDevice"}},
            {"name": "kubelet", "hostPath": {"path": "/var/lib/kubelet", "type": "Directory"}},
        ],
        "terminationGracePeriodSeconds": 10,
    }
    if f.runtime_class_name:
        spec["runtimeClassName"] = f.runtime_class_name
    return spec


class FabricExporter(pulumi.ComponentResource):
    def __init__(self, name: str, args: FabricExporterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpucluster:telemetry:FabricExporter", name, None, opts)
        s = args.settings
        labels = {**args.labels, **PART_OF, "app.kubernetes.io/name": FABRIC_APP}
        selector = {"app.kubernetes.io/name": FABRIC_APP}
        annotations = scrape_annotations(s.fabric_exporter.port) if s.fabric_scrape == "annotations" else {}
        child = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))
        self.service_account = k8s.core.v1.ServiceAccount(
            f"{name}-sa",
            metadata={"name": FABRIC_APP, "namespace": args.namespace, "labels": labels},
            automount_service_account_token=False,
            opts=child,
        )
        pod_meta: dict[str, Any] = {"labels": labels, "annotations": annotations}
        self.daemon_set = k8s.apps.v1.DaemonSet(
            f"{name}-ds",
            metadata={"name": FABRIC_APP, "namespace": args.namespace, "labels": labels},
            spec={
                "selector": {"matchLabels": selector},
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%"}},
                "template": {"metadata": pod_meta, "spec": fabric_pod_spec(s)},
            },
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.service_account, *args.depends_on]),
        )
        self.service = k8s.core.v1.Service(
            f"{name}-svc",
            metadata={
                "name": FABRIC_APP,
                "namespace": args.namespace,
                "labels": labels,
                "annotations": annotations,
            },
            spec={
                "clusterIP": "None",
                "selector": selector,
                "ports": [
                    {"name": "metrics", "port": s.fabric_exporter.port, "targetPort": "metrics", "protocol": "TCP"}
                ],
            },
            opts=child,
        )
        self.service_monitor: k8s.apiextensions.CustomResource | None = None
        if s.fabric_scrape == "serviceMonitor":
            self.service_monitor = k8s.apiextensions.CustomResource(
                f"{name}-sm",
                api_version="monitoring.coreos.com/v1",
                kind="ServiceMonitor",
                metadata={"name": FABRIC_APP, "namespace": args.namespace, "labels": labels},
                spec={
                    "selector": {"matchLabels": selector},
                    "namespaceSelector": {"matchNames": [args.namespace]},
                    "endpoints": [
                        {
                            "port": "metrics",
                            "path": "/metrics",
                            "interval": s.fabric_exporter.scrape_interval,
                            # the exporter's own `node` label is authoritative
                            "honorLabels": True,
                        }
                    ],
                },
                opts=pulumi.ResourceOptions(parent=self, depends_on=[self.service, *args.depends_on]),
            )
        self.register_outputs(
            {
                "daemonSet": self.daemon_set.metadata["name"],
                "service": self.service.metadata["name"],
                "scrape": s.fabric_scrape,
            }
        )


# ------------------------------------------------------------------------------------------------ alerts


@dataclass(frozen=True)
class GpuAlertsArgs:
    settings: TelemetrySettings
    namespace: str
    depends_on: tuple[pulumi.Resource, ...] = field(default=())

    def __post_init__(self) -> None:
        _check_settings(self.settings, "GpuAlertsArgs")
        _check_namespace(self.namespace, "GpuAlertsArgs")


RULES_CONFIGMAP_KEY = "gpucluster-telemetry.rules.yaml"


class GpuAlerts(pulumi.ComponentResource):
    """A PrometheusRule with the operator; without it, a ConfigMap holding the rule file to mount."""

    def __init__(self, name: str, args: GpuAlertsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpucluster:telemetry:GpuAlerts", name, None, opts)
        groups = rule_groups(args.settings)
        meta = {
            "name": "gpucluster-gpu-fabric",
            "namespace": args.namespace,
            "labels": {**PART_OF, "role": "alert-rules"},
        }
        child = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))
        self.rule: pulumi.CustomResource
        if args.settings.prometheus_operator:
            self.rule = k8s.apiextensions.CustomResource(
                f"{name}-rule",
                api_version="monitoring.coreos.com/v1",
                kind="PrometheusRule",
                metadata=meta,
                spec=groups,
                opts=child,
            )
        else:
            self.rule = k8s.core.v1.ConfigMap(
                f"{name}-rules",
                metadata=meta,
                data={RULES_CONFIGMAP_KEY: yaml.safe_dump(groups, sort_keys=False)},
                opts=child,
            )
        self.register_outputs({"alerts": [r["alert"] for g in groups["groups"] for r in g["rules"]]})


# ------------------------------------------------------------------------------------------------ dashboard


@dataclass(frozen=True)
class GpuDashboardArgs:
    settings: TelemetrySettings
    namespace: str
    depends_on: tuple[pulumi.Resource, ...] = field(default=())

    def __post_init__(self) -> None:
        _check_settings(self.settings, "GpuDashboardArgs")
        _check_namespace(self.namespace, "GpuDashboardArgs")


class GpuDashboard(pulumi.ComponentResource):
    def __init__(self, name: str, args: GpuDashboardArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpucluster:telemetry:GpuDashboard", name, None, opts)
        doc = dashboard(args.settings)
        self.config_map = k8s.core.v1.ConfigMap(
            f"{name}-dashboard",
            metadata={
                "name": "gpucluster-gpu-fabric-dashboard",
                "namespace": args.namespace,
                "labels": {**PART_OF, "grafana_dashboard": "1"},
            },
            data={"gpucluster-gpu-fabric.json": json.dumps(doc, indent=1, sort_keys=True)},
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
        )
        self.register_outputs({"uid": doc["uid"]})


# ------------------------------------------------------------------------------------------------ all


@dataclass(frozen=True)
class TelemetryArgs:
    settings: TelemetrySettings
    depends_on: tuple[pulumi.Resource, ...] = field(default=())
    #: The stack's labels, on the workloads of ours (the fabric exporter); the charts' objects keep their own.
    labels: Mapping[str, str] = field(default_factory=dict)
    #: Labels of its namespace besides the project's (Pod Security's: the exporters read the host's /sys).
    namespace_labels: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_settings(self.settings, "TelemetryArgs")
        _check_labels(self.labels, "TelemetryArgs")


class Telemetry(pulumi.ComponentResource):
    """Namespace (optional), DCGM exporter, fabric exporter, alerts and dashboard."""

    def __init__(self, name: str, args: TelemetryArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpucluster:telemetry:Telemetry", name, None, opts)
        s = args.settings
        deps: tuple[pulumi.Resource, ...] = args.depends_on
        self.namespace: k8s.core.v1.Namespace | None = None
        if s.create_namespace:
            self.namespace = k8s.core.v1.Namespace(
                f"{name}-ns",
                metadata={"name": s.namespace, "labels": {**PART_OF, **args.namespace_labels}},
                opts=pulumi.ResourceOptions(parent=self, depends_on=list(deps)),
            )
            deps = (*deps, self.namespace)
        child = pulumi.ResourceOptions(parent=self)
        self.dcgm = DcgmExporter(f"{name}-dcgm", DcgmExporterArgs(s, s.namespace, deps), child)
        self.fabric = FabricExporter(
            f"{name}-fabric", FabricExporterArgs(s, s.namespace, deps, labels=args.labels), child
        )
        self.alerts = GpuAlerts(f"{name}-alerts", GpuAlertsArgs(s, s.namespace, deps), child)
        dash_deps = deps if s.dashboard_namespace == s.namespace else args.depends_on
        self.dashboard = GpuDashboard(f"{name}-dashboard", GpuDashboardArgs(s, s.dashboard_namespace, dash_deps), child)
        self.register_outputs({"namespace": s.namespace})
