"""Alert rules for GPUs and the fabric, as a pure function of the settings.

``rule_groups(settings)`` returns the ``groups:`` document that both a ``PrometheusRule`` spec and a plain
Prometheus rule file take, so tests can write it to a file and run ``promtool test rules`` against it.

Every alert carries ``node`` (DCGM's ``Hostname`` is copied into ``node``) and, for GPU alerts, ``gpu``.
``FabricDevicesMissing`` fires when the fabric exporter finds fewer HCAs or GPUs than the node should have (its
``..._devices`` gauge below ``..._devices_expected``), which a node without its sysfs mount or with a dead HCA
would otherwise pass as a healthy scrape with no series.
The alerts that mean "take this node away from training" carry ``gpucluster_signal: gpu-quarantine``, the label
the quarantine controller (daemons/quarantine/) selects on: ``GpuTemperatureHigh``, ``GpuXidError``,
``NvlinkErrorsIncreasing`` and ``InfinibandLinkErrorsIncreasing`` (:data:`QUARANTINE_ALERTS`); the others only
inform. ``QuarantineBreakerOpen`` fires while the controller's circuit breaker refuses to quarantine more of a
flavor's nodes: someone must look, the controller will not.

The ``training`` group reads the interruption accounting daemon (daemons/interruptions/), whose replicas all export
the same figures (hence ``max by`` / ``min by``): ``TrainingEttrLow`` (a job's ETTR below ``ettrLowRatio`` for
``ettrLowForMinutes``), ``TrainingRestartBoundReached`` (a crash loop: more restarts in the last hour than the job's
bound, or the bound keeps it stopped), ``TrainingCheckpointStale`` (while every pod runs, the last checkpoint is older
than twice the job's interval: the trainer stopped reporting or writing) and ``TrainingRecoverySlow`` (the last
interruption took longer than ``recoverySlowSeconds`` to get the gang Running again); from the stall detector,
``TrainingGangStalled``, ``TrainingNodeRepeatOffender`` (a quarantine signal) and ``StallDetectorBlind``; from the
checkpoint verifier, ``CheckpointVerificationFailed`` (a job's last checked checkpoint was refused: only while the
stack runs the verifier), ``CheckpointRestoreDrillFailed`` (a job's last restore drill could not read its verified
checkpoint whole) and ``CheckpointRestoreDrillStale`` (no good drill of a job still checkpointing for
``restoreDrill.staleAfter``): only while the verifier's drills run.

The ``gpucluster-serving`` group watches the loop that keeps production serving while training takes the GPUs:
``BurstTaintFlapping`` (the taint controller reversed itself within its flap window: serving moved out and back for
nothing), ``MakeBeforeBreakFellBack`` (a gang was admitted before its room was made, by ``maxHold`` or because the
replacements could not be placed: the replicas on its GPUs were preempted), ``MakeBeforeBreakHoldingTooLong`` and
``MakeBeforeBreakNotActing`` (a gang held past ``maxHold``, or no cycle for five minutes: only while the stack runs
make-before-break), ``InferencePending`` (an inference pod found no room in the cluster and none rented for
``inferencePendingMinutes``), ``BurstProviderFailing`` (a provider's failure rate above ``providerFailureRate`` for
10 minutes) and ``BurstSpendCeilingReached`` (new rentals refused by ``maxSpendPerHour``).
"""

from __future__ import annotations

from typing import Any

from components.telemetry.settings import TelemetrySettings
from contract.burst_settings import METRICS_PREFIX as BURST_METRICS_PREFIX
from contract.constants import (
    GPU_RESOURCE,
    IB_TRANSPORT_ERRORS,
    QUARANTINE_REASON_ANNOTATION,
    VIRTUAL_NODE_TAINT_KEY,
)
from contract.controllers.interruptions import TRAINING
from contract.dcgm import on_either_host, with_node
from contract.fabric_settings import METRICS_PREFIX as FABRIC_METRICS_PREFIX
from contract.registry import CHECKPOINT_VERIFIER, STALL_DETECTOR
from contract.registry import MAKE_BEFORE_BREAK as MAKE_BEFORE_BREAK_SPEC
from contract.registry import TAINT_CONTROLLER as TAINT_CONTROLLER_SPEC
from contract.xids import new_xid_filter, program_xid_filter

#: The label of the alert an Alertmanager route sends to whoever replaces hardware (``GpuNodeQuarantined``).
REPLACEMENT_LABEL = "gpucluster_action"
REPLACEMENT_VALUE = "replace-hardware"
QUARANTINE_SIGNAL_LABEL = "gpucluster_signal"
QUARANTINE_SIGNAL_VALUE = "gpu-quarantine"
#: The alerts that carry the quarantine signal.
QUARANTINE_ALERTS = (
    "GpuTemperatureHigh",
    "GpuXidError",
    "NvlinkErrorsIncreasing",
    "InfinibandLinkErrorsIncreasing",
    "TrainingNodeRepeatOffender",
)
#: The stall detector's and the checkpoint verifier's metrics (their specs' prefixes).
STALL = STALL_DETECTOR.metrics_prefix
VERIFIER = CHECKPOINT_VERIFIER.metrics_prefix
_SIGNAL = {QUARANTINE_SIGNAL_LABEL: QUARANTINE_SIGNAL_VALUE}

#: The serving loop's daemons' metrics, by the prefixes the contract gives them (tests/components/telemetry check
#: the names against what the daemons export).
TAINT_CONTROLLER = TAINT_CONTROLLER_SPEC.metrics_prefix
MAKE_BEFORE_BREAK = MAKE_BEFORE_BREAK_SPEC.metrics_prefix
BURST = BURST_METRICS_PREFIX

FABRIC = FABRIC_METRICS_PREFIX
JOB = "namespace, job, team"


def _dcgm(metric: str) -> str:
    """A DCGM series with ``node`` taken from dcgm-exporter's host label (either spelling: contract/dcgm.py)."""
    return with_node(metric)


def _job(job: str | None, exporter: str) -> str:
    """The matcher of one scrape job, inside a selector's braces (the settings refuse an unknown job)."""
    if job is None:
        raise ValueError(f"rule_groups: the scrape job of {exporter} is unknown (set its scrapeJob)")
    return f'job="{job}"'


def _num(v: float) -> str:
    return f"{v:g}"


def _telemetry_missing(alert: str, present: str, exporter: str, minutes: int) -> dict[str, Any]:
    """A Ready node with GPUs (kube-state-metrics), not the virtual node, with no series of ``exporter``."""
    gpu = GPU_RESOURCE.replace(".", "_").replace("/", "_")
    return {
        "alert": alert,
        "expr": (
            f'(max by (node) (kube_node_status_capacity{{resource="{gpu}"}}) > 0)'
            ' and on (node) (max by (node) (kube_node_status_condition{condition="Ready",status="true"}) == 1)'
            f' unless on (node) max by (node) (kube_node_spec_taint{{key="{VIRTUAL_NODE_TAINT_KEY}"}})'
            f" unless on (node) {present}"
        ),
        "for": f"{minutes}m",
        "labels": {"severity": "warning"},
        "annotations": {
            "summary": f"GPU node {{{{ $labels.node }}}} has no series from {exporter}",
            "description": f"The node is Ready and has GPUs, but Prometheus has had no series from {exporter} "
            f"for it for {minutes} minutes: its pod is missing, crash-looping or unscheduled (a taint it does not "
            "tolerate). Nothing on this node can be quarantined or seen to stall until it reports again.",
        },
    }


def rule_groups(settings: TelemetrySettings) -> dict[str, Any]:
    a = settings.alerts
    window = f"{a.error_window_minutes}m"
    dcgm_job = _job(settings.dcgm_scrape_job, "dcgm-exporter")
    fabric_job = _job(settings.fabric_scrape_job, "the fabric exporter")
    xid = f"DCGM_FI_DEV_XID_ERRORS{{{dcgm_job}}}"
    new_xid = new_xid_filter(xid, window)
    program = program_xid_filter(xid)
    gpu_rules: list[dict[str, Any]] = [
        {
            "alert": "GpuTemperatureHigh",
            "expr": (
                f"max by (node, gpu, UUID) ({_dcgm(f'DCGM_FI_DEV_GPU_TEMP{{{dcgm_job}}}')})"
                f" > {_num(a.gpu_temp_limit_c)}"
            ),
            "for": f"{a.for_minutes}m",
            "labels": {"severity": "critical", **_SIGNAL},
            "annotations": {
                "summary": "GPU {{ $labels.gpu }} on {{ $labels.node }} is above "
                f"{_num(a.gpu_temp_limit_c)} °C",
                "description": "GPU {{ $labels.gpu }} ({{ $labels.UUID }}) on node {{ $labels.node }} has been "
                f"above {_num(a.gpu_temp_limit_c)} °C for {a.for_minutes} minutes "
                "(now {{ $value }} °C); it should be quarantined.",
            },
        },
        {
            "alert": "GpuBusyTensorCoresIdle",
            "expr": (
                f"(max by (node, gpu, UUID) ({_dcgm('DCGM_FI_DEV_GPU_UTIL')}) > {_num(a.util_high_pct)})"
                " and on (node, gpu, UUID) "
                f"(max by (node, gpu, UUID) ({_dcgm('DCGM_FI_PROF_PIPE_TENSOR_ACTIVE')})"
                f" < {_num(a.tensor_active_low_ratio)})"
            ),
            "for": f"{a.util_tensor_for_minutes}m",
            "labels": {"severity": "info"},
            "annotations": {
                "summary": "GPU {{ $labels.gpu }} on {{ $labels.node }} is busy but its tensor cores are idle",
                "description": f"Utilisation above {_num(a.util_high_pct)}% with tensor pipe activity below "
                f"{_num(a.tensor_active_low_ratio)} for {a.util_tensor_for_minutes} minutes: the job is "
                "probably not using mixed precision or is bound elsewhere.",
            },
        },
        {
            "alert": "GpuXidError",
            "expr": _dcgm(f"({new_xid}) unless ({program})"),
            "labels": {"severity": "warning", **_SIGNAL},
            "annotations": {
                "summary": "XID {{ $value }} on GPU {{ $labels.gpu }} of {{ $labels.node }}",
                "description": "DCGM_FI_DEV_XID_ERRORS changed in the last "
                f"{window} to a code that is the card's, not the program's (contract/xids.py); look it "
                "up in NVIDIA's Xid catalog.",
            },
        },
        {
            "alert": "GpuProgramXid",
            "expr": _dcgm(f"({new_xid}) and ({program})"),
            "labels": {"severity": "info"},
            "annotations": {
                "summary": "XID {{ $value }} on GPU {{ $labels.gpu }} of {{ $labels.node }}: the program's fault",
                "description": "NVIDIA's Xid catalog puts this XID on the application (restart it, check its CUDA "
                "code and memory accesses); the node is not quarantined. The series' namespace and pod name the "
                "workload.",
            },
        },
    ]
    fabric_rules: list[dict[str, Any]] = [
        {
            "alert": "NvlinkErrorsIncreasing",
            "expr": (
                f"sum by (node, gpu, uuid, link, type) (increase({FABRIC}_nvlink_errors_total"
                f'{{{fabric_job},type="recovery"}}[{window}])) > 0'
                f" or sum by (node, gpu, uuid, link, type) (increase({FABRIC}_nvlink_errors_total"
                f'{{{fabric_job},type=~"crc_flit|crc_data|replay"}}[{window}])) > {a.nvlink_errors_per_window}'
            ),
            "labels": {"severity": "warning", **_SIGNAL},
            "annotations": {
                "summary": "NVLink {{ $labels.type }} errors on GPU {{ $labels.gpu }} link {{ $labels.link }} "
                "of {{ $labels.node }}",
                "description": "{{ $value }} new {{ $labels.type }} errors in " + window + " (a recovery at the "
                f"first; CRC and replay errors above {a.nvlink_errors_per_window}).",
            },
        },
        {
            "alert": "InfinibandLinkErrorsIncreasing",
            "expr": (
                f"sum by (node, device, port, type) (increase({FABRIC}_infiniband_port_errors_total"
                f'{{{fabric_job},type=~"link_downed|link_error_recovery"}}[{window}])) > 0'
                # symbol errors: per bit signalled over the window, the link's bit-error ratio
                f" or sum by (node, device, port, type) (increase({FABRIC}_infiniband_port_errors_total"
                f'{{{fabric_job},type="symbol_error"}}[{window}]))'
                f" / on (node, device, port) group_left()"
                f" (max by (node, device, port) ({FABRIC}_infiniband_port_rate_bytes_per_second{{{fabric_job}}})"
                f" * {8 * 60 * a.error_window_minutes})"
                f" > {a.ib_symbol_error_ratio:g}"
            ),
            "labels": {"severity": "warning", **_SIGNAL},
            "annotations": {
                "summary": "InfiniBand {{ $labels.type }} increasing on {{ $labels.device }} port "
                "{{ $labels.port }} of {{ $labels.node }}",
                "description": "{{ $labels.type }} on this port in the last " + window + ": a link that went "
                "down or had to recover, or symbol errors at a bit-error ratio above "
                f"{a.ib_symbol_error_ratio:g} (now {{{{ $value }}}}).",
            },
        },
        {
            "alert": "InfinibandTransportErrorsIncreasing",
            "expr": (
                f"sum by (node, device, port, counter) (increase({FABRIC}_infiniband_hw_counters_total"
                f'{{counter=~"{"|".join(IB_TRANSPORT_ERRORS)}"}}[{window}]))'
                f" > {a.ib_transport_errors_per_window}"
            ),
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "InfiniBand {{ $labels.counter }} rising on {{ $labels.device }} port {{ $labels.port }} "
                "of {{ $labels.node }}",
                "description": "{{ $value }} transport retries or timeouts in " + window + ", above "
                f"{a.ib_transport_errors_per_window}: queue pairs on this port wait for ACKs that do not come. "
                "NCCL stalls on such a port while the link stays up; the peer or a switch may be at fault.",
            },
        },
        {
            "alert": "FilesystemClientTimeouts",
            # each counter's increase kept apart (``kind``) until summed: without its name the two would collide
            "expr": "sum by (node, fstype, filesystem) ("
            + " or ".join(
                f'label_replace(increase({FABRIC}_filesystem_rpc_{kind}_total{{{fabric_job}}}[{window}]), "kind", '
                f'"{kind}", "", "")'
                for kind in ("timeouts", "errors")
            )
            + ") > 0",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "{{ $labels.fstype }} client of {{ $labels.filesystem }} on {{ $labels.node }} times out",
                "description": "{{ $value }} RPCs to the filesystem timed out or failed in the last " + window + ". "
                "A checkpoint written now may take far longer than planned or end short (the verifier catches the "
                "latter); the client, its network path or the server is at fault.",
            },
        },
        {
            "alert": "InfinibandPortCongested",
            "expr": (
                f"sum by (node, device, port) (rate({FABRIC}_infiniband_port_transmit_wait_total[{window}]))"
                f" > {_num(a.xmit_wait_rate)}"
            ),
            "for": f"{a.xmit_wait_for_minutes}m",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "InfiniBand port {{ $labels.device }}/{{ $labels.port }} on {{ $labels.node }} is congested",
                "description": "Transmit wait above " + _num(a.xmit_wait_rate) + " ticks/s for "
                f"{a.xmit_wait_for_minutes} minutes (now {{{{ $value }}}}).",
            },
        },
        {
            "alert": "InfinibandCounterSaturated",
            "expr": f"max by (node, device, port, counter) ({FABRIC}_infiniband_counter_saturated) == 1",
            "for": "30m",
            "labels": {"severity": "info"},
            "annotations": {
                "summary": "InfiniBand counter {{ $labels.counter }} on {{ $labels.device }} of "
                "{{ $labels.node }} is saturated",
                "description": "The legacy counter sits at its maximum and is no longer exported; "
                "reset it (perfquery -R) to see new errors.",
            },
        },
        {
            "alert": "FabricDevicesMissing",
            "expr": (
                f"max by (node, collector) ({FABRIC}_devices_expected)"
                f" > on (node, collector) max by (node, collector) ({FABRIC}_devices)"
            ),
            "for": f"{a.collector_failing_minutes}m",
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": "{{ $labels.node }} has fewer {{ $labels.collector }} devices than it should",
                "description": "The fabric exporter's {{ $labels.collector }} collector finds fewer devices (HCAs "
                "or GPUs) than --expected-hcas / --expected-gpus say the node has ({{ $value }} expected), or no "
                "sysfs at all: a missing mount, a dead HCA or a lost GPU. Keep training off the node until fixed.",
            },
        },
        {
            "alert": "FabricExporterCollectorFailing",
            "expr": f"min by (node, collector) ({FABRIC}_collector_success) == 0",
            "for": f"{a.collector_failing_minutes}m",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "Fabric exporter collector {{ $labels.collector }} failing on {{ $labels.node }}",
                "description": "See the exporter's logs on the node; the other collectors still report.",
            },
        },
        _telemetry_missing(
            "GpuNodeDcgmSeriesMissing",
            f"max by (node) ({_dcgm('DCGM_FI_DEV_GPU_TEMP')})",
            "dcgm-exporter",
            a.telemetry_missing_minutes,
        ),
        _telemetry_missing(
            "GpuNodeFabricSeriesMissing",
            f"max by (node) ({FABRIC}_collector_success)",
            "the fabric exporter",
            a.telemetry_missing_minutes,
        ),
    ]
    serials = (
        "{{ range printf `max by (gpu, UUID, DCGM_FI_DEV_SERIAL) "
        + on_either_host("DCGM_FI_DEV_GPU_TEMP{{{host}=%q," + dcgm_job + "}}")
        + "` $labels.node $labels.node | query }}GPU {{ .Labels.gpu }} {{ .Labels.UUID }} serial "
        "{{ .Labels.DCGM_FI_DEV_SERIAL }}; {{ end }}"
    )
    quarantine_rules: list[dict[str, Any]] = [
        {
            "alert": "GpuNodeQuarantined",
            "expr": "max by (node, flavor, reason) (gpucluster_quarantine_node_info) == 1",
            "labels": {"severity": "warning", REPLACEMENT_LABEL: REPLACEMENT_VALUE},
            "annotations": {
                "summary": "{{ $labels.node }} ({{ $labels.flavor }}) is quarantined: {{ $labels.reason }}",
                "description": "The quarantine controller took {{ $labels.node }} away from training for "
                "{{ $labels.reason }}; inference still runs there. Its GPUs: " + serials + "The evidence is the "
                f"node's {QUARANTINE_REASON_ANNOTATION} annotation and its entry in the quarantine ledger "
                "(kubectl describe node {{ $labels.node }}). The alert resolves when node_admission releases the "
                "node.",
            },
        },
        {
            "alert": "QuarantineBreakerOpen",
            "expr": "max by (flavor) (gpucluster_quarantine_breaker_open) == 1",
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": "The quarantine circuit breaker of flavor {{ $labels.flavor }} is open",
                "description": "More nodes of flavor {{ $labels.flavor }} ask for quarantine than maxShare allows "
                "within breakerWindow, or than maxQuarantinedShare allows at once; the controller quarantines no "
                "more of them. A burst this size is more often "
                "a shared cause (cooling, a fabric switch, a bad exporter) than many bad GPUs: look at the refused "
                "nodes (Events QuarantineBreakerOpen) before quarantining any by hand.",
            },
        },
    ]
    training_rules: list[dict[str, Any]] = [
        {
            "alert": "TrainingEttrLow",
            "expr": f"min by ({JOB}) ({TRAINING}_ettr) < {_num(a.ettr_low_ratio)}",
            "for": f"{a.ettr_low_for_minutes}m",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "Training job {{ $labels.namespace }}/{{ $labels.job }} keeps "
                "{{ $value | humanizePercentage }} of its time",
                "description": f"Its effective training time ratio has been below {_num(a.ettr_low_ratio)} for "
                f"{a.ettr_low_for_minutes} minutes: interruptions, slow recovery or work lost since the last "
                "checkpoint. gpucluster_training_interruptions_total says which cause.",
            },
        },
        {
            "alert": "TrainingRestartBoundReached",
            "expr": (
                f"max by ({JOB}) ({TRAINING}_stopped_at_bound) == 1"
                f" or max by ({JOB}) ({TRAINING}_restarts_last_hour)"
                f" > on ({JOB}) max by ({JOB}) ({TRAINING}_max_restarts_per_hour)"
            ),
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": "Training job {{ $labels.namespace }}/{{ $labels.job }} crash-loops past its restart bound",
                "description": "More in-place restarts in the last hour than gpucluster.io/max-restarts-per-hour: "
                "its Workload is deactivated and its quota freed. kubectl describe jobset says why (Event "
                "RestartBoundReached) and how to resume.",
            },
        },
        {
            "alert": "TrainingCheckpointStale",
            "expr": (
                f"max by ({JOB}) ({TRAINING}_checkpoint_age_seconds)"
                f" > on ({JOB}) 2 * max by ({JOB}) ({TRAINING}_checkpoint_interval_seconds)"
            ),
            "for": "5m",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "Training job {{ $labels.namespace }}/{{ $labels.job }} has not checkpointed for two "
                "intervals",
                "description": "Every pod runs, but the last checkpoint that counts is older than twice the job's "
                "checkpoint interval: the last verified one (annotation verified.checkpoint.gpucluster.io/<job> on "
                "the team's checkpoints claim) where the stack runs the checkpoint verifier, else the last reported "
                "one (checkpoint.gpucluster.io/<job>); with none that counts, the gang has run that long without "
                "one (a job that never reports, or whose checks never pass or never run: kubectl get jobs -l "
                "checkpoint.gpucluster.io/check-of=<job>). The next interruption loses that much work.",
            },
        },
        {
            "alert": "TrainingGangStalled",
            "expr": f"max by (namespace, job) (increase({STALL}_restarts_total[10m])) > 0",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "Training job {{ $labels.namespace }}/{{ $labels.job }} hung and was restarted in place",
                "description": "Every GPU of the gang idled, its nodes moved no fabric traffic and it reported no "
                "progress for stallAfter: the stall detector restarted it in place. kubectl describe jobset shows "
                "the evidence and the suspect nodes (Events GangStalled, SuspectNode); the NCCL flight recorder's "
                "dumps are under the job's checkpoint directory.",
            },
        },
        {
            "alert": "TrainingNodeRepeatOffender",
            "expr": f"max by (node, reasons) ({STALL}_repeat_offender) > 0",
            "labels": {"severity": "warning", **_SIGNAL},
            "annotations": {
                "summary": "{{ $labels.node }} was named a suspect by training gangs again and again",
                "description": "The stall detector named the node ({{ $labels.reasons }}) in repeatCount gang "
                "attempts within repeatWindow: quarantined, so the gangs restart without it.",
            },
        },
        {
            "alert": "StallDetectorBlind",
            "expr": f'max({STALL}_gangs{{verdict="unknown"}}) > 0',
            "for": "15m",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "The stall detector cannot judge {{ $value }} running gangs",
                "description": "A query failed or a gang's GPUs or nodes have no series (dcgm-exporter's pod mapping "
                "or the fabric exporter missing): a hang of those gangs is not restarted. The detector's log and "
                "gpucluster_stall_detector_query_errors_total say which input is missing.",
            },
        },
        {
            "alert": "TrainingRecoverySlow",
            "expr": f"max by ({JOB}) ({TRAINING}_recovery_seconds) > {_num(a.recovery_slow_seconds)}",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "Training job {{ $labels.namespace }}/{{ $labels.job }} took {{ $value }} s to recover",
                "description": f"The last interruption took longer than {_num(a.recovery_slow_seconds)} s from the "
                "failure to every pod Running again (image pulls, scheduling, a slow checkpoint load).",
            },
        },
    ]
    if settings.checkpoint_verifier_running:
        training_rules.append(
            {
                "alert": "CheckpointVerificationFailed",
                # its value is the refused step
                "expr": f"max by (namespace, job) ({VERIFIER}_last_check_step)"
                f" and on (namespace, job) (max by (namespace, job) ({VERIFIER}_last_check_ok) == 0)",
                "labels": {"severity": "warning"},
                "annotations": {
                    "summary": "The last checkpoint of training job {{ $labels.namespace }}/{{ $labels.job }} "
                    "failed its check",
                    "description": "The checkpoint verifier refused the job's last reported checkpoint (step "
                    "{{ $value }}; -1: no step directory at all): a restart resumes from the last verified one. "
                    "kubectl describe pvc checkpoints -n {{ $labels.namespace }} says "
                    "what is wrong (Event CheckpointRejected); the record is annotation "
                    "verified.checkpoint.gpucluster.io/{{ $labels.job }}.",
                },
            }
        )
    if settings.checkpoint_verifier_running and settings.restore_drill_stale_seconds is not None:
        training_rules += drill_rules(settings.restore_drill_stale_seconds)
    return {
        "groups": [
            {"name": "gpucluster-gpu", "rules": gpu_rules},
            {"name": "gpucluster-fabric", "rules": fabric_rules},
            {"name": "gpucluster-quarantine", "rules": quarantine_rules},
            {"name": "training", "rules": training_rules},
            {"name": "gpucluster-serving", "rules": serving_rules(settings)},
            *([{"name": "gpucluster-storage", "rules": storage}] if (storage := ceph_rules(settings)) else []),
        ]
    }


def drill_rules(stale_seconds: float) -> list[dict[str, Any]]:
    """The restore drills' alerts: a drill that failed (its value the step), a job not drilled for too long (its
    value the age of its last good drill, or of its verified checkpoint until one has passed)."""
    by_job = "max by (namespace, job)"
    return [
        {
            "alert": "CheckpointRestoreDrillFailed",
            "expr": f"{by_job} ({VERIFIER}_restore_drill_step)"
            f" and on (namespace, job) ({by_job} ({VERIFIER}_restore_drill_last_ok) == 0)",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "The verified checkpoint of training job {{ $labels.namespace }}/{{ $labels.job }} does "
                "not restore",
                "description": "The last restore drill could not read step {{ $value }} whole as a restart would "
                "(a record's CRC-32, a tensor unlike the metadata, a shard gone since it was verified): a restart "
                "from it would fail. kubectl describe pvc checkpoints -n {{ $labels.namespace }} says what is wrong "
                "(Event CheckpointRestoreFailed); the record's drill is in annotation "
                "verified.checkpoint.gpucluster.io/{{ $labels.job }}.",
            },
        },
        {
            "alert": "CheckpointRestoreDrillStale",
            "expr": f"time() - {by_job} ({VERIFIER}_restore_drill_last_good_timestamp_seconds) > {_num(stale_seconds)}",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "No good restore drill of training job {{ $labels.namespace }}/{{ $labels.job }} for "
                "{{ $value | humanizeDuration }}",
                "description": f"No drill has read the job's verified checkpoint whole for over {_num(stale_seconds)} "
                "s (restoreDrill.staleAfter): its drills fail, wait in the queue (they run at the team's lowest "
                "priority) or do not start (the verifier's log says which).",
            },
        },
    ]


#: Ceph's health checks (``ceph_health_detail{name}``, the manager's prometheus module) that take CephFS away from a
#: checkpoint: the names Ceph's own alerts (monitoring/ceph-mixin) read, and what each means here.
CEPHFS_CHECKS = {
    "MDS_ALL_DOWN": ("CephFilesystemOffline", "every MDS rank is down: no checkpoint can be written or read"),
    "MDS_DAMAGE": ("CephFilesystemDamaged", "the filesystem's metadata is damaged: checkpoints may not read back"),
    "FS_DEGRADED": ("CephFilesystemDegraded", "an MDS rank is failed or damaged: writes to its subtree stall"),
}


def ceph_rules(settings: TelemetrySettings) -> list[dict[str, Any]]:
    """The filesystem's own health, as the Ceph manager's prometheus module reports it; none without its job."""
    if settings.ceph_scrape_job is None:
        return []
    job = _job(settings.ceph_scrape_job, "the Ceph manager")
    rules: list[dict[str, Any]] = [
        {
            "alert": "CephHealthError",
            "expr": f"max by (job) (ceph_health_status{{{job}}}) == 2",
            "for": "5m",
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": "Ceph reports HEALTH_ERR",
                "description": "The Ceph cluster behind the checkpoints is in HEALTH_ERR (`ceph health detail` says "
                "why): checkpoints written now may fail, and restores may not read back.",
            },
        }
    ]
    for check, (alert, why) in CEPHFS_CHECKS.items():
        rules.append(
            {
                "alert": alert,
                "expr": f'max by (job) (ceph_health_detail{{{job},name="{check}"}}) > 0',
                "for": "1m",
                "labels": {"severity": "critical"},
                "annotations": {"summary": f"CephFS health check {check}", "description": f"Ceph reports {why}."},
            }
        )
    return rules


def serving_rules(settings: TelemetrySettings) -> list[dict[str, Any]]:
    """The serving loop: the burst taint, make-before-break, Pending inference, the providers, the spend."""
    a = settings.alerts
    pending = (
        'max by (namespace, pod) (kube_pod_status_phase{phase="Pending"} == 1)'
        " * on (namespace, pod) group_left ()"
        f' max by (namespace, pod) (kube_pod_info{{priority_class="{settings.inference_priority_class}"}})'
    )
    return [
        *taint_controller_rules(settings),
        *make_before_break_rules(settings),
        {
            "alert": "InferencePending",
            "expr": f"count by (namespace) ({pending}) > 0",
            "for": f"{a.inference_pending_minutes}m",
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": "{{ $value }} inference pod(s) in {{ $labels.namespace }} Pending for "
                f"{a.inference_pending_minutes} minutes",
                "description": "Production replicas found no room in the cluster and none on the virtual node: "
                "bursting is off, every provider refused, or the spend ceiling stops new rentals. kubectl "
                "describe pod says which (FailedScheduling, the burst provider's Events).",
            },
        },
        *burst_provider_rules(settings),
    ]


def taint_controller_rules(settings: TelemetrySettings) -> list[dict[str, Any]]:
    """The burst taint reversing itself; none while the stack runs no taint controller."""
    if not settings.taint_controller_running:
        return []
    return [
        {
            "alert": "BurstTaintFlapping",
            "expr": f"sum(increase({TAINT_CONTROLLER}_flaps_total[30m])) > 0",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "The burst taint reversed itself {{ $value | humanize }} times in 30 minutes",
                "description": "The taint controller added the burst taint back (or took it off again) within its "
                "flapWindow: inference replicas moved out to rented GPUs and home again, or the reverse, for "
                "nothing. Headroom that swings around highMark is the usual cause: widen the marks or lengthen "
                "holdAdd/holdRemove (gpucluster_taint_controller_headroom_gpus shows the swing).",
            },
        },
    ]


def burst_provider_rules(settings: TelemetrySettings) -> list[dict[str, Any]]:
    """The providers' failures and the spend ceiling; none while the stack does not burst."""
    if not settings.bursting:
        return []
    a = settings.alerts
    return [
        {
            "alert": "BurstProviderFailing",
            "expr": f"max by (provider) ({BURST}_provider_failure_rate) > {_num(a.provider_failure_rate)}",
            "for": "10m",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "Burst provider {{ $labels.provider }} fails {{ $value | humanizePercentage }} of its "
                "rentals",
                "description": "Creates or running instances of this provider fail (the pod goes Failed and is "
                "replaced) more often than providerFailureRate within the provider service's failure window; "
                "it is priced down but still chosen when it is the only one with capacity. "
                "gpucluster_burst_pod_failures_total says why.",
            },
        },
        {
            "alert": "BurstSpendCeilingReached",
            "expr": f"sum(increase({BURST}_spend_refusals_total[10m])) > 0",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "New rentals are refused: maxSpendPerHour is reached",
                "description": "Renting more would pass burst.maxSpendPerHour, so inference pods that need rented "
                "GPUs stay Pending (Event SpendCeiling on each). gpucluster_burst_spend_rate_usd_per_hour shows "
                "the spend per provider; raise the ceiling or let the cluster free GPUs.",
            },
        },
    ]


#: How long past ``maxHold`` a gang may still be held before it alerts: a few of the controller's cycles and scrapes.
HOLD_GRACE_SECONDS = 120
#: Minutes without a make-before-break cycle before it alerts (a cycle runs every ``interval``, 10 s by default).
NOT_CYCLING_MINUTES = 5


def make_before_break_rules(settings: TelemetrySettings) -> list[dict[str, Any]]:
    """A gang held past ``maxHold`` (the controller runs but does not act), or a controller that stopped cycling
    (down, or wedged) while gangs wait on its AdmissionCheck with nothing to clear it; none without the controller."""
    hold = settings.make_before_break_hold_seconds
    if hold is None:
        return []
    return [
        {
            "alert": "MakeBeforeBreakFellBack",
            "expr": f"sum by (reason) (increase({MAKE_BEFORE_BREAK}_fallbacks_total[15m])) > 0",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "A training gang was admitted before its room was made ({{ $labels.reason }})",
                "description": "The make-before-break check was set Ready without every inference replica on the "
                "gang's GPUs replaced elsewhere, so the scheduler preempted those replicas: production dipped "
                "until the burst path caught up. kubectl describe workload names the gang (Event FallbackMaxHold "
                "or the reason above); replacements that could not be placed (no rented capacity, the spend "
                "ceiling) are the usual cause.",
            },
        },
        {
            "alert": "MakeBeforeBreakHoldingTooLong",
            "expr": f"max by (workload) ({MAKE_BEFORE_BREAK}_hold_seconds) > {_num(hold + HOLD_GRACE_SECONDS)}",
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": "Gang {{ $labels.workload }} held {{ $value | humanizeDuration }} by make-before-break, "
                "past its maxHold",
                "description": "The make-before-break check should have gone Ready (room made, or maxHold reached "
                "and training preempts) but has not: training waits and nothing will admit it. kubectl describe "
                "workload names the check's state; the controller's log and its observe errors "
                "(gpucluster_make_before_break_observe_errors_total) say why. Deleting the AdmissionCheck from the "
                "ClusterQueue (makeBeforeBreak.enabled: false) lets Kueue admit without it.",
            },
        },
        {
            "alert": "MakeBeforeBreakNotActing",
            "expr": f"sum(increase({MAKE_BEFORE_BREAK}_cycles_total[{NOT_CYCLING_MINUTES}m])) == 0"
            f" or absent({MAKE_BEFORE_BREAK}_cycles_total)",
            "for": f"{NOT_CYCLING_MINUTES}m",
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": f"make-before-break has not run a cycle in {NOT_CYCLING_MINUTES} minutes",
                "description": "Every training gang waits on its AdmissionCheck (blockAdmission) and none is "
                "cleared while the controller is down or wedged: kubectl -n <its namespace> get pods,lease shows "
                "whether any replica runs and holds the Lease.",
            },
        },
    ]


def alert_names(settings: TelemetrySettings) -> list[str]:
    return [r["alert"] for g in rule_groups(settings)["groups"] for r in g["rules"]]
