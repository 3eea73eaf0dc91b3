"""Stack-config section ``gpucluster:telemetry``: DCGM exporter, fabric exporter, alert thresholds.

Example (stack YAML)::

    gpucluster:telemetry:
      namespace: gpu-telemetry
      prometheusOperator: true
      gpuNodeSelector: {nvidia.com/gpu.present: "true"}
      dcgmExporter:
        chartVersion: 4.2.0
        chart: {repo: https://nvidia.github.io/dcgm-exporter/helm-charts, name: dcgm-exporter}
        imageTag: 4.2.3-4.2.0-ubuntu22.04
      fabricExporter:
        image: ghcr.io/example/gpucluster-daemons:0.1.0  # unset: from gpucluster:images
        port: 9402
        scrape: serviceMonitor
      alerts:
        gpuTempLimitC: 78
        forMinutes: 2
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator

from contract.chart_settings import ChartSource
from contract.constants import DCGM_EXPORTER_APP, FABRIC_EXPORTER_APP, GPU_TEMP_CEILING_C
from contract.images_settings import DEFAULT_DAEMONS_IMAGE
from contract.issues import ConfigIssue, SettingsError, issues_from_validation_error, shown
from contract.model import (
    ConfigModel,
    DnsSubdomain,
    Image,
    PositiveDuration,
    Problem,
    SemVerOrV,
    TaintKey,
    Toleration,
    check_dns_label,
    check_labels,
)

STACK_KEY = "gpucluster:telemetry"
#: The fields the stack fills (camelCase key: where from); a stack section that sets one is refused.
FILLED = {
    "reservationTaintKey": "gpucluster:makeBeforeBreak.reservationKey",
    "inferencePriorityClass": "gpucluster:priorities.pod.inference.name",
    "makeBeforeBreakHoldSeconds": "gpucluster:makeBeforeBreak.maxHold (none while it is off)",
    "bursting": "gpucluster:burst.enabled",
    "taintControllerRunning": "gpucluster:burst.enabled and gpucluster:burst.taintController.enabled",
    "checkpointVerifierRunning": "gpucluster:checkpointVerifier.enabled",
    "restoreDrillStaleSeconds": "gpucluster:checkpointVerifier.restoreDrill.staleAfter (none while the verifier or "
    "its drills are off)",
}
#: NVIDIA's chart is versioned as the exporter it ships; its image tags are ``<DCGM>-<exporter>-<base image>``.
DEFAULT_DCGM_CHART_VERSION = "4.2.0"
DEFAULT_DCGM_IMAGE_TAG = "4.2.3-4.2.0-ubuntu22.04"
#: The first dcgm-exporter (and chart) that copies the pod's labels onto its GPUs' series
#: (``kubernetes.enablePodLabels``, ``DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS``): 4.1.3 and before attach only
#: ``namespace``, ``pod`` and ``container``, and Helm drops the value it does not know without a word.
POD_LABELS_SINCE = (4, 2, 0)
_EXPORTER_TAG = re.compile(r"^\d+\.\d+\.\d+-(\d+)\.(\d+)\.(\d+)(?:-.*)?$")
DEFAULT_DCGM_CHART_REPO = "https://nvidia.github.io/dcgm-exporter/helm-charts"

_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


#: A Prometheus ``job`` label value, quoted into PromQL: no quotes, backslashes or braces.
ScrapeJob = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.:/-]{1,128}$")]

_NO_POD_LABELS = (
    "does not copy the pod's labels onto its series (kubernetes.enablePodLabels came in 4.2.0), and the per-job "
    "views read gpucluster_io_training_job from them: pin 4.2.0 or later"
)


class DcgmExporterSettings(ConfigModel):
    #: Install NVIDIA's chart. The simulated cluster has neither GPUs nor a chart registry: it applies only
    #: our counters ConfigMap.
    install_chart: bool = True
    chart_version: SemVerOrV = DEFAULT_DCGM_CHART_VERSION
    chart: ChartSource = ChartSource(repo=DEFAULT_DCGM_CHART_REPO, name="dcgm-exporter")
    image_repository: str = "nvcr.io/nvidia/k8s/dcgm-exporter"
    image_tag: str = DEFAULT_DCGM_IMAGE_TAG
    scrape_interval: PositiveDuration = "15s"
    #: The ``job`` label Prometheus gives dcgm-exporter's series; the quarantine alerts read only those, so a pod
    #: serving look-alike series under another scrape job names no node. Unset: the chart's ServiceMonitor's
    #: (``dcgm-exporter``, its Service); required when the Prometheus operator is off (scraped by annotation).
    scrape_job: ScrapeJob | None = None

    @field_validator("image_tag")
    @classmethod
    def _tag(cls, v: str) -> str:
        if not _TAG.match(v):
            raise ValueError(f"{shown(v)} is not an image tag")
        if v == "latest":
            raise ValueError("the moving tag 'latest' is refused: pin a version tag")
        m = _EXPORTER_TAG.match(v)
        if m and tuple(int(g) for g in m.groups()) < POD_LABELS_SINCE:
            raise ValueError(f"dcgm-exporter {'.'.join(m.groups())} {_NO_POD_LABELS}")
        return v

    @field_validator("chart_version")
    @classmethod
    def _chart(cls, v: str) -> str:
        m = re.match(r"^v?(\d+)\.(\d+)\.(\d+)", v)
        if m and tuple(int(g) for g in m.groups()) < POD_LABELS_SINCE:
            raise ValueError(f"the dcgm-exporter chart {v} {_NO_POD_LABELS}")
        return v


class FabricExporterSettings(ConfigModel):
    #: The daemons' image (the exporter is one of its console scripts); unset in a stack: from ``gpucluster:images``.
    image: Image = DEFAULT_DAEMONS_IMAGE
    port: Annotated[int, Field(ge=1024, le=65535)] = 9402
    #: How Prometheus finds the exporter; unset follows ``prometheusOperator``.
    scrape: Literal["serviceMonitor", "annotations"] | None = None
    scrape_interval: PositiveDuration = "15s"
    #: The ``job`` label Prometheus gives the exporter's series (the quarantine alerts read only those). Unset: its
    #: ServiceMonitor's (``gpucluster-fabric-exporter``, its Service); required when scraped by annotation.
    scrape_job: ScrapeJob | None = None
    #: RuntimeClass that injects the NVIDIA driver libraries and device nodes (GPU operator: "nvidia").
    runtime_class_name: str | None = "nvidia"


class AlertSettings(ConfigModel):
    #: GPU core temperature (°C) above which a GPU is reported for quarantine; defaults to the hard ceiling
    #: ``GPU_TEMP_CEILING_C`` (contract/constants.py) and may only be lowered: the quarantine signal must never
    #: be configured later than that.
    gpu_temp_limit_c: Annotated[float, Field(gt=0)] = GPU_TEMP_CEILING_C
    #: Minutes the temperature must stay above the limit before the alert fires.
    for_minutes: Annotated[int, Field(ge=1, le=60)] = 2
    #: GPU utilisation (%) considered "busy" for the tensor-core efficiency alert.
    util_high_pct: Annotated[float, Field(gt=0, le=100)] = 80.0
    #: Tensor pipe activity ratio (0-1) below which a busy GPU is "not using tensor cores".
    tensor_active_low_ratio: Annotated[float, Field(gt=0, lt=1)] = 0.05
    util_tensor_for_minutes: Annotated[int, Field(ge=1, le=240)] = 15
    #: Port transmit-wait ticks per second above which a port is congested.
    xmit_wait_rate: Annotated[float, Field(gt=0)] = 1_000_000.0
    xmit_wait_for_minutes: Annotated[int, Field(ge=1, le=240)] = 10
    #: Window over which error counters are checked for an increase.
    error_window_minutes: Annotated[int, Field(ge=1, le=240)] = 5
    #: NVLink CRC (flit, data) and replay errors one link may count within the window before the GPU is reported
    #: for quarantine: the data-link layer corrects them by replaying, and a fleet counts a background trickle. A
    #: link recovery (retraining) is reported at the first one.
    nvlink_errors_per_window: Annotated[int, Field(ge=1, le=10_000_000)] = 100
    #: InfiniBand symbol errors per bit the port signalled over the window (its rate times the window) above which
    #: the port is reported for quarantine: the link's bit-error ratio. 1e-12 is the InfiniBand link target. A link
    #: that went down or had to recover is reported at the first one.
    ib_symbol_error_ratio: Annotated[float, Field(gt=0, lt=1)] = 1e-12
    #: InfiniBand transport retries and timeouts (``hw_counters``: local ACK timeouts, RNR NAK retries, sequence
    #: errors) one port may count within the window before it is named: the NIC timeouts that hang a collective
    #: while every link looks up. Informs (the peer or a switch may be at fault), never quarantines on its own.
    ib_transport_errors_per_window: Annotated[int, Field(ge=1, le=10_000_000)] = 10
    #: Minutes a Ready GPU node may go without any DCGM or fabric-exporter series before it is reported: a node
    #: nobody watches cannot be quarantined.
    telemetry_missing_minutes: Annotated[int, Field(ge=1, le=240)] = 10
    #: Minutes a fabric-exporter collector may fail before alerting.
    collector_failing_minutes: Annotated[int, Field(ge=1, le=240)] = 10
    #: Training: a job's effective training time ratio below this for ``ettrLowForMinutes`` alerts.
    ettr_low_ratio: Annotated[float, Field(gt=0, lt=1)] = 0.8
    ettr_low_for_minutes: Annotated[int, Field(ge=1, le=1440)] = 30
    #: Training: an interruption that took longer than this to get every pod Running again alerts.
    recovery_slow_seconds: Annotated[float, Field(gt=0)] = 600.0
    #: Serving: minutes an inference pod may stay Pending (no room in the cluster, none rented) before alerting.
    inference_pending_minutes: Annotated[int, Field(ge=1, le=240)] = 10
    #: Serving: a provider whose create/run failure rate (the burst provider's own window) stays above this
    #: for 10 minutes alerts; the provider service already prices it down.
    provider_failure_rate: Annotated[float, Field(gt=0, le=1)] = 0.5

    @field_validator("gpu_temp_limit_c")
    @classmethod
    def _ceiling(cls, v: float) -> float:
        if v > GPU_TEMP_CEILING_C:
            raise ValueError(f"{v:g} °C is above the {GPU_TEMP_CEILING_C:g} °C ceiling; the limit may only be lowered")
        return v


class TelemetrySettings(ConfigModel):
    namespace: str = "gpu-telemetry"
    create_namespace: bool = True
    #: True when the Prometheus operator CRDs (ServiceMonitor, PrometheusRule) are installed.
    prometheus_operator: bool = True
    gpu_node_selector: dict[str, str] = {"nvidia.com/gpu.present": "true"}
    gpu_tolerations: list[Toleration] = [Toleration(key="nvidia.com/gpu", operator="Exists")]
    #: Namespace the Grafana sidecar watches for dashboards; unset: ``namespace``.
    grafana_dashboard_namespace: str | None = None
    dcgm_exporter: DcgmExporterSettings = DcgmExporterSettings()
    fabric_exporter: FabricExporterSettings = FabricExporterSettings()
    alerts: AlertSettings = AlertSettings()
    #: The ``job`` label your Prometheus gives the Ceph manager's prometheus module (Rook's ServiceMonitor:
    #: ``rook-ceph-mgr``). Set, the Ceph health alerts are deployed (the cluster and CephFS health as Ceph reports
    #: it); unset, none (an alert on series nothing scrapes can never fire).
    ceph_scrape_job: ScrapeJob | None = None

    # Filled by the stack (FILLED).
    #: Make-before-break's reservation taint, on a running gang's nodes for the whole run: the exporters tolerate
    #: it, so a rolled DaemonSet still watches them.
    reservation_taint_key: TaintKey | None = None
    #: The inference pods' PriorityClass: the serving alerts count Pending inference pods by it (kube_pod_info).
    inference_priority_class: DnsSubdomain = "gpucluster-inference"
    #: Make-before-break's ``maxHold`` in seconds (its default, 5m), or None when the stack runs none: a gang held
    #: longer, or a controller that stopped cycling while gangs wait on its check, alerts.
    make_before_break_hold_seconds: Annotated[float, Field(gt=0, le=3600)] | None = 300.0
    #: The stack runs the burst provider service (bursting is on): the providers' and the spend alerts, which read
    #: its series, are deployed only then (an alert on series nothing exports can never fire).
    bursting: bool = True
    #: The stack runs the taint controller: its flapping alert is deployed only then.
    taint_controller_running: bool = True
    #: The stack runs the checkpoint verifier: its alert is deployed only then.
    checkpoint_verifier_running: bool = True
    #: The verifier's restore drills run: their alerts are deployed only then, the stale one past this age.
    restore_drill_stale_seconds: Annotated[float, Field(gt=0, le=7 * 86400)] | None = 172800.0

    @field_validator("namespace", "grafana_dashboard_namespace")
    @classmethod
    def _ns(cls, v: str | None) -> str | None:
        return None if v is None else check_dns_label(v)

    @field_validator("gpu_node_selector")
    @classmethod
    def _selector(cls, v: dict[str, str]) -> dict[str, str]:
        if not v:
            raise ValueError("must select GPU nodes: give at least one label")
        check_labels(v)
        return v

    def rule_problems(self) -> Iterator[Problem]:
        if self.fabric_exporter.scrape == "serviceMonitor" and not self.prometheus_operator:
            yield Problem(
                ("fabricExporter", "scrape"),
                "is serviceMonitor but prometheusOperator is false "
                "(ServiceMonitor needs the Prometheus operator CRDs); use annotations",
                self.fabric_exporter.scrape,
            )
        for section, job in (("dcgmExporter", self.dcgm_scrape_job), ("fabricExporter", self.fabric_scrape_job)):
            if job is None:
                yield Problem(
                    (section, "scrapeJob"),
                    "is required when the exporter is scraped by annotation: name the job your Prometheus gives its "
                    "series (the quarantine alerts read only that job's)",
                    None,
                )

    @property
    def dcgm_scrape_job(self) -> str | None:
        """The ``job`` of dcgm-exporter's series: the setting, else its ServiceMonitor's; None: unknown."""
        if self.dcgm_exporter.scrape_job is not None:
            return self.dcgm_exporter.scrape_job
        return DCGM_EXPORTER_APP if self.prometheus_operator else None

    @property
    def fabric_scrape_job(self) -> str | None:
        """The ``job`` of the fabric exporter's series: the setting, else its ServiceMonitor's; None: unknown."""
        if self.fabric_exporter.scrape_job is not None:
            return self.fabric_exporter.scrape_job
        return FABRIC_EXPORTER_APP if self.fabric_scrape == "serviceMonitor" else None

    @property
    def fabric_scrape(self) -> Literal["serviceMonitor", "annotations"]:
        if self.fabric_exporter.scrape is not None:
            return self.fabric_exporter.scrape
        return "serviceMonitor" if self.prometheus_operator else "annotations"

    @property
    def dashboard_namespace(self) -> str:
        return self.grafana_dashboard_namespace or self.namespace


class TelemetrySettingsError(SettingsError):
    """Bad ``gpucluster:telemetry`` config; the message names every offending field."""


def parse_telemetry_settings(raw: Any, where: str = STACK_KEY) -> TelemetrySettings:
    """Validate a raw mapping (from the stack YAML) into settings, or raise one error naming each field."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise TelemetrySettingsError([ConfigIssue(where, None, f"expected a mapping, got {type(raw).__name__}")], where)
    try:
        return TelemetrySettings.model_validate(raw)
    except ValidationError as exc:
        raise TelemetrySettingsError(issues_from_validation_error(exc, where), where) from None
