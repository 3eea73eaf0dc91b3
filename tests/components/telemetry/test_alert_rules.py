"""Alert rules under ``promtool``: every rule has a case that fires and one that stays quiet.

The rule file is written from ``rule_groups(settings)``. ``promtool check rules`` runs on it as is; for
``promtool test rules`` the annotations are dropped (they are prose, compared verbatim by promtool), so the
cases check what matters: when each alert fires and the labels it carries (node, gpu, quarantine signal).
"""

from __future__ import annotations

import copy
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.config import load_stack_file
from components.telemetry.alerts import (
    CEPHFS_CHECKS,
    QUARANTINE_ALERTS,
    QUARANTINE_SIGNAL_LABEL,
    QUARANTINE_SIGNAL_VALUE,
    REPLACEMENT_LABEL,
    REPLACEMENT_VALUE,
    alert_names,
    rule_groups,
)
from components.telemetry.settings import TelemetrySettings, TelemetrySettingsError, parse_telemetry_settings
from contract.model import parse_duration
from contract.quarantine_settings import DEFAULT_SIGNAL_QUERY, REASONS, SIGNAL_LABEL, SIGNAL_VALUE
from contract.registry import MAKE_BEFORE_BREAK
from daemons.burst_provider import metrics as burst_metrics
from daemons.make_before_break import metrics as mbb_metrics
from daemons.taint_controller import metrics as taint_metrics
from tests.support.require import debian_tool

ROOT = Path(__file__).resolve().parents[3]
GPU = {"Hostname": "gpu-node-1", "gpu": "0", "UUID": "GPU-a", "job": "dcgm-exporter"}
GPU_SEL = '{Hostname="gpu-node-1",gpu="0",UUID="GPU-a",job="dcgm-exporter"}'
#: The same series served by someone else's pod under another scrape job (prometheus.io/scrape annotations).
LOOKALIKE_GPU_SEL = '{Hostname="gpu-node-1",gpu="0",UUID="GPU-a",job="kubernetes-pods"}'
GPU_OUT = {"node": "gpu-node-1", "gpu": "0", "UUID": "GPU-a"}
IB_SEL = 'device="mlx5_0",port="1",node="gpu-node-1",job="gpucluster-fabric-exporter"'
IB_OUT = {"node": "gpu-node-1", "device": "mlx5_0", "port": "1"}
FS_SEL = 'fstype="nfs4",filesystem="10.0.0.9:/ckpt",node="gpu-node-1",job="gpucluster-fabric-exporter"'
FS_OUT = {"node": "gpu-node-1", "fstype": "nfs4", "filesystem": "10.0.0.9:/ckpt"}
NVLINK = (
    'gpucluster_fabric_nvlink_errors_total{{node="gpu-node-1",gpu="0",uuid="GPU-a",link="3",type="{type}",'
    'job="gpucluster-fabric-exporter"}}'
)


def nvlink_out(type_: str) -> dict[str, str]:
    return {"node": "gpu-node-1", "gpu": "0", "uuid": "GPU-a", "link": "3", "type": type_, "severity": "warning"} | {
        QUARANTINE_SIGNAL_LABEL: QUARANTINE_SIGNAL_VALUE
    }


def case(series: list[tuple[str, str]], alert: str, at: str, fires: list[dict[str, str]]) -> dict[str, Any]:
    return {
        "interval": "1m",
        "input_series": [{"series": s, "values": v} for s, v in series],
        "alert_rule_test": [{"eval_time": at, "alertname": alert, "exp_alerts": [{"exp_labels": f} for f in fires]}],
    }


SIGNAL = {QUARANTINE_SIGNAL_LABEL: QUARANTINE_SIGNAL_VALUE}
REPLACE = {REPLACEMENT_LABEL: REPLACEMENT_VALUE}


def gpu_node(node: str, ready: int = 1, taint: str = "") -> list[tuple[str, str]]:
    """kube-state-metrics' series of a node with 8 GPUs."""
    series = [
        (f'kube_node_status_capacity{{node="{node}",resource="nvidia_com_gpu",unit="integer"}}', "8x20"),
        (f'kube_node_status_condition{{node="{node}",condition="Ready",status="true"}}', f"{ready}x20"),
    ]
    if taint:
        series.append((f'kube_node_spec_taint{{node="{node}",key="{taint}",effect="NoSchedule"}}', "1x20"))
    return series


JOB_SEL = 'namespace="team-a",job="llm",team="a"'
VERIFIER_SEL = 'namespace="team-a",job="llm"'
DRILL_GOOD = f"gpucluster_checkpoint_verifier_restore_drill_last_good_timestamp_seconds{{{VERIFIER_SEL}}}"
HOLD = "gpucluster_make_before_break_hold_seconds"
CYCLES = "gpucluster_make_before_break_cycles_total"
INFERENCE_POD = 'namespace="inference",pod="sd-serve-7d9f-x2"'
WARN = {"severity": "warning"}
JOB_OUT = {"namespace": "team-a", "job": "llm", "team": "a"}
TRAIN_WARN = {**JOB_OUT, "severity": "warning"}
HOT = {**GPU_OUT, "severity": "critical", **SIGNAL}

CASES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    # name: (fires, stays quiet)
    "GpuTemperatureHigh": (
        case([(f"DCGM_FI_DEV_GPU_TEMP{GPU_SEL}", "79x5")], "GpuTemperatureHigh", "3m", [HOT]),
        case([(f"DCGM_FI_DEV_GPU_TEMP{GPU_SEL}", "78x5")], "GpuTemperatureHigh", "3m", []),
    ),
    # only the exporter's own scrape job names a node: a look-alike series from another job does not
    "GpuTemperatureHigh-only-the-exporters-job": (
        case([(f"DCGM_FI_DEV_GPU_TEMP{GPU_SEL}", "90x5")], "GpuTemperatureHigh", "3m", [HOT]),
        case([(f"DCGM_FI_DEV_GPU_TEMP{LOOKALIKE_GPU_SEL}", "90x5")], "GpuTemperatureHigh", "3m", []),
    ),
    "InfinibandLinkErrorsIncreasing-only-the-exporters-job": (
        case(
            [(f'gpucluster_fabric_infiniband_port_errors_total{{{IB_SEL},type="link_downed"}}', "0 0 1 1 1")],
            "InfinibandLinkErrorsIncreasing",
            "4m",
            [{**IB_OUT, "type": "link_downed", "severity": "warning", **SIGNAL}],
        ),
        case(
            [
                (
                    'gpucluster_fabric_infiniband_port_errors_total{device="mlx5_0",port="1",node="gpu-node-1",'
                    'job="kubernetes-pods",type="link_downed"}',
                    "0 0 1 1 1",
                )
            ],
            "InfinibandLinkErrorsIncreasing",
            "4m",
            [],
        ),
    ),
    "GpuTemperatureHigh-brief-spike": (
        case([(f"DCGM_FI_DEV_GPU_TEMP{GPU_SEL}", "90 90 90 90")], "GpuTemperatureHigh", "2m", [HOT]),
        case([(f"DCGM_FI_DEV_GPU_TEMP{GPU_SEL}", "90 70 70 70")], "GpuTemperatureHigh", "3m", []),
    ),
    "GpuBusyTensorCoresIdle": (
        case(
            [(f"DCGM_FI_DEV_GPU_UTIL{GPU_SEL}", "95x20"), (f"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{GPU_SEL}", "0.01x20")],
            "GpuBusyTensorCoresIdle",
            "16m",
            [{**GPU_OUT, "severity": "info"}],
        ),
        case(
            [(f"DCGM_FI_DEV_GPU_UTIL{GPU_SEL}", "95x20"), (f"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{GPU_SEL}", "0.5x20")],
            "GpuBusyTensorCoresIdle",
            "16m",
            [],
        ),
    ),
    "GpuBusyTensorCoresIdle-util-at-threshold": (
        case(
            [(f"DCGM_FI_DEV_GPU_UTIL{GPU_SEL}", "81x20"), (f"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{GPU_SEL}", "0.04x20")],
            "GpuBusyTensorCoresIdle",
            "16m",
            [{**GPU_OUT, "severity": "info"}],
        ),
        case(
            [(f"DCGM_FI_DEV_GPU_UTIL{GPU_SEL}", "80x20"), (f"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{GPU_SEL}", "0.04x20")],
            "GpuBusyTensorCoresIdle",
            "16m",
            [],
        ),
    ),
    "GpuBusyTensorCoresIdle-tensor-at-threshold": (
        case(
            [(f"DCGM_FI_DEV_GPU_UTIL{GPU_SEL}", "95x20"), (f"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{GPU_SEL}", "0.049x20")],
            "GpuBusyTensorCoresIdle",
            "16m",
            [{**GPU_OUT, "severity": "info"}],
        ),
        case(
            [(f"DCGM_FI_DEV_GPU_UTIL{GPU_SEL}", "95x20"), (f"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{GPU_SEL}", "0.05x20")],
            "GpuBusyTensorCoresIdle",
            "16m",
            [],
        ),
    ),
    "GpuXidError": (
        case(
            [(f"DCGM_FI_DEV_XID_ERRORS{GPU_SEL}", "0 0 0 79 79")],
            "GpuXidError",
            "4m",
            [{**GPU, "node": "gpu-node-1", "severity": "warning", **SIGNAL}],
        ),
        case([(f"DCGM_FI_DEV_XID_ERRORS{GPU_SEL}", "79x20")], "GpuXidError", "15m", []),
    ),
    # the program's XIDs (contract/xids.py) never quarantine; an unknown code does
    "GpuXidError-program-xids-do-not-quarantine": (
        case(
            [(f"DCGM_FI_DEV_XID_ERRORS{GPU_SEL}", "0 0 0 13 13 31 31 200 200")],
            "GpuXidError",
            "8m",
            [{**GPU, "node": "gpu-node-1", "severity": "warning", **SIGNAL}],
        ),
        case([(f"DCGM_FI_DEV_XID_ERRORS{GPU_SEL}", "0 0 0 13 13 31 31 43 45")], "GpuXidError", "8m", []),
    ),
    "GpuProgramXid": (
        case(
            [(f"DCGM_FI_DEV_XID_ERRORS{GPU_SEL}", "0 0 0 13 13")],
            "GpuProgramXid",
            "4m",
            [{**GPU, "node": "gpu-node-1", "severity": "info"}],
        ),
        case([(f"DCGM_FI_DEV_XID_ERRORS{GPU_SEL}", "0 0 0 48 48")], "GpuProgramXid", "4m", []),
    ),
    "NvlinkErrorsIncreasing": (
        # 60 replays a minute: 300 in the window, above 100
        case([(NVLINK.format(type="replay"), "0+60x10")], "NvlinkErrorsIncreasing", "8m", [nvlink_out("replay")]),
        # a steady trickle of 10 a minute (50 in the window) is the background a fleet counts; and no errors at all
        case(
            [(NVLINK.format(type="replay"), "0+10x10"), (NVLINK.format(type="crc_flit"), "7x10")],
            "NvlinkErrorsIncreasing",
            "8m",
            [],
        ),
    ),
    "NvlinkErrorsIncreasing-recovery-at-the-first": (
        case([(NVLINK.format(type="recovery"), "0 0 0 1 1")], "NvlinkErrorsIncreasing", "4m", [nvlink_out("recovery")]),
        case([(NVLINK.format(type="recovery"), "1x10")], "NvlinkErrorsIncreasing", "8m", []),
    ),
    "InfinibandLinkErrorsIncreasing": (
        case(
            [(f'gpucluster_fabric_infiniband_port_errors_total{{{IB_SEL},type="link_downed"}}', "0 0 1 1 1")],
            "InfinibandLinkErrorsIncreasing",
            "4m",
            [{**IB_OUT, "type": "link_downed", "severity": "warning", **SIGNAL}],
        ),
        case(
            [
                (f'gpucluster_fabric_infiniband_port_errors_total{{{IB_SEL},type="link_downed"}}', "3x10"),
                # other error types are not link errors
                (f'gpucluster_fabric_infiniband_port_errors_total{{{IB_SEL},type="port_xmit_discards"}}', "0+5x10"),
            ],
            "InfinibandLinkErrorsIncreasing",
            "8m",
            [],
        ),
    ),
    # Symbol errors by bit-error ratio: a 200 Gb/s port (25e9 B/s) signals 6e13 bits in 5 minutes, so 1e-12 is
    # 60 errors in the window. 30 a minute (150 in 5 minutes, 2.5e-12) fires; 10 a minute (50, 0.8e-12) is the
    # background trickle a fleet shows and stays quiet.
    "InfinibandLinkErrorsIncreasing-symbol-error-ratio": (
        case(
            [
                (f'gpucluster_fabric_infiniband_port_errors_total{{{IB_SEL},type="symbol_error"}}', "0+30x10"),
                (f"gpucluster_fabric_infiniband_port_rate_bytes_per_second{{{IB_SEL}}}", "25000000000x10"),
            ],
            "InfinibandLinkErrorsIncreasing",
            "8m",
            [{**IB_OUT, "type": "symbol_error", "severity": "warning", **SIGNAL}],
        ),
        case(
            [
                (f'gpucluster_fabric_infiniband_port_errors_total{{{IB_SEL},type="symbol_error"}}', "0+10x10"),
                (f"gpucluster_fabric_infiniband_port_rate_bytes_per_second{{{IB_SEL}}}", "25000000000x10"),
            ],
            "InfinibandLinkErrorsIncreasing",
            "8m",
            [],
        ),
    ),
    "InfinibandTransportErrorsIncreasing": (
        case(
            [
                (
                    f'gpucluster_fabric_infiniband_hw_counters_total{{{IB_SEL},counter="local_ack_timeout_err"}}',
                    "0+4x10",
                ),
            ],
            "InfinibandTransportErrorsIncreasing",
            "8m",
            [{**IB_OUT, "counter": "local_ack_timeout_err", "severity": "warning"}],
        ),
        case(
            [
                # a slow trickle stays quiet, and counters that are not transport errors never count
                (
                    f'gpucluster_fabric_infiniband_hw_counters_total{{{IB_SEL},counter="local_ack_timeout_err"}}',
                    "0+1x10",
                ),
                (f'gpucluster_fabric_infiniband_hw_counters_total{{{IB_SEL},counter="np_cnp_sent"}}', "0+1000x10"),
            ],
            "InfinibandTransportErrorsIncreasing",
            "8m",
            [],
        ),
    ),
    "FilesystemClientTimeouts": (
        case(
            [
                (f'gpucluster_fabric_filesystem_rpc_timeouts_total{{{FS_SEL},op="WRITE"}}', "0+0x5 1+1x5"),
                (f'gpucluster_fabric_filesystem_rpc_timeouts_total{{{FS_SEL},op="READ"}}', "0x10"),
            ],
            "FilesystemClientTimeouts",
            "9m",
            [{**FS_OUT, "severity": "warning"}],
        ),
        case(
            [
                # calls and round trips rise with every write; only timeouts and errors count
                (f'gpucluster_fabric_filesystem_rpc_calls_total{{{FS_SEL},op="WRITE"}}', "0+500x10"),
                (f'gpucluster_fabric_filesystem_rpc_errors_total{{{FS_SEL},op="WRITE"}}', "3x10"),
                (f'gpucluster_fabric_filesystem_rpc_timeouts_total{{{FS_SEL},op="WRITE"}}', "7x10"),
            ],
            "FilesystemClientTimeouts",
            "9m",
            [],
        ),
    ),
    "GpuNodeDcgmSeriesMissing": (
        case(
            [*gpu_node("gpu-node-1"), *gpu_node("gpu-node-2"), (f"DCGM_FI_DEV_GPU_TEMP{GPU_SEL}", "40x20")],
            "GpuNodeDcgmSeriesMissing",
            "12m",
            [{"node": "gpu-node-2", "severity": "warning"}],
        ),
        case(
            [
                *gpu_node("gpu-node-1"),
                *gpu_node("burst", taint="virtual-kubelet.io/provider"),  # the virtual node runs no exporter
                *gpu_node("gpu-node-3", ready=0),  # a NotReady node is someone else's alert
                ('kube_node_status_capacity{node="cpu-node",resource="nvidia_com_gpu"}', "0x20"),
                (f"DCGM_FI_DEV_GPU_TEMP{GPU_SEL}", "40x20"),
            ],
            "GpuNodeDcgmSeriesMissing",
            "12m",
            [],
        ),
    ),
    "GpuNodeDcgmSeriesMissing-brief": (
        case(
            [*gpu_node("gpu-node-1"), (f"DCGM_FI_DEV_GPU_TEMP{GPU_SEL}", "_x12 40x10")],
            "GpuNodeDcgmSeriesMissing",
            "11m",
            [{"node": "gpu-node-1", "severity": "warning"}],
        ),
        # gone for less than telemetryMissingMinutes (an exporter rollout: 12 minutes without a sample, of which
        # the last 5 are the lookback's): quiet
        case(
            [*gpu_node("gpu-node-1"), (f"DCGM_FI_DEV_GPU_TEMP{GPU_SEL}", "40x5 _x12 40x10")],
            "GpuNodeDcgmSeriesMissing",
            "20m",
            [],
        ),
    ),
    "GpuNodeFabricSeriesMissing": (
        case(
            [
                *gpu_node("gpu-node-1"),
                ('gpucluster_fabric_collector_success{node="gpu-node-2",collector="nvlink"}', "1x20"),
            ],
            "GpuNodeFabricSeriesMissing",
            "12m",
            [{"node": "gpu-node-1", "severity": "warning"}],
        ),
        case(
            [
                *gpu_node("gpu-node-1"),
                ('gpucluster_fabric_collector_success{node="gpu-node-1",collector="nvlink"}', "0x20"),
            ],
            "GpuNodeFabricSeriesMissing",
            "12m",
            [],
        ),
    ),
    "InfinibandPortCongested": (
        # 1.2e8 ticks a minute = 2e6/s, above the 1e6/s default
        case(
            [(f"gpucluster_fabric_infiniband_port_transmit_wait_total{{{IB_SEL}}}", "0+120000000x30")],
            "InfinibandPortCongested",
            "20m",
            [{**IB_OUT, "severity": "warning"}],
        ),
        # 3e7 a minute = 5e5/s
        case(
            [(f"gpucluster_fabric_infiniband_port_transmit_wait_total{{{IB_SEL}}}", "0+30000000x30")],
            "InfinibandPortCongested",
            "20m",
            [],
        ),
    ),
    "InfinibandCounterSaturated": (
        case(
            [(f'gpucluster_fabric_infiniband_counter_saturated{{{IB_SEL},counter="symbol_error"}}', "1x40")],
            "InfinibandCounterSaturated",
            "35m",
            [{**IB_OUT, "counter": "symbol_error", "severity": "info"}],
        ),
        case(
            [(f'gpucluster_fabric_infiniband_counter_saturated{{{IB_SEL},counter="symbol_error"}}', "0x40")],
            "InfinibandCounterSaturated",
            "35m",
            [],
        ),
    ),
    "FabricDevicesMissing": (
        case(
            [
                ('gpucluster_fabric_devices_expected{node="gpu-node-1",collector="infiniband"}', "8x20"),
                ('gpucluster_fabric_devices{node="gpu-node-1",collector="infiniband"}', "0x20"),
            ],
            "FabricDevicesMissing",
            "12m",
            [{"node": "gpu-node-1", "collector": "infiniband", "severity": "critical"}],
        ),
        case(
            [
                ('gpucluster_fabric_devices_expected{node="gpu-node-1",collector="infiniband"}', "8x20"),
                ('gpucluster_fabric_devices{node="gpu-node-1",collector="infiniband"}', "8x20"),
            ],
            "FabricDevicesMissing",
            "12m",
            [],
        ),
    ),
    "FabricDevicesMissing-one-hca-short": (
        case(
            [
                ('gpucluster_fabric_devices_expected{node="gpu-node-1",collector="infiniband"}', "8x20"),
                ('gpucluster_fabric_devices{node="gpu-node-1",collector="infiniband"}', "7x20"),
            ],
            "FabricDevicesMissing",
            "12m",
            [{"node": "gpu-node-1", "collector": "infiniband", "severity": "critical"}],
        ),
        # no expectation set (0): a node without HCAs is fine
        case(
            [
                ('gpucluster_fabric_devices_expected{node="gpu-node-1",collector="infiniband"}', "0x20"),
                ('gpucluster_fabric_devices{node="gpu-node-1",collector="infiniband"}', "0x20"),
            ],
            "FabricDevicesMissing",
            "12m",
            [],
        ),
    ),
    "FabricDevicesMissing-brief": (
        case(
            [
                ('gpucluster_fabric_devices_expected{node="gpu-node-1",collector="nvlink"}', "8x20"),
                ('gpucluster_fabric_devices{node="gpu-node-1",collector="nvlink"}', "0x20"),
            ],
            "FabricDevicesMissing",
            "11m",
            [{"node": "gpu-node-1", "collector": "nvlink", "severity": "critical"}],
        ),
        # short for less than collectorFailingMinutes (a driver reload): quiet
        case(
            [
                ('gpucluster_fabric_devices_expected{node="gpu-node-1",collector="nvlink"}', "8x20"),
                ('gpucluster_fabric_devices{node="gpu-node-1",collector="nvlink"}', "0 0 0 0 0 8 8 8 8 8 8 8 8 8 8 8"),
            ],
            "FabricDevicesMissing",
            "11m",
            [],
        ),
    ),
    "GpuNodeQuarantined": (
        # two replicas export the ledger; one alert per quarantined node, for the hardware route
        case(
            [
                ('gpucluster_quarantine_node_info{node="n1",flavor="h100",reason="xid",pod="q-0"}', "1x5"),
                ('gpucluster_quarantine_node_info{node="n1",flavor="h100",reason="xid",pod="q-1"}', "1x5"),
            ],
            "GpuNodeQuarantined",
            "2m",
            [{"node": "n1", "flavor": "h100", "reason": "xid", "severity": "warning", **REPLACE}],
        ),
        # released: the controller drops the series (past the 5m lookback here: promtool writes no stale marker)
        case(
            [('gpucluster_quarantine_node_info{node="n1",flavor="h100",reason="xid",pod="q-0"}', "1 1 _x8")],
            "GpuNodeQuarantined",
            "8m",
            [],
        ),
    ),
    "QuarantineBreakerOpen": (
        # two replicas export the gauge; one series per flavor fires
        case(
            [
                ('gpucluster_quarantine_breaker_open{flavor="h100",pod="q-0"}', "0 1 1"),
                ('gpucluster_quarantine_breaker_open{flavor="h100",pod="q-1"}', "0 1 1"),
                ('gpucluster_quarantine_breaker_open{flavor="l40s",pod="q-0"}', "0 0 0"),
            ],
            "QuarantineBreakerOpen",
            "2m",
            [{"flavor": "h100", "severity": "critical"}],
        ),
        case(
            [
                ('gpucluster_quarantine_breaker_open{flavor="h100",pod="q-0"}', "1 0 0"),
                ('gpucluster_quarantine_breaker_open{flavor="l40s",pod="q-0"}', "0 0 0"),
            ],
            "QuarantineBreakerOpen",
            "2m",
            [],
        ),
    ),
    "FabricExporterCollectorFailing": (
        case(
            [('gpucluster_fabric_collector_success{node="gpu-node-1",collector="nvlink"}', "0x20")],
            "FabricExporterCollectorFailing",
            "12m",
            [{"node": "gpu-node-1", "collector": "nvlink", "severity": "warning"}],
        ),
        case(
            [('gpucluster_fabric_collector_success{node="gpu-node-1",collector="nvlink"}', "1x20")],
            "FabricExporterCollectorFailing",
            "12m",
            [],
        ),
    ),
    "TrainingEttrLow": (
        case([(f"gpucluster_training_ettr{{{JOB_SEL}}}", "0.79x40")], "TrainingEttrLow", "31m", [TRAIN_WARN]),
        case([(f"gpucluster_training_ettr{{{JOB_SEL}}}", "0.8x40")], "TrainingEttrLow", "31m", []),
    ),
    "TrainingEttrLow-brief": (
        # two replicas export it: one alert
        case(
            [
                (f'gpucluster_training_ettr{{{JOB_SEL},pod="i-0"}}', "0.5x40"),
                (f'gpucluster_training_ettr{{{JOB_SEL},pod="i-1"}}', "0.5x40"),
            ],
            "TrainingEttrLow",
            "31m",
            [TRAIN_WARN],
        ),
        # a dip shorter than 30 minutes: quiet
        case([(f"gpucluster_training_ettr{{{JOB_SEL}}}", "0.5x20 0.9x20")], "TrainingEttrLow", "31m", []),
    ),
    "TrainingRestartBoundReached": (
        case(
            [
                (f"gpucluster_training_restarts_last_hour{{{JOB_SEL}}}", "7x5"),
                (f"gpucluster_training_max_restarts_per_hour{{{JOB_SEL}}}", "6x5"),
                (f"gpucluster_training_stopped_at_bound{{{JOB_SEL}}}", "0x5"),
            ],
            "TrainingRestartBoundReached",
            "2m",
            [{**JOB_OUT, "severity": "critical"}],
        ),
        case(
            [
                (f"gpucluster_training_restarts_last_hour{{{JOB_SEL}}}", "6x5"),
                (f"gpucluster_training_max_restarts_per_hour{{{JOB_SEL}}}", "6x5"),
                (f"gpucluster_training_stopped_at_bound{{{JOB_SEL}}}", "0x5"),
            ],
            "TrainingRestartBoundReached",
            "2m",
            [],
        ),
    ),
    "TrainingRestartBoundReached-stopped": (
        # the hour has passed, the job is still stopped until someone resumes it
        case(
            [
                (f"gpucluster_training_restarts_last_hour{{{JOB_SEL}}}", "0x5"),
                (f"gpucluster_training_max_restarts_per_hour{{{JOB_SEL}}}", "6x5"),
                (f"gpucluster_training_stopped_at_bound{{{JOB_SEL}}}", "1x5"),
            ],
            "TrainingRestartBoundReached",
            "2m",
            [{**JOB_OUT, "severity": "critical"}],
        ),
        case(
            [
                (f"gpucluster_training_restarts_last_hour{{{JOB_SEL}}}", "0x5"),
                (f"gpucluster_training_max_restarts_per_hour{{{JOB_SEL}}}", "6x5"),
                (f"gpucluster_training_stopped_at_bound{{{JOB_SEL}}}", "0x5"),
            ],
            "TrainingRestartBoundReached",
            "2m",
            [],
        ),
    ),
    "TrainingCheckpointStale": (
        case(
            [
                (f"gpucluster_training_checkpoint_age_seconds{{{JOB_SEL}}}", "3601x10"),
                (f"gpucluster_training_checkpoint_interval_seconds{{{JOB_SEL}}}", "1800x10"),
            ],
            "TrainingCheckpointStale",
            "6m",
            [TRAIN_WARN],
        ),
        case(
            [
                (f"gpucluster_training_checkpoint_age_seconds{{{JOB_SEL}}}", "3600x10"),
                (f"gpucluster_training_checkpoint_interval_seconds{{{JOB_SEL}}}", "1800x10"),
            ],
            "TrainingCheckpointStale",
            "6m",
            [],
        ),
    ),
    "TrainingCheckpointStale-not-running": (
        case(
            [
                (f"gpucluster_training_checkpoint_age_seconds{{{JOB_SEL}}}", "9000x10"),
                (f"gpucluster_training_checkpoint_interval_seconds{{{JOB_SEL}}}", "1800x10"),
            ],
            "TrainingCheckpointStale",
            "6m",
            [TRAIN_WARN],
        ),
        # not every pod runs: the daemon exports no age, and nothing fires
        case(
            [(f"gpucluster_training_checkpoint_interval_seconds{{{JOB_SEL}}}", "1800x10")],
            "TrainingCheckpointStale",
            "6m",
            [],
        ),
    ),
    "TrainingGangStalled": (
        case(
            [(f"gpucluster_stall_detector_restarts_total{{{JOB_SEL}}}", "0 0 1 1 1")],
            "TrainingGangStalled",
            "3m",
            [{"namespace": "team-a", "job": "llm", "severity": "warning"}],
        ),
        case(
            [(f"gpucluster_stall_detector_restarts_total{{{JOB_SEL}}}", "1x5")],
            "TrainingGangStalled",
            "3m",
            [],
        ),
    ),
    "TrainingNodeRepeatOffender": (
        case(
            [('gpucluster_stall_detector_repeat_offender{node="gpu-7",reasons="straggler"}', "1x3")],
            "TrainingNodeRepeatOffender",
            "2m",
            [{"node": "gpu-7", "reasons": "straggler", "severity": "warning", **SIGNAL}],
        ),
        # a node named but not yet a repeat offender exports a suspect series only
        case(
            [('gpucluster_stall_detector_suspect{node="gpu-7",reasons="straggler"}', "1x3")],
            "TrainingNodeRepeatOffender",
            "2m",
            [],
        ),
    ),
    "StallDetectorBlind": (
        case(
            [('gpucluster_stall_detector_gangs{verdict="unknown"}', "2x20")],
            "StallDetectorBlind",
            "16m",
            [{"severity": "warning"}],
        ),
        case(
            [('gpucluster_stall_detector_gangs{verdict="unknown"}', "0x20")],
            "StallDetectorBlind",
            "16m",
            [],
        ),
    ),
    "CheckpointVerificationFailed": (
        case(
            [
                (f"gpucluster_checkpoint_verifier_last_check_ok{{{VERIFIER_SEL}}}", "1 1 0 0"),
                (f"gpucluster_checkpoint_verifier_last_check_step{{{VERIFIER_SEL}}}", "300 300 400 400"),
            ],
            "CheckpointVerificationFailed",
            "3m",
            [{"namespace": "team-a", "job": "llm", "severity": "warning"}],
        ),
        case(
            [
                (f"gpucluster_checkpoint_verifier_last_check_ok{{{VERIFIER_SEL}}}", "0 0 1 1"),
                (f"gpucluster_checkpoint_verifier_last_check_step{{{VERIFIER_SEL}}}", "400 400 500 500"),
            ],
            "CheckpointVerificationFailed",
            "3m",
            [],
        ),
    ),
    "CheckpointRestoreDrillFailed": (
        case(
            [
                (f"gpucluster_checkpoint_verifier_restore_drill_last_ok{{{VERIFIER_SEL}}}", "1 1 0 0"),
                (f"gpucluster_checkpoint_verifier_restore_drill_step{{{VERIFIER_SEL}}}", "300 300 400 400"),
            ],
            "CheckpointRestoreDrillFailed",
            "3m",
            [{"namespace": "team-a", "job": "llm", "severity": "warning"}],
        ),
        case(
            [
                (f"gpucluster_checkpoint_verifier_restore_drill_last_ok{{{VERIFIER_SEL}}}", "0 0 1 1"),
                (f"gpucluster_checkpoint_verifier_restore_drill_step{{{VERIFIER_SEL}}}", "400 400 500 500"),
            ],
            "CheckpointRestoreDrillFailed",
            "3m",
            [],
        ),
    ),
    # the last good drill recorded an hour in (3600 s), none since: staleAfter (48h) after it, it fires
    "CheckpointRestoreDrillStale": (
        case(
            [(DRILL_GOOD, "3600x3000")],
            "CheckpointRestoreDrillStale",
            "49h5m",
            [{"namespace": "team-a", "job": "llm", "severity": "warning"}],
        ),
        case(
            [(DRILL_GOOD, "3600x3000")],
            "CheckpointRestoreDrillStale",
            "48h55m",
            [],
        ),
    ),
    "TrainingRecoverySlow": (
        case(
            [(f"gpucluster_training_recovery_seconds{{{JOB_SEL}}}", "601x3")],
            "TrainingRecoverySlow",
            "1m",
            [TRAIN_WARN],
        ),
        case([(f"gpucluster_training_recovery_seconds{{{JOB_SEL}}}", "600x3")], "TrainingRecoverySlow", "1m", []),
    ),
    # --- the serving loop ---
    "BurstTaintFlapping": (
        case([("gpucluster_taint_controller_flaps_total", "0 0 1 1 1")], "BurstTaintFlapping", "3m", [WARN]),
        case([("gpucluster_taint_controller_flaps_total", "3 3 3 3 3")], "BurstTaintFlapping", "3m", []),
    ),
    "MakeBeforeBreakFellBack": (
        case(
            [('gpucluster_make_before_break_fallbacks_total{reason="maxHold"}', "0 0 1 1")],
            "MakeBeforeBreakFellBack",
            "3m",
            [{"reason": "maxHold", "severity": "warning"}],
        ),
        case(
            [('gpucluster_make_before_break_fallbacks_total{reason="maxHold"}', "2x20")],
            "MakeBeforeBreakFellBack",
            "3m",
            [],
        ),
    ),
    # maxHold 5m (the default) plus two minutes of grace: 420 s
    "MakeBeforeBreakHoldingTooLong": (
        case(
            [(f'{HOLD}{{workload="team-a/llm"}}', "0+60x20"), (f'{HOLD}{{workload="team-b/vit"}}', "0x20")],
            "MakeBeforeBreakHoldingTooLong",
            "8m",
            [{"workload": "team-a/llm", "severity": "critical"}],
        ),
        case([(f'{HOLD}{{workload="team-a/llm"}}', "0+60x7")], "MakeBeforeBreakHoldingTooLong", "7m", []),
    ),
    "MakeBeforeBreakNotActing": (
        # cycles every 10 s, then none from minute 5: five minutes without one, then five more
        case([(CYCLES, "0+6x5 30x20")], "MakeBeforeBreakNotActing", "16m", [{"severity": "critical"}]),
        case([(CYCLES, "0+6x20")], "MakeBeforeBreakNotActing", "16m", []),
    ),
    "MakeBeforeBreakNotActing-absent": (
        # no replica has ever exported a cycle
        case([("up", "1x20")], "MakeBeforeBreakNotActing", "6m", [{"severity": "critical"}]),
        case([(CYCLES, "0+6x20")], "MakeBeforeBreakNotActing", "6m", []),
    ),
    "InferencePending": (
        case(
            [
                (f'kube_pod_status_phase{{{INFERENCE_POD},phase="Pending"}}', "1x20"),
                (f'kube_pod_info{{{INFERENCE_POD},priority_class="gpucluster-inference",node=""}}', "1x20"),
                # a training pod Pending as long is not production's
                ('kube_pod_status_phase{namespace="team-a",pod="llm-0",phase="Pending"}', "1x20"),
                ('kube_pod_info{namespace="team-a",pod="llm-0",priority_class="gpucluster-training"}', "1x20"),
            ],
            "InferencePending",
            "11m",
            [{"namespace": "inference", "severity": "critical"}],
        ),
        case(
            [
                # Pending, then placed (rented) within the 10 minutes
                (f'kube_pod_status_phase{{{INFERENCE_POD},phase="Pending"}}', "1x5 0x14"),
                (f'kube_pod_status_phase{{{INFERENCE_POD},phase="Running"}}', "0x5 1x14"),
                (f'kube_pod_info{{{INFERENCE_POD},priority_class="gpucluster-inference",node=""}}', "1x20"),
                ('kube_pod_status_phase{namespace="team-a",pod="llm-0",phase="Pending"}', "1x20"),
                ('kube_pod_info{namespace="team-a",pod="llm-0",priority_class="gpucluster-training"}', "1x20"),
            ],
            "InferencePending",
            "11m",
            [],
        ),
    ),
    "BurstProviderFailing": (
        case(
            [('gpucluster_burst_provider_failure_rate{provider="runpod"}', "0.6x20")],
            "BurstProviderFailing",
            "11m",
            [{"provider": "runpod", "severity": "warning"}],
        ),
        case(
            [('gpucluster_burst_provider_failure_rate{provider="runpod"}', "0.5x20")],
            "BurstProviderFailing",
            "11m",
            [],
        ),
    ),
    "BurstSpendCeilingReached": (
        case([("gpucluster_burst_spend_refusals_total", "0 0 4 4")], "BurstSpendCeilingReached", "3m", [WARN]),
        case([("gpucluster_burst_spend_refusals_total", "4x20")], "BurstSpendCeilingReached", "3m", []),
    ),
}


def without_annotations(groups: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(groups)
    for g in out["groups"]:
        for r in g["rules"]:
            r.pop("annotations", None)
    return out


def promtool_test(
    tmp_path: Path, groups: dict[str, Any], tests: list[dict[str, Any]]
) -> subprocess.CompletedProcess[str]:
    promtool = debian_tool("promtool")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(without_annotations(groups), sort_keys=False))
    (tmp_path / "test.yaml").write_text(
        yaml.safe_dump({"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests}, sort_keys=False)
    )
    return subprocess.run(
        [promtool, "test", "rules", "test.yaml"], cwd=tmp_path, capture_output=True, text=True, check=False, timeout=120
    )


def test_every_rule_has_cases() -> None:
    names = {r["alert"] for g in rule_groups(TelemetrySettings())["groups"] for r in g["rules"]}
    covered = {k.split("-")[0] for k in CASES}
    assert names == covered


def test_rule_file_passes_promtool_check(tmp_path: Path) -> None:
    promtool = debian_tool("promtool")
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rule_groups(TelemetrySettings()), sort_keys=False))
    proc = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(alert_names(TelemetrySettings()))} rules found" in proc.stdout


def test_all_cases_pass_under_promtool(tmp_path: Path) -> None:
    tests = [c for pair in CASES.values() for c in pair]
    proc = promtool_test(tmp_path, rule_groups(TelemetrySettings()), tests)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def next_exporter(test: dict[str, Any]) -> dict[str, Any]:
    """``test`` with its DCGM series as the next dcgm-exporter writes them: the node as ``hostname`` (an alert that
    keeps the series' labels keeps that one too)."""
    out = copy.deepcopy(test)
    for s in out["input_series"]:
        s["series"] = s["series"].replace("Hostname=", "hostname=")
    for check in out.get("alert_rule_test", []):
        for alert in check.get("exp_alerts", []):
            labels = alert.get("exp_labels", {})
            if "Hostname" in labels:
                labels["hostname"] = labels.pop("Hostname")
    return out


def test_every_dcgm_case_gives_the_same_verdict_when_the_exporter_writes_hostname(tmp_path: Path) -> None:
    """dcgm-exporter's next release names the node ``hostname`` (contract/dcgm.py): each DCGM alert fires with the
    same node and stays quiet as before. Under a rule reading only ``Hostname`` the firing ones lose their node."""
    renamed = [
        next_exporter(c) for pair in CASES.values() for c in pair if any("Hostname=" in s for s, _ in _series(c))
    ]
    assert len(renamed) >= 10, len(renamed)
    assert not any("Hostname=" in s for c in renamed for s, _ in _series(c))
    proc = promtool_test(tmp_path, rule_groups(TelemetrySettings()), renamed)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The same inputs under the rules as they read before: the firing cases no longer name the node.
    one_spelling = copy.deepcopy(rule_groups(TelemetrySettings()))
    for g in one_spelling["groups"]:
        for r in g["rules"]:
            r["expr"] = re.sub(r', "node", "\$1", "hostname", "\(\.\+\)"\)', ")", r["expr"])
            r["expr"] = r["expr"].replace("label_replace(label_replace(", "label_replace(")
    assert one_spelling != rule_groups(TelemetrySettings())
    assert promtool_test(tmp_path, one_spelling, renamed).returncode != 0


def _series(test: dict[str, Any]) -> list[tuple[str, str]]:
    return [(s["series"], s["values"]) for s in test["input_series"]]


@pytest.mark.parametrize("name", sorted(CASES))
def test_quiet_case_would_fail_if_expected_to_fire(tmp_path: Path, name: str) -> None:
    """Guards against cases that pass vacuously: the quiet input must not satisfy the firing expectation."""
    fires, quiet = CASES[name]
    flipped = copy.deepcopy(quiet)
    flipped["alert_rule_test"][0]["exp_alerts"] = fires["alert_rule_test"][0]["exp_alerts"]
    proc = promtool_test(tmp_path, rule_groups(TelemetrySettings()), [flipped])
    assert proc.returncode != 0, f"{name}: the quiet series also fire"


def test_the_signal_query_sees_a_live_alert_and_not_the_ghost_of_one_before_a_restart(tmp_path: Path) -> None:
    """Prometheus stopped while an alert fired writes no stale marker: its last ALERTS sample stays visible for the
    5m lookback. The controller's query takes only samples fresher than SIGNAL_MAX_AGE_SECONDS."""
    labels = '{alertname="GpuTemperatureHigh",alertstate="firing",gpucluster_signal="gpu-quarantine",node="n1"}'
    series = [{"series": f"ALERTS{labels}", "values": "1 1 1"}]  # samples at 0m, 1m, 2m, then none
    live = {"expr": DEFAULT_SIGNAL_QUERY, "eval_time": "2m", "exp_samples": [{"labels": f"ALERTS{labels}", "value": 1}]}
    ghost = {"expr": DEFAULT_SIGNAL_QUERY, "eval_time": "6m", "exp_samples": []}
    raw = {"expr": f"ALERTS{labels}", "eval_time": "6m", "exp_samples": [{"labels": f"ALERTS{labels}", "value": 1}]}
    test = {"interval": "1m", "input_series": series, "promql_expr_test": [live, ghost, raw]}
    proc = promtool_test(tmp_path, {"groups": []}, [test])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # and the ghost case is not vacuous: expecting the ghost to be seen fails
    seen = {**ghost, "exp_samples": live["exp_samples"]}
    proc = promtool_test(tmp_path, {"groups": []}, [{**test, "promql_expr_test": [seen]}])
    assert proc.returncode != 0


def test_training_thresholds_come_from_settings(tmp_path: Path) -> None:
    settings = TelemetrySettings.model_validate(
        {"alerts": {"ettrLowRatio": 0.9, "ettrLowForMinutes": 10, "recoverySlowSeconds": 120}}
    )
    ettr = f"gpucluster_training_ettr{{{JOB_SEL}}}"
    recovery = f"gpucluster_training_recovery_seconds{{{JOB_SEL}}}"
    tests = [
        case([(ettr, "0.85x20")], "TrainingEttrLow", "11m", [TRAIN_WARN]),
        case([(ettr, "0.85x20")], "TrainingEttrLow", "9m", []),
        case([(recovery, "121x3")], "TrainingRecoverySlow", "1m", [TRAIN_WARN]),
        case([(recovery, "119x3")], "TrainingRecoverySlow", "1m", []),
    ]
    proc = promtool_test(tmp_path, rule_groups(settings), tests)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_scrape_jobs_come_from_settings_and_an_unknown_one_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TelemetrySettingsError, match=r"dcgmExporter\.scrapeJob: is required") as err:
        parse_telemetry_settings({"prometheusOperator": False})
    assert "fabricExporter.scrapeJob" in str(err.value)
    settings = parse_telemetry_settings(
        {"prometheusOperator": False, "dcgmExporter": {"scrapeJob": "gpus"}, "fabricExporter": {"scrapeJob": "ib"}}
    )
    ours = case(
        [('DCGM_FI_DEV_GPU_TEMP{Hostname="gpu-node-1",gpu="0",UUID="GPU-a",job="gpus"}', "90x5")],
        "GpuTemperatureHigh",
        "3m",
        [HOT],
    )
    default_job = case([(f"DCGM_FI_DEV_GPU_TEMP{GPU_SEL}", "90x5")], "GpuTemperatureHigh", "3m", [])
    proc = promtool_test(tmp_path, rule_groups(settings), [ours, default_job])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with pytest.raises(TelemetrySettingsError, match=r"dcgmExporter\.scrapeJob"):
        parse_telemetry_settings({"dcgmExporter": {"scrapeJob": 'x"} or vector(1) #'}})


def test_temperature_limit_comes_from_settings(tmp_path: Path) -> None:
    settings = TelemetrySettings.model_validate({"alerts": {"gpuTempLimitC": 70, "forMinutes": 3}})
    fires = case([(f"DCGM_FI_DEV_GPU_TEMP{GPU_SEL}", "75x6")], "GpuTemperatureHigh", "4m", [HOT])
    early = case([(f"DCGM_FI_DEV_GPU_TEMP{GPU_SEL}", "75x6")], "GpuTemperatureHigh", "2m", [])
    quiet = case([(f"DCGM_FI_DEV_GPU_TEMP{GPU_SEL}", "70x6")], "GpuTemperatureHigh", "4m", [])
    proc = promtool_test(tmp_path, rule_groups(settings), [fires, early, quiet])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_quarantine_alerts_carry_the_signal_and_the_others_do_not() -> None:
    rules = {r["alert"]: r for g in rule_groups(TelemetrySettings())["groups"] for r in g["rules"]}
    signalled = {
        name for name, r in rules.items() if r["labels"].get(QUARANTINE_SIGNAL_LABEL) == QUARANTINE_SIGNAL_VALUE
    }
    assert signalled == set(QUARANTINE_ALERTS)
    # the controller's names for the signal and its reason words agree with the rules
    assert (SIGNAL_LABEL, SIGNAL_VALUE) == (QUARANTINE_SIGNAL_LABEL, QUARANTINE_SIGNAL_VALUE)
    assert f'{QUARANTINE_SIGNAL_LABEL}="{QUARANTINE_SIGNAL_VALUE}"' in DEFAULT_SIGNAL_QUERY
    assert set(REASONS) == set(QUARANTINE_ALERTS)
    assert "QuarantineBreakerOpen" in rules
    assert QUARANTINE_SIGNAL_LABEL not in rules["QuarantineBreakerOpen"]["labels"]


def test_the_serving_alerts_read_metrics_the_daemons_export() -> None:
    """The names the serving group reads are the ones the taint controller, make-before-break and the burst
    provider register (a rename there would leave an alert that never fires)."""
    exported = {
        m.name + ("_total" if m.type == "counter" else "")
        for metrics in (burst_metrics.Metrics(), mbb_metrics.Metrics(), taint_metrics.Metrics())
        for m in metrics.registry.collect()
    }
    groups = rule_groups(TelemetrySettings())["groups"]
    (serving,) = [g for g in groups if g["name"] == "gpucluster-serving"]
    read = {name for r in serving["rules"] for name in re.findall(r"\b(gpucluster_[a-z_]+)", r["expr"])}
    assert read, "the serving group reads no metric of ours"
    assert read <= exported, read - exported


def test_inference_pending_counts_the_stacks_inference_priority_class(tmp_path: Path) -> None:
    settings = TelemetrySettings(inference_priority_class="prod-serving")
    pod = 'namespace="inference",pod="x"'
    series = [
        (f'kube_pod_status_phase{{{pod},phase="Pending"}}', "1x20"),
        (f'kube_pod_info{{{pod},priority_class="prod-serving"}}', "1x20"),
    ]
    fires = case(series, "InferencePending", "11m", [{"namespace": "inference", "severity": "critical"}])
    assert promtool_test(tmp_path, rule_groups(settings), [fires]).returncode == 0
    # the default name is not this stack's: nothing fires
    assert promtool_test(tmp_path, rule_groups(TelemetrySettings()), [fires]).returncode != 0


def test_the_make_before_break_alerts_follow_its_max_hold_and_are_absent_without_it(tmp_path: Path) -> None:
    held_8m = case(
        [(f'{HOLD}{{workload="team-a/llm"}}', "0+60x20")],
        "MakeBeforeBreakHoldingTooLong",
        "8m",
        [{"workload": "team-a/llm", "severity": "critical"}],
    )
    assert promtool_test(tmp_path, rule_groups(TelemetrySettings()), [held_8m]).returncode == 0
    # a 10-minute maxHold: eight minutes is within it
    longer = TelemetrySettings(make_before_break_hold_seconds=600)
    assert promtool_test(tmp_path, rule_groups(longer), [held_8m]).returncode != 0
    off = alert_names(TelemetrySettings(make_before_break_hold_seconds=None))
    assert not {"MakeBeforeBreakHoldingTooLong", "MakeBeforeBreakNotActing"} & set(off)


def test_the_stack_fills_the_hold_from_make_before_break() -> None:
    local = load_stack_file(ROOT / "stacks" / "Pulumi.local.yaml")
    prod = load_stack_file(ROOT / "stacks" / "Pulumi.prod.yaml")
    assert local.controller(MAKE_BEFORE_BREAK).enabled
    assert local.telemetry.make_before_break_hold_seconds == parse_duration(
        local.controller(MAKE_BEFORE_BREAK).max_hold
    )
    assert not prod.controller(MAKE_BEFORE_BREAK).enabled  # off while bursting is off
    assert prod.telemetry.make_before_break_hold_seconds is None


SERVING_LOOP_ALERTS = (
    "BurstProviderFailing",
    "BurstSpendCeilingReached",
    "BurstTaintFlapping",
    "MakeBeforeBreakFellBack",
)


def test_an_alert_on_a_daemon_the_stack_does_not_run_is_not_deployed() -> None:
    local = load_stack_file(ROOT / "stacks" / "Pulumi.local.yaml")
    prod = load_stack_file(ROOT / "stacks" / "Pulumi.prod.yaml")
    assert local.telemetry.bursting
    assert local.telemetry.taint_controller_running
    assert set(SERVING_LOOP_ALERTS) <= set(alert_names(local.telemetry))
    # prod ships bursting off: the burst provider, the taint controller and make-before-break do not run there
    assert not prod.telemetry.bursting
    assert not prod.telemetry.taint_controller_running
    assert not set(SERVING_LOOP_ALERTS) & set(alert_names(prod.telemetry))
    assert "InferencePending" in alert_names(prod.telemetry)
    # the drills' alerts follow the verifier's drills, their stale age the stack's staleAfter
    assert local.telemetry.restore_drill_stale_seconds == parse_duration("1h")
    assert {"CheckpointRestoreDrillFailed", "CheckpointRestoreDrillStale"} <= set(alert_names(local.telemetry))
    no_drills = local.telemetry.model_copy(update={"restore_drill_stale_seconds": None})
    assert not {"CheckpointRestoreDrillFailed", "CheckpointRestoreDrillStale"} & set(alert_names(no_drills))
    no_taint_controller = local.telemetry.model_copy(update={"taint_controller_running": False})
    assert "BurstTaintFlapping" not in alert_names(no_taint_controller)
    assert "BurstProviderFailing" in alert_names(no_taint_controller)


# --- the filesystem's own health (Ceph) -----------------------------------------------------------------------

CEPH = TelemetrySettings(ceph_scrape_job="rook-ceph-mgr")
CEPH_JOB = 'job="rook-ceph-mgr"'


def _ceph_check(name: str, values: str) -> tuple[str, str]:
    return (f'ceph_health_detail{{{CEPH_JOB},name="{name}",severity="HEALTH_ERR"}}', values)


CEPH_CASES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "CephHealthError": (
        case(
            [(f"ceph_health_status{{{CEPH_JOB}}}", "0 0 2x10")],
            "CephHealthError",
            "9m",
            [{"job": "rook-ceph-mgr", "severity": "critical"}],
        ),
        # a warning stays quiet, and so does another cluster's error under another job
        case(
            [(f"ceph_health_status{{{CEPH_JOB}}}", "1x10"), ('ceph_health_status{job="other-ceph"}', "2x10")],
            "CephHealthError",
            "9m",
            [],
        ),
    ),
    **{
        alert: (
            case([_ceph_check(check, "0 0 1x5")], alert, "5m", [{"job": "rook-ceph-mgr", "severity": "critical"}]),
            case([_ceph_check(check, "0x6"), _ceph_check("OSD_DOWN", "1x6")], alert, "5m", []),
        )
        for check, (alert, _) in CEPHFS_CHECKS.items()
    },
}


def test_the_ceph_alerts_are_deployed_only_where_the_stack_names_the_managers_job() -> None:
    assert not {n for n in alert_names(TelemetrySettings()) if n.startswith("Ceph")}
    assert {n for n in alert_names(CEPH) if n.startswith("Ceph")} == set(CEPH_CASES)


def test_the_ceph_cases_pass_under_promtool_and_their_quiet_inputs_do_not_fire(tmp_path: Path) -> None:
    proc = promtool_test(tmp_path, rule_groups(CEPH), [c for pair in CEPH_CASES.values() for c in pair])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name, (fires, quiet) in CEPH_CASES.items():
        flipped = copy.deepcopy(quiet)
        flipped["alert_rule_test"][0]["exp_alerts"] = fires["alert_rule_test"][0]["exp_alerts"]
        assert promtool_test(tmp_path, rule_groups(CEPH), [flipped]).returncode != 0, f"{name}: the quiet input fires"
