"""Telemetry components under Pulumi's mocks: types, names, parents, dependencies and the fields that matter."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from components.config import load_stack_file
from components.telemetry import (
    DCGM_COUNTERS_CONFIGMAP,
    DCGM_COUNTERS_KEY,
    FabricExporterArgs,
    Telemetry,
    TelemetryArgs,
    TelemetrySettings,
    csv_fields,
    required_dcgm_fields,
)
from components.telemetry.resources import dcgm_values, telemetry_tolerations
from contract.images_settings import DEFAULT_DAEMONS_IMAGE
from contract.registry import MAKE_BEFORE_BREAK
from tests.support.pulumi_harness import Graph, deploy
from tests.support.sim import ROOT

CHART = "kubernetes:helm.sh/v4:Chart"
CM = "kubernetes:core/v1:ConfigMap"


#: Scraped by annotation, the stack names the scrape jobs.
BY_ANNOTATION: dict[str, Any] = {
    "dcgmExporter": {"scrapeJob": "dcgm-exporter"},
    "fabricExporter": {"scrapeJob": "gpucluster-fabric-exporter"},
}


def settings(**raw: Any) -> TelemetrySettings:
    return TelemetrySettings.model_validate(raw)


@pytest.fixture(scope="module")
def with_operator() -> Graph:
    return deploy(lambda: Telemetry("tel", TelemetryArgs(settings())))


@pytest.fixture(scope="module")
def without_operator() -> Graph:
    s = settings(prometheusOperator=False, gpuNodeSelector={"gpu": "h100"}, createNamespace=False, **BY_ANNOTATION)
    return deploy(lambda: Telemetry("tel", TelemetryArgs(s)))


def test_component_tree(with_operator: Graph) -> None:
    g = with_operator
    root = g.one("gpucluster:telemetry:Telemetry", "tel")
    kids = {(c.type, c.name) for c in g.children_of(root)}
    assert kids == {
        ("kubernetes:core/v1:Namespace", "tel-ns"),
        ("gpucluster:telemetry:DcgmExporter", "tel-dcgm"),
        ("gpucluster:telemetry:FabricExporter", "tel-fabric"),
        ("gpucluster:telemetry:GpuAlerts", "tel-alerts"),
        ("gpucluster:telemetry:GpuDashboard", "tel-dashboard"),
    }
    for r in g.resources:
        if r is not root:
            assert r.parent, f"{r.type} {r.name} has no parent"
    fabric = g.one("gpucluster:telemetry:FabricExporter", "tel-fabric")
    assert {c.type for c in g.children_of(fabric)} == {
        "kubernetes:core/v1:ServiceAccount",
        "kubernetes:apps/v1:DaemonSet",
        "kubernetes:core/v1:Service",
        "kubernetes:monitoring.coreos.com/v1:ServiceMonitor",
    }
    ns = g.one("kubernetes:core/v1:Namespace", "tel-ns")
    assert g.depends_on(g.one("kubernetes:apps/v1:DaemonSet", "tel-fabric-ds"), ns)
    assert g.depends_on(g.one(CHART, "tel-dcgm-chart"), ns)


def test_dcgm_chart_is_pinned_on_gpu_nodes_with_our_csv(with_operator: Graph) -> None:
    chart = with_operator.one(CHART, "tel-dcgm-chart")
    cm = with_operator.one(CM, "tel-dcgm-counters")
    assert with_operator.depends_on(chart, cm)
    assert chart.inputs["chart"] == "dcgm-exporter"
    assert chart.inputs["version"] == "4.2.0"
    assert chart.inputs["repositoryOpts"]["repo"] == "https://nvidia.github.io/dcgm-exporter/helm-charts"
    values = chart.inputs["values"]
    assert values["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert values["image"]["tag"] == "4.2.3-4.2.0-ubuntu22.04"
    assert values["arguments"] == ["-f", values["extraVolumeMounts"][0]["mountPath"]]
    assert values["extraConfigMapVolumes"][0]["configMap"]["name"] == DCGM_COUNTERS_CONFIGMAP
    assert values["serviceMonitor"]["enabled"] is True
    # pod mapping on: each GPU's series name the pod using it and carry its labels (the per-job panel), and the
    # exporter's namespace/pod win over the target's
    assert values["kubernetes"] == {"enablePodLabels": True, "rbac": {"create": True}}
    assert values["serviceMonitor"]["honorLabels"] is True
    # a quarantined node stays observed: the NoExecute quarantine taint must not evict the exporter
    assert values["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists"},
        {"key": "gpucluster.io/quarantine", "operator": "Exists"},
        {"key": "gpucluster.io/acceptance-failed", "operator": "Exists"},
    ]
    assert cm.inputs["metadata"]["name"] == DCGM_COUNTERS_CONFIGMAP
    assert required_dcgm_fields(TelemetrySettings()) <= csv_fields(cm.inputs["data"][DCGM_COUNTERS_KEY])


def test_fabric_exporter_is_unprivileged_with_sys_read_only(with_operator: Graph) -> None:
    g = with_operator
    sa = g.one("kubernetes:core/v1:ServiceAccount", "tel-fabric-sa")
    assert sa.inputs["automountServiceAccountToken"] is False
    assert not [r for r in g.resources if "rbac.authorization.k8s.io" in r.type]
    ds = g.one("kubernetes:apps/v1:DaemonSet", "tel-fabric-ds")
    assert g.depends_on(ds, sa)
    pod = ds.inputs["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["serviceAccountName"] == sa.inputs["metadata"]["name"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "gpucluster.io/quarantine", "operator": "Exists"} in pod["tolerations"]
    assert "hostNetwork" not in pod
    assert "hostPID" not in pod
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert sc["privileged"] is False
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert {"name": "sys", "mountPath": "/host/sys", "readOnly": True} in container["volumeMounts"]
    assert "--sysfs-root=/host/sys" in container["args"]
    assert container["image"] == DEFAULT_DAEMONS_IMAGE  # unset: the scheme's default
    assert ds.inputs["spec"]["template"]["metadata"]["annotations"] == {}


def test_fabric_exporter_reads_the_filesystem_clients_of_the_volumes_the_kubelet_mounts(with_operator: Graph) -> None:
    """The filesystem collector reads the exporter's own mountstats: the kubelet's directory, mounted with
    HostToContainer propagation and read-only, brings every pod volume's NFS mount (and its counters) into it."""
    pod = with_operator.one("kubernetes:apps/v1:DaemonSet", "tel-fabric-ds").inputs["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    collectors = next(a for a in container["args"] if a.startswith("--collectors="))
    assert "filesystem" in collectors.removeprefix("--collectors=").split(",")
    mount = next(m for m in container["volumeMounts"] if m["name"] == "kubelet")
    assert mount == {
        "name": "kubelet",
        "mountPath": "/host/kubelet",
        "readOnly": True,
        "mountPropagation": "HostToContainer",
    }
    volume = next(v for v in pod["volumes"] if v["name"] == "kubelet")
    assert volume["hostPath"] == {"path": "/var/lib/kubelet", "type": "Directory"}
    assert container["securityContext"]["privileged"] is False  # HostToContainer needs no privilege


def test_fabric_exporter_sees_the_gpus_on_a_node_that_ignores_the_env_in_unprivileged_containers(
    with_operator: Graph,
) -> None:
    """Under the GPU visibility lockdown the toolkit reads the device list from mounts, not the env: the exporter
    names every GPU both ways, unprivileged."""
    pod = with_operator.one("kubernetes:apps/v1:DaemonSet", "tel-fabric-ds").inputs["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volume = next(v for v in pod["volumes"] if v["name"] == mounts["/var/run/nvidia-container-devices/all"])
    assert volume["hostPath"] == {"path": "/dev/null", "type": "CharDevice"}
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"} in container["env"]
    assert container["securityContext"]["privileged"] is False


def test_scrape_target_follows_the_operator_setting(with_operator: Graph, without_operator: Graph) -> None:
    sm = with_operator.one("kubernetes:monitoring.coreos.com/v1:ServiceMonitor", "tel-fabric-sm")
    assert sm.inputs["spec"]["endpoints"][0]["port"] == "metrics"
    svc = with_operator.one("kubernetes:core/v1:Service", "tel-fabric-svc")
    assert sm.inputs["spec"]["selector"]["matchLabels"] == svc.inputs["spec"]["selector"]

    g = without_operator
    assert not g.of_type("kubernetes:monitoring.coreos.com/v1:ServiceMonitor")
    assert not g.of_type("kubernetes:monitoring.coreos.com/v1:PrometheusRule")
    assert not g.of_type("kubernetes:core/v1:Namespace")
    ds = g.one("kubernetes:apps/v1:DaemonSet", "tel-fabric-ds")
    ann = ds.inputs["spec"]["template"]["metadata"]["annotations"]
    assert ann == {"prometheus.io/scrape": "true", "prometheus.io/port": "9402", "prometheus.io/path": "/metrics"}
    assert ds.inputs["spec"]["template"]["spec"]["nodeSelector"] == {"gpu": "h100"}
    rules_cm = g.one(CM, "tel-alerts-rules")
    groups = yaml.safe_load(rules_cm.inputs["data"]["gpucluster-telemetry.rules.yaml"])
    assert groups["groups"][0]["rules"][0]["alert"] == "GpuTemperatureHigh"
    chart = g.one(CHART, "tel-dcgm-chart")
    assert chart.inputs["values"]["serviceMonitor"]["enabled"] is False
    assert chart.inputs["values"]["podAnnotations"]["prometheus.io/scrape"] == "true"


def test_prometheus_rule_carries_settings_thresholds() -> None:
    s = settings(alerts={"gpuTempLimitC": 72, "forMinutes": 4})
    g = deploy(lambda: Telemetry("t2", TelemetryArgs(s)))
    rule = g.one("kubernetes:monitoring.coreos.com/v1:PrometheusRule", "t2-alerts-rule")
    temp = rule.inputs["spec"]["groups"][0]["rules"][0]
    assert temp["alert"] == "GpuTemperatureHigh"
    assert temp["expr"].endswith("> 72")
    assert temp["for"] == "4m"
    assert temp["labels"]["gpucluster_signal"] == "gpu-quarantine"


def test_dashboard_configmap_for_the_grafana_sidecar(with_operator: Graph) -> None:
    cm = with_operator.one(CM, "tel-dashboard-dashboard")
    assert cm.inputs["metadata"]["labels"]["grafana_dashboard"] == "1"
    doc = json.loads(cm.inputs["data"]["gpucluster-gpu-fabric.json"])
    temp = next(p for p in doc["panels"] if p["title"].startswith("GPU temperature"))
    steps = temp["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert steps[-1]["value"] == 78


def test_args_are_validated_with_clear_messages() -> None:
    with pytest.raises(ValueError, match=r"FabricExporterArgs\.namespace: 'Bad_NS'"):
        FabricExporterArgs(TelemetrySettings(), "Bad_NS")
    with pytest.raises(TypeError, match=r"TelemetryArgs\.settings: expected TelemetrySettings, got dict"):
        TelemetryArgs({"namespace": "x"})  # type: ignore[arg-type]


def test_the_quarantine_toleration_is_added_once_whatever_the_stack_lists() -> None:
    quarantine = {"key": "gpucluster.io/quarantine", "operator": "Exists"}
    acceptance = {"key": "gpucluster.io/acceptance-failed", "operator": "Exists"}
    none = TelemetrySettings.model_validate({"gpuTolerations": []})
    assert telemetry_tolerations(none) == [quarantine, acceptance]
    listed = TelemetrySettings.model_validate({"gpuTolerations": [quarantine]})
    assert telemetry_tolerations(listed) == [quarantine, acceptance]
    # a toleration of one effect only would let the NoExecute taint evict the exporter: ours is added
    narrow = TelemetrySettings.model_validate(
        {"gpuTolerations": [{"key": "gpucluster.io/quarantine", "operator": "Exists", "effect": "NoSchedule"}]}
    )
    assert telemetry_tolerations(narrow)[-2:] == [quarantine, acceptance]


def test_the_exporters_tolerate_the_reservation_taint_a_running_gang_holds() -> None:
    cfg = load_stack_file(ROOT / "stacks" / "Pulumi.local.yaml")
    reservation = {"key": cfg.controller(MAKE_BEFORE_BREAK).reservation_key, "operator": "Exists"}
    assert cfg.telemetry.reservation_taint_key == "gpucluster.io/reservation"
    assert reservation in telemetry_tolerations(cfg.telemetry)
    assert reservation in dcgm_values(cfg.telemetry)["tolerations"]
    # a stack that renames the reservation key moves the exporters' toleration with it
    moved = TelemetrySettings.model_validate({"reservationTaintKey": "example.com/held"})
    assert {"key": "example.com/held", "operator": "Exists"} in telemetry_tolerations(moved)
    assert reservation not in telemetry_tolerations(moved)
