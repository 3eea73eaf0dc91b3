"""The "GPU and fabric" Grafana dashboard, as a pure function of the settings.

Queries use two Grafana variables: ``$node`` (multi-value regex over nodes) and ``$__rate_interval``.
``panel_queries(dashboard)`` lists every query so tests can run them against a real Prometheus.

The row "Training" reads the interruption accounting daemon (``gpucluster_training_*``; every replica exports the
same figures, hence ``max by``): ETTR per job and for the cluster, interruptions by cause, restarts in the last hour
against the bound, recovery time, work lost; and the per-job GPU view: dcgm-exporter attributes each GPU's series to
the pod using it (``namespace``, ``pod``) and, with ``kubernetes.enablePodLabels``, copies the pod's labels with their
names sanitised (``gpucluster.io/training-job`` -> :data:`DCGM_JOB_LABEL`), so tensor activity and temperature
average per job.
"""

from __future__ import annotations

import re
from typing import Any

from components.telemetry.settings import TelemetrySettings
from contract.constants import TRAINING_JOB_LABEL
from contract.controllers.interruptions import TRAINING
from contract.dcgm import on_either_host, with_node

UID = "gpucluster-gpu-fabric"
FABRIC = "gpucluster_fabric"
DS = {"type": "prometheus", "uid": "${datasource}"}
#: The training job label as dcgm-exporter writes it on a GPU's series (pod label names sanitised for Prometheus).
DCGM_JOB_LABEL = re.sub(r"[^a-zA-Z0-9_]", "_", TRAINING_JOB_LABEL)


def _dcgm(metric: str) -> str:
    """DCGM series of the selected nodes, with ``node`` copied from the host label (either spelling)."""
    return with_node(on_either_host(metric + '{{{host}=~"$node"}}'))


def _dcgm_over_time(fn: str, metric: str, window: str) -> str:
    """``fn(metric[window])`` per node and GPU; ``node`` is copied from the host label after the range function."""
    per_gpu = on_either_host(fn + "(" + metric + '{{{host}=~"$node"}}[' + window + "])")
    return f"sum by (node, gpu) ({with_node(per_gpu)})"


def _panel(
    pid: int,
    title: str,
    targets: list[tuple[str, str]],
    grid: tuple[int, int, int, int],
    *,
    unit: str = "short",
    thresholds: list[dict[str, Any]] | None = None,
    description: str = "",
) -> dict[str, Any]:
    x, y, w, h = grid
    defaults: dict[str, Any] = {"unit": unit, "custom": {"lineWidth": 1, "fillOpacity": 0}}
    if thresholds is not None:
        defaults["thresholds"] = {"mode": "absolute", "steps": thresholds}
        defaults["custom"]["thresholdsStyle"] = {"mode": "line+area"}
    return {
        "id": pid,
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": DS,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {"legend": {"displayMode": "table", "placement": "right"}, "tooltip": {"mode": "multi"}},
        "targets": [
            {"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend, "datasource": DS}
            for i, (expr, legend) in enumerate(targets)
        ],
    }


def dashboard(settings: TelemetrySettings) -> dict[str, Any]:
    limit = settings.alerts.gpu_temp_limit_c
    node_sel = '{node=~"$node"}'
    ri = "$__rate_interval"
    panels = [
        _panel(
            1,
            "GPU temperature (limit line)",
            [
                (f"max by (node, gpu) ({_dcgm('DCGM_FI_DEV_GPU_TEMP')})", "{{node}} GPU{{gpu}}"),
                (f"max by (node, gpu) ({_dcgm('DCGM_FI_DEV_MEMORY_TEMP')})", "{{node}} GPU{{gpu}} HBM"),
            ],
            (0, 0, 12, 8),
            unit="celsius",
            thresholds=[{"color": "green", "value": None}, {"color": "red", "value": limit}],
            description=f"GPUs above {limit:g} °C for {settings.alerts.for_minutes} minutes are quarantined.",
        ),
        _panel(
            2,
            "Tensor-core activity vs GPU utilisation",
            [
                (f"avg by (node, gpu) ({_dcgm('DCGM_FI_PROF_PIPE_TENSOR_ACTIVE')})", "{{node}} GPU{{gpu}} tensor"),
                (f"avg by (node, gpu) ({_dcgm('DCGM_FI_DEV_GPU_UTIL')}) / 100", "{{node}} GPU{{gpu}} util"),
            ],
            (12, 0, 12, 8),
            unit="percentunit",
            description="Utilisation high while tensor activity stays low: the GPU is busy without tensor cores.",
        ),
        _panel(
            3,
            "GPU engine and memory activity",
            [
                (f"avg by (node, gpu) ({_dcgm('DCGM_FI_PROF_GR_ENGINE_ACTIVE')})", "{{node}} GPU{{gpu}} engine"),
                (f"avg by (node, gpu) ({_dcgm('DCGM_FI_PROF_DRAM_ACTIVE')})", "{{node}} GPU{{gpu}} DRAM"),
            ],
            (0, 8, 12, 8),
            unit="percentunit",
        ),
        _panel(
            4,
            "Thermal throttling and clock events",
            [
                (
                    _dcgm_over_time("rate", "DCGM_FI_DEV_THERMAL_VIOLATION", ri) + " / 1e6",
                    "{{node}} GPU{{gpu}} thermal violation s/s",
                ),
                (
                    f"max by (node, gpu) ({_dcgm('DCGM_FI_DEV_CLOCKS_EVENT_REASONS')})",
                    "{{node}} GPU{{gpu}} clock-event mask",
                ),
            ],
            (12, 8, 12, 8),
        ),
        _panel(
            5,
            "InfiniBand throughput",
            [
                (
                    f"sum by (node, device) (rate({FABRIC}_infiniband_port_transmit_data_bytes_total{node_sel}[{ri}]))",
                    "{{node}} {{device}} tx",
                ),
                (
                    f"sum by (node, device) (rate({FABRIC}_infiniband_port_receive_data_bytes_total{node_sel}[{ri}]))",
                    "{{node}} {{device}} rx",
                ),
            ],
            (0, 16, 12, 8),
            unit="Bps",
        ),
        _panel(
            6,
            "InfiniBand transmit wait (congestion)",
            [
                (
                    f"sum by (node, device, port) (rate({FABRIC}_infiniband_port_transmit_wait_total{node_sel}[{ri}]))",
                    "{{node}} {{device}}/{{port}}",
                )
            ],
            (12, 16, 12, 8),
            thresholds=[
                {"color": "green", "value": None},
                {"color": "orange", "value": settings.alerts.xmit_wait_rate},
            ],
        ),
        _panel(
            7,
            "InfiniBand errors by type",
            [
                (
                    f"sum by (node, device, type) (increase({FABRIC}_infiniband_port_errors_total{node_sel}[{ri}]))",
                    "{{node}} {{device}} {{type}}",
                ),
                (
                    f"sum by (node, device, counter) (increase({FABRIC}_infiniband_hw_counters_total"
                    f'{{node=~"$node",counter=~".*err.*|out_of_buffer|out_of_sequence"}}[{ri}]))',
                    "{{node}} {{device}} {{counter}}",
                ),
            ],
            (0, 24, 12, 8),
        ),
        _panel(
            8,
            "NVLink errors",
            [
                (
                    f"sum by (node, gpu, type) (increase({FABRIC}_nvlink_errors_total{node_sel}[{ri}]))",
                    "{{node}} GPU{{gpu}} {{type}}",
                ),
                (
                    _dcgm_over_time("increase", "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", ri),
                    "{{node}} GPU{{gpu}} DCGM crc_flit",
                ),
                (
                    _dcgm_over_time("increase", "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", ri),
                    "{{node}} GPU{{gpu}} DCGM replay",
                ),
            ],
            (12, 24, 12, 8),
        ),
        _panel(
            9,
            "GPU memory health and XID",
            [
                (
                    f"max by (node, gpu) ({_dcgm('DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS')})",
                    "{{node}} GPU{{gpu}} uncorrectable remapped rows",
                ),
                (
                    f"max by (node, gpu) ({_dcgm('DCGM_FI_DEV_ECC_DBE_VOL_TOTAL')})",
                    "{{node}} GPU{{gpu}} volatile DBE",
                ),
                (f"max by (node, gpu) ({_dcgm('DCGM_FI_DEV_XID_ERRORS')})", "{{node}} GPU{{gpu}} last XID"),
            ],
            (0, 32, 12, 8),
        ),
        _panel(
            10,
            "Fabric exporter collector health",
            [(f"min by (node, collector) ({FABRIC}_collector_success{node_sel})", "{{node}} {{collector}}")],
            (12, 32, 12, 8),
        ),
        _panel(
            18,
            "Filesystem writes and reads per node (checkpoints)",
            [
                (
                    f"sum by (node, filesystem) (rate({FABRIC}_filesystem_write_bytes_total{node_sel}[{ri}]))",
                    "{{node}} {{filesystem}} write",
                ),
                (
                    f"sum by (node, filesystem) (rate({FABRIC}_filesystem_read_bytes_total{node_sel}[{ri}]))",
                    "{{node}} {{filesystem}} read",
                ),
            ],
            (0, 40, 12, 8),
            unit="Bps",
            description="What each node's NFS and Lustre clients wrote and read (the fabric exporter's filesystem "
            "collector). A checkpoint is a burst of writes on every node of its gang: its width is the write time, "
            "its height the throughput. The stall detector counts writes at or above storageFloor as work.",
        ),
        _panel(
            19,
            "Filesystem RPC timeouts and round trip",
            [
                (
                    f"sum by (node, filesystem, op) (increase({FABRIC}_filesystem_rpc_timeouts_total{node_sel}[{ri}]))",
                    "{{node}} {{filesystem}} {{op}} timeouts",
                ),
                (
                    f"sum by (node, filesystem, op) (rate({FABRIC}_filesystem_rpc_rtt_seconds_total{node_sel}[{ri}]))"
                    f" / sum by (node, filesystem, op) (rate({FABRIC}_filesystem_rpc_calls_total{node_sel}[{ri}]))",
                    "{{node}} {{filesystem}} {{op}} seconds per call",
                ),
            ],
            (12, 40, 12, 8),
            description="NFS RPCs that timed out (alert FilesystemClientTimeouts, which also counts the errors "
            "kernels 5.x report per op), and the average round trip of a call: a slow client stretches every "
            "checkpoint written through it.",
        ),
    ]
    panels += training_panels(settings, y=48)
    return {
        "uid": UID,
        "title": "GPU and fabric",
        "tags": ["gpucluster", "gpu", "infiniband", "nvlink"],
        "schemaVersion": 39,
        "version": 1,
        "editable": False,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                },
                {
                    "name": "node",
                    "type": "query",
                    "datasource": DS,
                    "query": {"query": f"label_values({FABRIC}_collector_success, node)", "refId": "node"},
                    "definition": f"label_values({FABRIC}_collector_success, node)",
                    "includeAll": True,
                    "multi": True,
                    "allValue": ".*",
                    "current": {"text": "All", "value": "$__all"},
                    "refresh": 2,
                },
            ]
        },
        "panels": panels,
    }


def training_panels(settings: TelemetrySettings, *, y: int) -> list[dict[str, Any]]:
    """The row "Training" and its panels, from ``y`` down."""
    a = settings.alerts
    job = "namespace, job"
    row = {"id": 11, "type": "row", "title": "Training", "collapsed": False, "panels": []}
    row["gridPos"] = {"x": 0, "y": y, "w": 24, "h": 1}
    y += 1
    per_job = f'{DCGM_JOB_LABEL}!=""'
    gpu = _panel(
        17,
        "Tensor activity and temperature per job",
        [
            (
                f"avg by (namespace, {DCGM_JOB_LABEL}) (DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{{{per_job}}})",
                f"{{{{namespace}}}}/{{{{{DCGM_JOB_LABEL}}}}} tensor",
            ),
            (
                f"avg by (namespace, {DCGM_JOB_LABEL}) (DCGM_FI_DEV_GPU_TEMP{{{per_job}}})",
                f"{{{{namespace}}}}/{{{{{DCGM_JOB_LABEL}}}}} temperature",
            ),
        ],
        (0, y + 24, 24, 8),
        unit="percentunit",
        description="Averaged over the GPUs of each job's pods (dcgm-exporter's pod mapping): tensor-core activity "
        "rises and falls with the job's phases; temperature on the right axis.",
    )
    gpu["fieldConfig"]["overrides"] = [
        {
            "matcher": {"id": "byRegexp", "options": ".* temperature"},
            "properties": [
                {"id": "unit", "value": "celsius"},
                {"id": "custom.axisPlacement", "value": "right"},
            ],
        }
    ]
    return [
        row,
        _panel(
            12,
            "ETTR per job and cluster",
            [
                (f"max by ({job}) ({TRAINING}_ettr)", "{{namespace}}/{{job}}"),
                (f"max({TRAINING}_cluster_ettr)", "cluster"),
            ],
            (0, y, 12, 8),
            unit="percentunit",
            thresholds=[{"color": "red", "value": None}, {"color": "green", "value": a.ettr_low_ratio}],
            description="Effective training time ratio since each job was first admitted: time with every pod "
            "Running, less checkpoint writes and work lost, over wall time. The cluster's is node-weighted.",
        ),
        _panel(
            13,
            "Interruptions by cause (last hour)",
            [
                (
                    f"sum by (cause) (max by ({job}, cause) (increase({TRAINING}_interruptions_total[1h])))",
                    "{{cause}}",
                )
            ],
            (12, y, 12, 8),
            description="node, program, preemption, requeue, unknown (daemons/interruptions/classify.py).",
        ),
        _panel(
            14,
            "Restarts in the last hour and the bound",
            [
                (f"max by ({job}) ({TRAINING}_restarts_last_hour)", "{{namespace}}/{{job}}"),
                (f"max by ({job}) ({TRAINING}_max_restarts_per_hour)", "{{namespace}}/{{job}} bound"),
            ],
            (0, y + 8, 12, 8),
            description="Past its bound a job is stopped: its Workload deactivated (Event RestartBoundReached).",
        ),
        _panel(
            15,
            "Recovery time (failure to every pod Running)",
            [(f"max by ({job}) ({TRAINING}_recovery_seconds)", "{{namespace}}/{{job}}")],
            (12, y + 8, 12, 8),
            unit="s",
            thresholds=[{"color": "green", "value": None}, {"color": "orange", "value": a.recovery_slow_seconds}],
        ),
        _panel(
            16,
            "Work lost and checkpoint age",
            [
                (f"max by ({job}) ({TRAINING}_work_lost_seconds)", "{{namespace}}/{{job}} lost"),
                (f"max by ({job}) ({TRAINING}_checkpoint_age_seconds)", "{{namespace}}/{{job}} checkpoint age"),
            ],
            (0, y + 16, 24, 8),
            unit="s",
            description="Work lost: the time since the last checkpoint at each interruption, summed.",
        ),
        gpu,
    ]


def panel_queries(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """``(panel title, expr)`` for every query of the dashboard (rows have none)."""
    return [(p["title"], t["expr"]) for p in doc["panels"] for t in p.get("targets", [])]
