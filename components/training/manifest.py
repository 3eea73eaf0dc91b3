"""The JobSet a training job becomes, and the checkpoint interval it is given: pure functions, no I/O.

:func:`jobset_manifest` turns a :class:`~components.training.spec.JobSpec` and a :class:`JobContext` (what the
stack decides: the team's namespace and LocalQueue, the training PriorityClass, the claims, the restart bounds and
the interval) into one JobSet (sigs.k8s.io/jobset v1alpha2) that Kueue admits as one gang:

* ``spec.suspend: true`` with the team's ``kueue.x-k8s.io/queue-name`` and ``priority-class`` labels: Kueue
  unsuspends it once the whole gang's quota is admitted;
* one replicated Job ``node`` of ``nodes`` Indexed pods, ``backoffLimit: 0``, whose ``podFailurePolicy`` fails the
  Job at once and says why: first a pod with the ``DisruptionTarget`` condition (the node's fault: drained,
  quarantined, lost), then any non-zero exit (the program's fault);
* a JobSet ``failurePolicy`` that recreates the whole gang in place on either: a node's fault does not count
  towards ``maxRestarts`` (``RestartJobSetAndIgnoreMaxRestarts``), the program's does. The Kueue Workload stays
  admitted across restarts: the gang keeps its quota and does not queue again.

:func:`checkpoint_interval` is Young/Daly on the measured reliability when there is enough of it, else on the
stack's prior.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from components.config.stack import StackConfig
from components.training.checks import landing_topology, queue_flavors, team_of
from components.training.spec import SECRET_FILES_DIR, JobSpec
from contract.checkpoint_record import resume_key
from contract.checkpoints import CHECKPOINTS_MOUNT, RESUME_DIR, RESUME_FILE, job_directory
from contract.constants import (
    CHECKPOINT_ANNOTATION_PREFIX,
    CHECKPOINT_CLAIM,
    CHECKPOINT_INTERVAL_ANNOTATION,
    CHECKPOINT_WRITE_ANNOTATION,
    COMPLETION_INDEX_ANNOTATION,
    GPU_RESOURCE,
    JOBSET_RESTART_ATTEMPT_LABEL,
    MAX_RESTARTS_PER_HOUR_ANNOTATION,
    PODSET_PREFERRED_TOPOLOGY,
    PODSET_REQUIRED_TOPOLOGY,
    PRIORITY_LABEL,
    PROGRESS_ANNOTATION_PREFIX,
    QUEUE_LABEL,
    RESUME_CONFIGMAP,
    STALL_AFTER_ANNOTATION,
    TEAM_LABEL,
    TRAINER_SERVICE_ACCOUNT,
    TRAINING_JOB_LABEL,
    VERIFIED_ANNOTATION_PREFIX,
)
from contract.fabric_settings import DEFAULT_SHM_SIZE, RDMA_CAPABILITY, Fabric
from contract.model import parse_duration
from contract.registry import MAKE_BEFORE_BREAK
from contract.storage_settings import checkpoint_interval_seconds

JOBSET_API_VERSION = "jobset.x-k8s.io/v1alpha2"
JOBSET_KIND = "JobSet"
#: The one replicated Job; pods are ``<name>-node-0-<index>``, reachable as ``<pod>.<name>``.
REPLICATED_JOB = "node"
CONTAINER = "trainer"
DATASETS_CLAIM = "datasets"
DATASETS_MOUNT = "/datasets"
MASTER_PORT = 29500
SHM_VOLUME = "dshm"
SHM_MOUNT = "/dev/shm"
#: The job's entry of the team's checkpoint-resume ConfigMap, mounted read-only at RESUME_DIR as resume.json.
RESUME_VOLUME = "gpucluster-resume"
#: What the Job controller writes when a pod with ``DisruptionTarget`` matches the first podFailurePolicy rule
#: ("Pod %s/%s has condition %v matching %v rule at index %d"); the JobSet rule for a node's fault matches it.
NODE_FAULT_MESSAGE = "has condition DisruptionTarget"
#: The trainer's restart attempt (JobSet's pod label), which the flight recorder's dump file names.
RESTART_ATTEMPT_ENV = "GPUCLUSTER_RESTART_ATTEMPT"
#: The node lifecycle controller's taints on a node that is not Ready, or whose kubelet stopped reporting.
NODE_NOT_READY_TAINT = "node.kubernetes.io/not-ready"
NODE_UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
#: The measured MTBI is trusted from this many interruptions on; fewer, and the stack's prior is used.
MIN_TRUSTED_INTERRUPTIONS = 3

IntervalSource = Literal["measured", "stack"]


# --- the checkpoint interval --------------------------------------------------------------------------------


class ReliabilityError(ValueError):
    """The reliability ConfigMap's data cannot be read; the message names the key."""


@dataclass(frozen=True)
class Reliability:
    """The cluster's measured reliability (ConfigMap ``gpucluster-training-reliability``)."""

    #: Training node-seconds per interruption.
    node_mtbi_seconds: float
    interruptions: int
    node_seconds: float
    updated_at: str

    @property
    def trusted(self) -> bool:
        return self.interruptions >= MIN_TRUSTED_INTERRUPTIONS


def _number(data: Mapping[str, str], key: str, kind: type[int] | type[float]) -> Any:
    text = data.get(key)
    if text is None:
        raise ReliabilityError(f"{key}: missing")
    try:
        value = kind(str(text).strip())
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise ReliabilityError(f"{key}: {str(text)[:40]!r} is not {what}") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise ReliabilityError(f"{key}: must be finite")
    if value < 0:
        raise ReliabilityError(f"{key}: must not be negative")
    return value


def parse_reliability(data: Mapping[str, str]) -> Reliability:
    """The ConfigMap's ``data``: ``nodeMtbiSeconds``, ``interruptions``, ``nodeSeconds``, ``updatedAt``."""
    updated = str(data.get("updatedAt", ""))
    try:
        datetime.fromisoformat(updated.replace("Z", "+00:00"))
    except ValueError:
        raise ReliabilityError(f"updatedAt: {updated[:40]!r} is not an RFC 3339 time") from None
    mtbi = _number(data, "nodeMtbiSeconds", float)
    interruptions = _number(data, "interruptions", int)
    if interruptions > 0 and mtbi <= 0:
        raise ReliabilityError("nodeMtbiSeconds: must be positive once there are interruptions")
    return Reliability(mtbi, interruptions, _number(data, "nodeSeconds", float), updated)


@dataclass(frozen=True)
class MeasuredWrite:
    """The file system's write rate with every GPU node writing at once (ConfigMap ``gpucluster-storage-measured``,
    written by ``ansible/playbooks/storage_aggregate.yml``)."""

    bytes_per_second: float
    hosts: int
    slowest_host: str
    measured_at: str


def parse_measured_write(data: Mapping[str, str]) -> MeasuredWrite:
    """The ConfigMap's ``data``: ``aggregateWriteBytesPerSecond``, ``hosts``, ``slowestHost``, ``measuredAt``."""
    measured = str(data.get("measuredAt", ""))
    try:
        datetime.fromisoformat(measured.replace("Z", "+00:00"))
    except ValueError:
        raise ReliabilityError(f"measuredAt: {measured[:40]!r} is not an RFC 3339 time") from None
    rate = _number(data, "aggregateWriteBytesPerSecond", float)
    if rate <= 0:
        raise ReliabilityError("aggregateWriteBytesPerSecond: must be positive")
    hosts = _number(data, "hosts", int)
    if hosts < 1:
        raise ReliabilityError("hosts: must be at least 1")
    return MeasuredWrite(rate, hosts, str(data.get("slowestHost", ""))[:253], measured)


@dataclass(frozen=True)
class Interval:
    """The checkpoint interval a job gets, and what it was computed from."""

    seconds: int
    source: IntervalSource
    write_seconds: float
    mtbf_seconds: float
    #: One line for a person: where the MTBF came from.
    reason: str
    #: Where the write time came from: typed in the job's spec or the stack (no write has been measured).
    write_reason: str = ""


def write_time_of(spec: JobSpec, stack: StackConfig, measured: MeasuredWrite | None = None) -> tuple[float, str]:
    """The time one complete checkpoint takes to write, and where that figure came from: the job's own figure, else
    the stack's checkpoint size at the rate measured with every node writing at once, else the stack's typed one."""
    if spec.checkpoint_write_seconds is not None:
        return spec.checkpoint_write_seconds, "typed in the job's checkpointWriteSeconds, not measured"
    c = stack.storage.checkpointing
    if measured is not None:
        seconds = c.size_tb * 1e12 / measured.bytes_per_second
        return seconds, (
            f"measured: {measured.bytes_per_second / 1e9:.2f} GB/s with {measured.hosts} nodes writing at once "
            f"(storage acceptance, {measured.measured_at}; slowest {measured.slowest_host}), so {c.size_tb:g} TB "
            f"would take {seconds:.0f} s"
        )
    return c.write_seconds, (
        f"typed in the stack's storage.checkpointing.writeSeconds, not measured: {c.size_tb:g} TB in "
        f"{c.write_seconds:g} s is {c.size_tb * 1000 / c.write_seconds:.1f} GB/s from the filesystem"
    )


def checkpoint_interval(
    spec: JobSpec, stack: StackConfig, reliability: Reliability | None, measured: MeasuredWrite | None = None
) -> Interval:
    """Young/Daly: sqrt(2 x write time x the job's MTBF).

    The job's MTBF is a per-node figure over the job's nodes, whichever the source: the measured node-seconds per
    interruption once at least :data:`MIN_TRUSTED_INTERRUPTIONS` were measured, else the stack's prior
    (``mtbfHours`` for a job of ``mtbfJobNodes`` nodes, so ``mtbfHours x mtbfJobNodes`` per node). A measurement
    that agrees with the prior therefore leaves the interval where it was.
    """
    write, write_reason = write_time_of(spec, stack, measured)
    if reliability is not None and reliability.trusted and reliability.node_mtbi_seconds > 0:
        mtbf = reliability.node_mtbi_seconds / spec.nodes
        source: IntervalSource = "measured"
        reason = (
            f"measured: {reliability.node_mtbi_seconds:.0f} node-seconds per interruption over "
            f"{reliability.interruptions} interruptions (updated {reliability.updated_at}), / {spec.nodes} nodes"
        )
    else:
        prior = stack.storage.checkpointing
        mtbf = prior.job_mtbf_seconds(spec.nodes)
        source = "stack"
        why = (
            "no measured reliability"
            if reliability is None
            else f"only {reliability.interruptions} interruptions measured (trusted from {MIN_TRUSTED_INTERRUPTIONS})"
        )
        reason = (
            f"stack prior storage.checkpointing.mtbfHours = {prior.mtbf_hours:g} for a job of "
            f"mtbfJobNodes = {prior.mtbf_job_nodes}, {prior.node_mtbf_seconds():.0f} node-seconds per interruption, "
            f"/ {spec.nodes} nodes ({why})"
        )
    seconds = max(1, round(checkpoint_interval_seconds(write, mtbf)))
    return Interval(seconds, source, write, mtbf, reason, write_reason)


# --- the JobSet -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobContext:
    """What the stack decides for one job: where it runs, how it is scheduled and restarted, its interval."""

    namespace: str
    local_queue: str
    #: The training Kubernetes PriorityClass (``priorities.pod.training.name``).
    pod_priority_class: str
    checkpoint_interval_seconds: int
    max_restarts_per_hour: int
    max_restarts: int
    gpu_resource: str = GPU_RESOURCE
    #: Labels every object of the stack carries (environment), added to the JobSet's.
    labels: Mapping[str, str] = field(default_factory=dict)
    #: Seconds one checkpoint takes to write (the JobSet says so, for the interruption accounting's ETTR).
    checkpoint_write_seconds: float = 30.0
    #: Seconds a pod stays on a not-ready or unreachable node (``training.nodeLostToleration``).
    node_lost_toleration_seconds: int = 30
    #: PyTorch's NCCL watchdog heartbeat timeout and flight recorder size (``training.ncclHeartbeatTimeout``,
    #: ``training.flightRecorderEntries``; 0: off).
    nccl_heartbeat_timeout_seconds: int = 300
    flight_recorder_entries: int = 2000
    #: The fabric of the flavor the job lands on (every flavor it may land on has this one); none: no RDMA.
    fabric: Fabric | None = None
    #: Kueue's pod-set topology annotation (key, node label of the level); None: the flavor has no topology.
    topology: tuple[str, str] | None = None
    #: Make-before-break's reservation taint key, tolerated from the start by a gang Kueue places by topology:
    #: Kueue pins its pods to the nodes it assigns, and reads a node tainted against the Workload's own pod sets
    #: as failed (TASReplaceNodeOnNodeTaints) once a pod stops, which would evict a gang restarting in place.
    reservation_key: str | None = None

    def __post_init__(self) -> None:
        if self.topology is not None and self.topology[0] not in (PODSET_REQUIRED_TOPOLOGY, PODSET_PREFERRED_TOPOLOGY):
            raise ValueError(f"JobContext.topology: {self.topology[0]!r} is not Kueue's required or preferred key")
        if self.checkpoint_interval_seconds < 1:
            raise ValueError("JobContext.checkpoint_interval_seconds: must be at least 1")
        if self.max_restarts_per_hour < 1 or self.max_restarts < 0:
            raise ValueError("JobContext: max_restarts_per_hour must be at least 1, max_restarts not negative")
        if self.node_lost_toleration_seconds < 1 or self.nccl_heartbeat_timeout_seconds < 1:
            raise ValueError("JobContext: node_lost_toleration_seconds and nccl_heartbeat_timeout_seconds must be >= 1")
        if self.flight_recorder_entries < 0:
            raise ValueError("JobContext.flight_recorder_entries: must not be negative")


def job_context(spec: JobSpec, stack: StackConfig, interval: Interval) -> JobContext:
    """The context of a spec that passed :func:`components.training.checks.check_spec` against ``stack``."""
    team = team_of(spec, stack)
    if team is None:
        raise ValueError(f"spec.team: no team {spec.team!r} in the stack (check the spec first)")
    offered = [f for f in queue_flavors(spec, stack) if spec.flavor in (None, f.name)]
    gpu_resource = offered[0].gpu_resource if offered else GPU_RESOURCE
    fabrics = {f.fabric.model_dump_json() if f.fabric else "" for f in offered}
    if len(fabrics) > 1:
        raise ValueError("spec.flavor: the team's flavors have different fabrics; name one (check the spec first)")
    training = stack.training
    topology = topology_annotation(spec, stack)
    mbb = stack.controller(MAKE_BEFORE_BREAK)
    return JobContext(
        topology=topology,
        reservation_key=mbb.reservation_key if topology is not None and mbb.enabled else None,
        namespace=team.namespace,
        local_queue=team.local_queue,
        pod_priority_class=stack.priorities.pod.training.name,
        checkpoint_interval_seconds=interval.seconds,
        checkpoint_write_seconds=interval.write_seconds,
        max_restarts_per_hour=spec.max_restarts_per_hour or training.max_restarts_per_hour,
        max_restarts=spec.max_restarts if spec.max_restarts is not None else training.max_restarts,
        gpu_resource=gpu_resource,
        node_lost_toleration_seconds=math.ceil(parse_duration(training.node_lost_toleration)),
        nccl_heartbeat_timeout_seconds=math.ceil(parse_duration(training.nccl_heartbeat_timeout)),
        flight_recorder_entries=training.flight_recorder_entries,
        fabric=offered[0].fabric if offered else None,
    )


def topology_annotation(spec: JobSpec, stack: StackConfig) -> tuple[str, str] | None:
    """Kueue's pod-set annotation for the job's placement: the spec's level, or the topology's default as
    preferred; None when its flavors are placed by no topology."""
    if len({f.topology for f in queue_flavors(spec, stack) if spec.flavor in (None, f.name)}) > 1:
        raise ValueError("spec.flavor: the team's flavors have different topologies; name one (check the spec first)")
    topology = landing_topology(spec, stack)
    if topology is None:
        return None
    level = spec.topology.level if spec.topology is not None else topology.default
    label = topology.label_of(level)
    if label is None:
        raise ValueError(f"spec.topology: no level {level!r} in topology {topology.name!r} (check the spec first)")
    strict = spec.topology is not None and spec.topology.strict
    return (PODSET_REQUIRED_TOPOLOGY if strict else PODSET_PREFERRED_TOPOLOGY, label)


def leader_host(name: str) -> str:
    """The leader pod's stable name: JobSet names pod 0 of Job 0 ``<jobset>-<replicatedJob>-0-0`` and, with
    ``network.enableDNSHostnames``, publishes it in the headless Service ``<subdomain>`` of the JobSet's namespace
    (resolved from the pod's own namespace by the short name ``<pod>.<subdomain>``)."""
    return f"{name}-{REPLICATED_JOB}-0-0.{name}"


def launcher_env(spec: JobSpec) -> list[dict[str, Any]]:
    """What PyTorch's launcher (``torchrun``) needs to form the gang, in its own environment form (``PET_`` and
    the option's name: every ``torchrun`` option defaults to it): this pod's node rank is its completion index, the
    static rendezvous is hosted by rank 0 on the leader's stable name, and ``torchrun`` never restarts workers
    itself (the JobSet restarts the whole gang, ``failure_policy``). ``MASTER_ADDR``/``MASTER_PORT`` serve
    launchers that read the ``env://`` form instead."""
    leader = leader_host(spec.name)
    node_rank = {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']"}}
    return [
        {"name": "PET_NNODES", "value": str(spec.nodes)},
        {"name": "PET_NPROC_PER_NODE", "value": str(spec.gpus_per_node)},
        {"name": "PET_NODE_RANK", "valueFrom": node_rank},
        {"name": "PET_RDZV_BACKEND", "value": "static"},
        {"name": "PET_RDZV_ENDPOINT", "value": f"{leader}:{MASTER_PORT}"},
        {"name": "PET_MAX_RESTARTS", "value": "0"},
        {"name": "MASTER_ADDR", "value": leader},
        {"name": "MASTER_PORT", "value": str(MASTER_PORT)},
    ]


def job_env(spec: JobSpec, ctx: JobContext) -> list[dict[str, Any]]:
    """The environment the trainer gets: the package's names and the launcher's first, then PyTorch's fail-loud
    defaults and the fabric's NCCL settings (each unless the spec sets it), then the spec's own (sorted)."""
    name = spec.name
    ours = {
        "GPUCLUSTER_JOB_NAME": name,
        "GPUCLUSTER_CHECKPOINT_DIR": job_directory(name),
        "GPUCLUSTER_DATASETS_DIR": DATASETS_MOUNT,
        "GPUCLUSTER_CHECKPOINT_INTERVAL_SECONDS": str(ctx.checkpoint_interval_seconds),
        "GPUCLUSTER_CHECKPOINT_ANNOTATION": f"{CHECKPOINT_ANNOTATION_PREFIX}{name}",
        "GPUCLUSTER_VERIFIED_ANNOTATION": f"{VERIFIED_ANNOTATION_PREFIX}{name}",
        "GPUCLUSTER_RESUME_FILE": RESUME_FILE,
        "GPUCLUSTER_PROGRESS_ANNOTATION": f"{PROGRESS_ANNOTATION_PREFIX}{name}",
        "GPUCLUSTER_NODES": str(spec.nodes),
        "GPUCLUSTER_GPUS_PER_NODE": str(spec.gpus_per_node),
    }
    attempt = {
        "name": RESTART_ATTEMPT_ENV,
        "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{JOBSET_RESTART_ATTEMPT_LABEL}']"}},
    }
    fabric = ctx.fabric.nccl_settings() if ctx.fabric else {}
    own = set(spec.env) | set(spec.secret_env)
    defaults = {k: v for k, v in (nccl_env(name, ctx) | fabric).items() if k not in own}
    secret = {k: {"secretKeyRef": {"name": r.secret, "key": r.key}} for k, r in spec.secret_env.items()}
    return [
        *({"name": k, "value": v} for k, v in ours.items()),
        *launcher_env(spec),
        attempt,
        *({"name": k, "value": v} for k, v in defaults.items()),
        *({"name": k, "value": spec.env[k]} for k in sorted(spec.env)),
        *({"name": k, "valueFrom": secret[k]} for k in sorted(secret)),
    ]


def secret_files(spec: JobSpec) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The volumes and read-only mounts of ``spec.secretFiles``: each Secret at ``SECRET_FILES_DIR/<name>``, its
    files readable by their owner only."""
    volumes = [
        {"name": f"secret-{i}", "secret": {"secretName": name, "defaultMode": 0o400}}
        for i, name in enumerate(spec.secret_files)
    ]
    mounts = [
        {"name": f"secret-{i}", "mountPath": f"{SECRET_FILES_DIR}/{name}", "readOnly": True}
        for i, name in enumerate(spec.secret_files)
    ]
    return volumes, mounts


def nccl_env(name: str, ctx: JobContext) -> dict[str, str]:
    """PyTorch's NCCL process group set to fail loudly rather than hang (``torch_nccl_environment_variables``):
    on a watchdog error or timeout the process is torn down without aborting the communicator (which can hang on
    a broken fabric itself), a watchdog stuck in a CUDA or NCCL call is aborted after the heartbeat timeout, and
    each rank's flight recorder is dumped to the job's checkpoint volume, one file per restart attempt and rank.
    PyTorch reads the flight recorder's settings under its older ``TORCH_NCCL_`` names and, from 2.7, its
    ``TORCH_FR_`` ones; both are set."""
    env = {
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3",
        "TORCH_NCCL_ENABLE_MONITORING": "1",
        "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": str(ctx.nccl_heartbeat_timeout_seconds),
    }
    if ctx.flight_recorder_entries > 0:
        dump = f"{CHECKPOINTS_MOUNT}/{name}.flight-recorder.attempt-$({RESTART_ATTEMPT_ENV}).rank-"
        env |= {
            "TORCH_NCCL_TRACE_BUFFER_SIZE": str(ctx.flight_recorder_entries),
            "TORCH_FR_BUFFER_SIZE": str(ctx.flight_recorder_entries),
            "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
            "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": dump,
            "TORCH_FR_DUMP_TEMP_FILE": dump,
        }
    return env


def reservation_toleration(key: str) -> dict[str, Any]:
    """What every training pod Kueue places by topology needs while make-before-break is on (``JobContext.
    reservation_key``): any reservation tolerated, since Kueue pins the pod to its assigned node anyway. A gang's
    Workload that lacks it sees its own reserved nodes as failed once its pods stop (a restart, or the end), and
    Kueue evicts it."""
    return {"key": key, "operator": "Exists", "effect": "NoSchedule"}


def node_lost_tolerations(seconds: int) -> list[dict[str, Any]]:
    """Leave a not-ready or unreachable node after ``seconds``, not the API server's default 300: the taint
    eviction marks the pod DisruptionTarget, a node fault, and the gang restarts without it."""
    return [
        {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}
        for key in (NODE_NOT_READY_TAINT, NODE_UNREACHABLE_TAINT)
    ]


def pod_failure_policy() -> dict[str, Any]:
    """The node's fault first (a pod with DisruptionTarget), then the program's (any non-zero exit)."""
    return {
        "rules": [
            {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
            {"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [0]}},
        ]
    }


def failure_policy(max_restarts: int) -> dict[str, Any]:
    """Recreate the gang in place on either fault; only the program's count towards ``maxRestarts``."""
    return {
        "maxRestarts": max_restarts,
        "restartStrategy": "Recreate",
        "rules": [
            {
                "name": "NodeFault",
                "action": "RestartJobSetAndIgnoreMaxRestarts",
                "onJobFailureReasons": ["PodFailurePolicy"],
                "onJobFailureMessagePatterns": [NODE_FAULT_MESSAGE],
            },
            {
                "name": "ProgramFault",
                "action": "RestartJobSet",
                "onJobFailureReasons": ["PodFailurePolicy", "BackoffLimitExceeded"],
            },
        ],
    }


def jobset_manifest(spec: JobSpec, ctx: JobContext) -> dict[str, Any]:
    """The whole JobSet object (apiVersion, kind, metadata, spec) for ``spec`` in ``ctx``."""
    name = spec.name
    ours = {TRAINING_JOB_LABEL: name, TEAM_LABEL: spec.team}
    fabric = ctx.fabric
    devices = {ctx.gpu_resource: str(spec.gpus_per_node)}
    if fabric is not None and fabric.rdma and fabric.rdma_resource:
        devices[fabric.rdma_resource] = str(fabric.rdma_per_pod)
    secret_volumes, secret_mounts = secret_files(spec)
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": spec.image,
        "command": list(spec.command),
        "args": list(spec.args),
        "env": job_env(spec, ctx),
        "resources": {"requests": dict(devices), "limits": dict(devices)},
        "volumeMounts": [
            {"name": CHECKPOINT_CLAIM, "mountPath": CHECKPOINTS_MOUNT},
            {"name": DATASETS_CLAIM, "mountPath": DATASETS_MOUNT, "readOnly": True},
            {"name": SHM_VOLUME, "mountPath": SHM_MOUNT},
            {"name": RESUME_VOLUME, "mountPath": RESUME_DIR, "readOnly": True},
            *secret_mounts,
        ],
    }
    if fabric is not None and fabric.rdma:
        # The verbs library pins the memory it registers with the HCA.
        container["securityContext"] = {"capabilities": {"add": [RDMA_CAPABILITY]}}
    shm_size = fabric.shm_size if fabric is not None else DEFAULT_SHM_SIZE
    annotations = {**(fabric.pod_annotations if fabric is not None else {}), **spec.pod_annotations}
    if ctx.topology is not None:
        # On the pod template of the replicatedJob: Kueue reads a JobSet's pod-set annotations there.
        key, label = ctx.topology
        annotations[key] = label
    pod_spec: dict[str, Any] = {
        # podFailurePolicy needs it: a failed container fails its pod, and the policy decides.
        "restartPolicy": "Never",
        "priorityClassName": ctx.pod_priority_class,
        # May annotate the team's checkpoints claim with the checkpoint report (components/storage.py grants it).
        "serviceAccountName": TRAINER_SERVICE_ACCOUNT,
        "containers": [container],
        "tolerations": [
            *node_lost_tolerations(ctx.node_lost_toleration_seconds),
            *([reservation_toleration(ctx.reservation_key)] if ctx.reservation_key else []),
        ],
        "volumes": [
            {"name": CHECKPOINT_CLAIM, "persistentVolumeClaim": {"claimName": CHECKPOINT_CLAIM}},
            {"name": DATASETS_CLAIM, "persistentVolumeClaim": {"claimName": DATASETS_CLAIM, "readOnly": True}},
            # NCCL's intra-node transport and DataLoader workers use shared memory; the runtime's default is 64 MiB.
            {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": shm_size}},
            # Where a restart resumes: the job's latest verified checkpoint, kept by the checkpoint verifier; no
            # file until one is (optional: the pod starts without it).
            {
                "name": RESUME_VOLUME,
                "configMap": {
                    "name": RESUME_CONFIGMAP,
                    "optional": True,
                    "items": [{"key": resume_key(name), "path": RESUME_FILE.rsplit("/", 1)[1]}],
                },
            },
            *secret_volumes,
        ],
    }
    job_spec = {
        "parallelism": spec.nodes,
        "completions": spec.nodes,
        "completionMode": "Indexed",
        "backoffLimit": 0,
        "podFailurePolicy": pod_failure_policy(),
        "template": {
            "metadata": {
                "labels": dict(ours),
                **({"annotations": annotations} if annotations else {}),
            },
            "spec": pod_spec,
        },
    }
    return {
        "apiVersion": JOBSET_API_VERSION,
        "kind": JOBSET_KIND,
        "metadata": {
            "name": name,
            "namespace": ctx.namespace,
            "labels": {
                **ctx.labels,
                QUEUE_LABEL: ctx.local_queue,
                PRIORITY_LABEL: spec.priority,
                **ours,
            },
            "annotations": {
                CHECKPOINT_INTERVAL_ANNOTATION: str(ctx.checkpoint_interval_seconds),
                CHECKPOINT_WRITE_ANNOTATION: f"{ctx.checkpoint_write_seconds:g}",
                MAX_RESTARTS_PER_HOUR_ANNOTATION: str(ctx.max_restarts_per_hour),
                **({STALL_AFTER_ANNOTATION: f"{parse_duration(spec.stall_after):g}"} if spec.stall_after else {}),
            },
        },
        "spec": {
            "network": {"enableDNSHostnames": True, "subdomain": name, "publishNotReadyAddresses": True},
            "successPolicy": {"operator": "All"},
            "startupPolicy": {"startupPolicyOrder": "AnyOrder"},
            "failurePolicy": failure_policy(ctx.max_restarts),
            "suspend": True,
            "replicatedJobs": [{"name": REPLICATED_JOB, "replicas": 1, "template": {"spec": job_spec}}],
        },
    }
