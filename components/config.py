"""One validated model of a whole stack, and the offline checker for stack files.

A stack file (``stacks/Pulumi.<stack>.yaml``) holds its settings under ``config:`` as ``gpucluster:<key>``. The
same settings reach the program through the Pulumi engine at ``pulumi up``; both paths end in
:func:`parse_stack_config`, which either returns a :class:`StackConfig` or raises :class:`StackConfigError`
listing *every* problem it found, each with its key path, the offending value and why it is wrong. Nothing is
registered with the engine before the whole config is known to be valid.

Offline use (pre-commit, CI)::

    python -m components.config check stacks/Pulumi.prod.yaml [more files ...]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import pulumi
import yaml
from pulumi.runtime import config as runtime_config
from pydantic import Field, TypeAdapter, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from components.charts import ChartSource
from components.inference import InferenceServiceSpec
from components.model import (
    ConfigModel,
    DnsLabel,
    Duration,
    SemVer,
    Toleration,
    check_labels,
    check_qualified_name,
)
from components.telemetry.settings import TelemetrySettings
from daemons.burst_provider.settings import BurstSettings
from daemons.taint_controller.settings import TaintControllerSettings

PROJECT = "gpucluster"
PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_BURST_TAINT_KEY = "gpucluster.io/in-cluster-capacity"
KUEUE_CHART_VERSION = "0.17.0"
#: Largest value a user-defined Kubernetes PriorityClass may take (bigger values are reserved for the system).
MAX_USER_PRIORITY = 1_000_000_000

_QUANTITY = re.compile(r"^\d+(\.\d+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")


# ----------------------------------------------------------------------------------------------------
# Sections
# ----------------------------------------------------------------------------------------------------


class GpuFlavor(ConfigModel):
    """One kind of GPU node: becomes a Kueue ResourceFlavor and a quota column in every ClusterQueue."""

    name: DnsLabel
    node_labels: Annotated[dict[str, str], Field(min_length=1)]
    gpus_per_node: Annotated[int, Field(ge=1, le=16)]
    node_count: Annotated[int, Field(ge=1, le=10_000)]
    gpu_resource: str = "nvidia.com/gpu"
    tolerations: list[Toleration] = []

    @field_validator("node_labels")
    @classmethod
    def _labels(cls, v: dict[str, str]) -> dict[str, str]:
        return check_labels(v)

    @field_validator("gpu_resource")
    @classmethod
    def _resource(cls, v: str) -> str:
        return check_qualified_name(v, "resource name")

    @property
    def capacity(self) -> int:
        """GPUs the flavor declares: nodes x GPUs per node."""
        return self.gpus_per_node * self.node_count


class ClusterQueueSpec(ConfigModel):
    """A Kueue ClusterQueue in the cohort: GPU quota per flavor, optional borrowing limits."""

    quota: Annotated[dict[str, Annotated[int, Field(ge=0)]], Field(min_length=1)]
    borrowing_limit: dict[str, Annotated[int, Field(ge=0)]] = {}
    queueing_strategy: Literal["BestEffortFIFO", "StrictFIFO"] = "BestEffortFIFO"


class Team(ConfigModel):
    """A research team: a namespace that only submits, through a LocalQueue onto a ClusterQueue."""

    name: DnsLabel
    namespace: DnsLabel
    cluster_queue: DnsLabel
    local_queue: DnsLabel = "training"


class WorkloadPriority(ConfigModel):
    name: DnsLabel
    value: Annotated[int, Field(ge=-MAX_USER_PRIORITY, le=MAX_USER_PRIORITY)]
    description: str = ""


class PodPriority(ConfigModel):
    name: DnsLabel
    value: Annotated[int, Field(ge=-MAX_USER_PRIORITY, le=MAX_USER_PRIORITY)]
    preemption_policy: Literal["PreemptLowerPriority", "Never"] = "PreemptLowerPriority"
    description: str = ""


class PodPriorities(ConfigModel):
    training: PodPriority
    inference: PodPriority


class Priorities(ConfigModel):
    """Two tiers: Kueue WorkloadPriorityClasses order research workloads (listed highest first); Kubernetes
    PriorityClasses make the scheduler put training above inference."""

    workload: Annotated[list[WorkloadPriority], Field(min_length=1)]
    pod: PodPriorities


class WaitForPodsReady(ConfigModel):
    """Kueue's all-or-nothing gate: a gang that cannot get every pod ready in time is evicted and requeued."""

    enable: bool = True
    timeout: Duration = "10m"
    recovery_timeout: Duration | None = "3m"
    block_admission: bool = True
    backoff_base_seconds: Annotated[int, Field(ge=1)] = 60
    backoff_max_seconds: Annotated[int, Field(ge=1)] = 3600


class LocalWebhooks(ConfigModel):
    """Local-stack only: serve Kueue's admission webhooks from a controller running outside the cluster."""

    url: Annotated[str, Field(pattern=r"^https://(127\.0\.0\.1|localhost|\[::1\]):\d+$")]
    ca_bundle_file: str


class KueueSettings(ConfigModel):
    chart_version: SemVer = KUEUE_CHART_VERSION
    chart: ChartSource = ChartSource(oci="oci://registry.k8s.io/kueue/charts/kueue")
    namespace: DnsLabel = "kueue-system"
    wait_for_pods_ready: WaitForPodsReady = WaitForPodsReady()
    local_webhooks: LocalWebhooks | None = None
    extra_values: dict[str, Any] = {}


class DeschedulerSettings(ConfigModel):
    """The gradual return of inference from the virtual node: bounded evictions every interval."""

    enabled: bool = True
    chart_version: SemVer = "0.36.0"
    chart: ChartSource = ChartSource(repo="https://kubernetes-sigs.github.io/descheduler/", name="descheduler")
    namespace: DnsLabel = "kube-system"
    interval: Duration = "1m"
    max_pods_to_evict_per_node: Annotated[int, Field(ge=1, le=100)] = 2
    max_pods_to_evict_total: Annotated[int, Field(ge=1, le=1000)] = 4
    max_pods_to_evict_per_namespace: Annotated[int, Field(ge=1, le=1000)] | None = None
    #: Limits the nodes the descheduler sees. Unset on purpose: it skips a cycle when it sees fewer than two
    #: nodes, and nodeFit looks for room only among the nodes it sees, so selecting just the virtual node would
    #: make it do nothing. Only the virtual node ever carries the burst taint, so includedTaints already confines
    #: the evictions to it.
    node_selector: str | None = None
    #: Evict a pod only when it fits on another node, so a replica leaves only when it has somewhere to go.
    node_fit: bool = True


StorageDriver = Literal["lustre", "weka", "vast", "gpfs", "nfs"]


class Claim(ConfigModel):
    size: str
    read_only: bool = False

    @field_validator("size")
    @classmethod
    def _size(cls, v: str) -> str:
        if not _QUANTITY.match(v) or float(re.sub(r"[A-Za-z]+$", "", v)) <= 0:
            raise ValueError(f"{v!r} is not a positive Kubernetes quantity such as 50Ti")
        return v


class Checkpointing(ConfigModel):
    """Inputs of the Young/Daly checkpoint cadence."""

    size_tb: Annotated[float, Field(gt=0)] = 1.0
    write_seconds: Annotated[float, Field(gt=0)] = 30.0
    mtbf_hours: Annotated[float, Field(gt=0)] = 8.0


class StorageSettings(ConfigModel):
    """A parallel filesystem reached through its CSI driver; one RWX checkpoint and dataset claim per team."""

    driver: StorageDriver
    provisioner: Annotated[str, Field(min_length=3)]
    mode: Literal["dynamic", "static"] = "dynamic"
    storage_class_name: DnsLabel = "parallel-fs"
    parameters: dict[str, str] = {}
    mount_options: list[str] = []
    #: static mode: the CSI volumeHandle of each PV is ``<volumeHandlePrefix>/<namespace>/<claim>``.
    volume_handle_prefix: str | None = None
    volume_attributes: dict[str, str] = {}
    checkpoints: Claim = Claim(size="50Ti")
    datasets: Claim = Claim(size="200Ti", read_only=True)
    checkpointing: Checkpointing = Checkpointing()


#: Parameters each driver's StorageClass cannot work without (dynamic provisioning).
_DRIVER_PARAMETERS: dict[str, tuple[str, ...]] = {"nfs": ("server", "share")}


@dataclass(frozen=True)
class BurstConfig:
    """``gpucluster:burst``: the provider service's settings and the taint controller's, both complete.

    ``settings`` is exactly what the provider service reads (the VirtualNode component renders it); the taint
    controller's runtime fields (``nodeName``, ``taintKey``, ``inferenceNamespaces``) are filled from the virtual
    node and the stack, so the two daemons can never disagree about the node or the taint.
    """

    settings: BurstSettings
    taint_controller: TaintControllerSettings

    @property
    def enabled(self) -> bool:
        return self.settings.enabled

    @property
    def capacity(self) -> int:
        """GPUs the virtual node advertises: the sum of the providers' caps."""
        return sum(p.max_gpus for p in self.settings.providers)

    def secret_paths(self) -> dict[str, str]:
        """Each secret config key the providers name -> the key path that names it (first one wins)."""
        out: dict[str, str] = {}
        for i, p in enumerate(self.settings.providers):
            if p.runpod is not None:
                out.setdefault(p.runpod.api_key_secret, f"burst.providers[{i}].runpod.apiKeySecret")
            if p.kubernetes is not None:
                out.setdefault(p.kubernetes.kubeconfig_secret, f"burst.providers[{i}].kubernetes.kubeconfigSecret")
        return out


# ----------------------------------------------------------------------------------------------------
# The whole stack
# ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StackConfig:
    """The validated settings of one stack, each section typed."""

    environment: str
    cluster_name: str
    cohort: str
    burst_taint_key: str
    flavors: tuple[GpuFlavor, ...]
    queues: Mapping[str, ClusterQueueSpec]
    teams: tuple[Team, ...]
    inference_namespaces: tuple[str, ...]
    priorities: Priorities
    kueue: KueueSettings
    descheduler: DeschedulerSettings
    storage: StorageSettings
    telemetry: TelemetrySettings
    #: None when the stack has no ``gpucluster:burst`` section.
    burst: BurstConfig | None = None
    inference_services: tuple[InferenceServiceSpec, ...] = ()

    @property
    def burst_enabled(self) -> bool:
        return self.burst is not None and self.burst.enabled

    @property
    def provider_secret_names(self) -> tuple[str, ...]:
        """The secret config keys the burst providers read (none while bursting is off)."""
        return tuple(sorted(self.burst.secret_paths())) if self.burst is not None and self.burst.enabled else ()

    def flavor(self, name: str) -> GpuFlavor:
        return next(f for f in self.flavors if f.name == name)

    @property
    def total_gpus(self) -> int:
        return sum(f.capacity for f in self.flavors)

    @property
    def training_namespaces(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(t.namespace for t in self.teams))


@dataclass(frozen=True)
class ConfigIssue:
    """One problem in a stack config: where, what was there, why it is wrong."""

    path: str
    value: Any
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


class StackConfigError(ValueError):
    """Raised with every problem of a stack config at once."""

    def __init__(self, issues: Sequence[ConfigIssue], source: str = "stack config") -> None:
        self.issues = list(issues)
        self.source = source
        lines = "\n".join(f"  - {issue}" for issue in self.issues)
        super().__init__(f"{source}: {len(self.issues)} problem(s)\n{lines}")


_MISSING = object()
_Section = tuple[str, Any, Any]  # key, type adapter or None (scalar str), default or _MISSING


def _adapter(tp: Any) -> TypeAdapter[Any]:
    return TypeAdapter(tp)


_SECTIONS: dict[str, tuple[TypeAdapter[Any], Any]] = {
    "environment": (_adapter(DnsLabel), _MISSING),
    "clusterName": (_adapter(DnsLabel), _MISSING),
    "cohort": (_adapter(DnsLabel), "research"),
    "burstTaintKey": (_adapter(str), DEFAULT_BURST_TAINT_KEY),
    "flavors": (_adapter(Annotated[list[GpuFlavor], Field(min_length=1)]), _MISSING),
    "queues": (_adapter(Annotated[dict[DnsLabel, ClusterQueueSpec], Field(min_length=1)]), _MISSING),
    "teams": (_adapter(Annotated[list[Team], Field(min_length=1)]), _MISSING),
    "inferenceNamespaces": (_adapter(Annotated[list[DnsLabel], Field(min_length=1)]), _MISSING),
    "priorities": (_adapter(Priorities), _MISSING),
    "kueue": (_adapter(KueueSettings), {}),
    "descheduler": (_adapter(DeschedulerSettings), {}),
    "storage": (_adapter(StorageSettings), _MISSING),
    "telemetry": (_adapter(TelemetrySettings), {}),
    "inferenceServices": (_adapter(list[InferenceServiceSpec]), []),
}
#: Validated by :func:`_parse_burst`: two daemons' models share the section.
BURST_KEY = "burst"
_BURST_SETTINGS = _adapter(BurstSettings)
_TAINT_CONTROLLER = _adapter(TaintControllerSettings)
_TAINT_CONTROLLER_KEY = "taintController"
#: Fields of the taint controller's settings the component fills; the stack does not set them.
_TAINT_CONTROLLER_FILLED = {"nodeName": "burst.virtualNode.nodeName", "taintKey": "gpucluster:burstTaintKey"}
_KEY_PATH = re.compile(r"^([A-Za-z]\w*(?:\[\d+\])?(?:\.[A-Za-z]\w*(?:\[\d+\])?)*): (.+)$")


def _loc_to_path(section: str, loc: Iterable[int | str]) -> str:
    path = section
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{to_camel(part) if '_' in part else part}"
    return path


def _value_at(value: Any, loc: Iterable[int | str]) -> Any:
    for part in loc:
        try:
            value = value[part]
        except (KeyError, IndexError, TypeError):
            return None
    return value


def _pydantic_issues(section: str, raw: Any, err: ValidationError) -> list[ConfigIssue]:
    issues = []
    for e in err.errors(include_url=False):
        # Model-level validators report at their model; drop pydantic's internal union/function tags.
        loc = [p for p in e["loc"] if not (isinstance(p, str) and ("[" in p or p.startswith("function-")))]
        reason = e["msg"].removeprefix("Value error, ")
        if e["type"] == "missing":
            reason = "required key is missing"
        elif e["type"] == "extra_forbidden":
            reason = "unknown key (check the spelling against README's config reference)"
        value = e.get("input") if e["type"] != "missing" else None
        if e["type"] not in ("missing", "extra_forbidden", "value_error") and not isinstance(value, (dict, list)):
            reason = f"{reason} (got {value!r})"
        issues.append(ConfigIssue(_loc_to_path(section, loc), value, reason))
    return issues


def _semantic_issues(v: Mapping[str, Any]) -> list[ConfigIssue]:
    """Rules that span sections. Each runs only when the sections it reads validated on their own."""
    issues: list[ConfigIssue] = []
    add = issues.append
    flavors: list[GpuFlavor] | None = v.get("flavors")
    queues: dict[str, ClusterQueueSpec] | None = v.get("queues")
    teams: list[Team] | None = v.get("teams")
    priorities: Priorities | None = v.get("priorities")
    inference_ns: list[str] | None = v.get("inferenceNamespaces")

    if flavors is not None:
        seen: set[str] = set()
        for i, f in enumerate(flavors):
            if f.name in seen:
                add(ConfigIssue(f"flavors[{i}].name", f.name, f"flavor {f.name!r} is declared twice"))
            seen.add(f.name)
        label_sets: dict[tuple[tuple[str, str], ...], str] = {}
        for i, f in enumerate(flavors):
            key = tuple(sorted(f.node_labels.items()))
            if key in label_sets and label_sets[key] != f.name:
                add(
                    ConfigIssue(
                        f"flavors[{i}].nodeLabels",
                        f.node_labels,
                        f"same node labels as flavor {label_sets[key]!r}: Kueue could not tell their nodes apart",
                    )
                )
            label_sets.setdefault(key, f.name)

    if flavors is not None and queues is not None:
        capacity = {f.name: f.capacity for f in flavors}
        totals: dict[str, int] = {}
        for qname, q in queues.items():
            for fname, gpus in q.quota.items():
                path = f"queues.{qname}.quota.{fname}"
                if fname not in capacity:
                    add(ConfigIssue(path, gpus, f"unknown flavor {fname!r} (declared: {sorted(capacity)})"))
                    continue
                if gpus > capacity[fname]:
                    add(
                        ConfigIssue(
                            path,
                            gpus,
                            f"{gpus} exceeds the {capacity[fname]} GPUs the {fname} flavor declares",
                        )
                    )
                totals[fname] = totals.get(fname, 0) + gpus
            for fname in q.borrowing_limit:
                if fname not in q.quota:
                    add(
                        ConfigIssue(
                            f"queues.{qname}.borrowingLimit.{fname}",
                            q.borrowing_limit[fname],
                            f"borrowing limit for {fname!r}, which has no quota in this queue",
                        )
                    )
        for fname, total in totals.items():
            contributing = [q for q in queues.values() if fname in q.quota]
            if len(contributing) > 1 and total > capacity[fname]:
                add(
                    ConfigIssue(
                        f"queues.*.quota.{fname}",
                        total,
                        f"the queues' nominal quotas add up to {total}, more than the {capacity[fname]} "
                        f"{fname} GPUs declared",
                    )
                )

    if teams is not None:
        names: set[str] = set()
        for i, t in enumerate(teams):
            if t.name in names:
                add(ConfigIssue(f"teams[{i}].name", t.name, f"team {t.name!r} is declared twice"))
            names.add(t.name)
            if queues is not None and t.cluster_queue not in queues:
                add(
                    ConfigIssue(
                        f"teams[{i}].clusterQueue",
                        t.cluster_queue,
                        f"no ClusterQueue named {t.cluster_queue!r} in queues (have: {sorted(queues)})",
                    )
                )
            if inference_ns is not None and t.namespace in inference_ns:
                add(
                    ConfigIssue(
                        f"teams[{i}].namespace",
                        t.namespace,
                        "is also an inference namespace: training and inference must not share a namespace",
                    )
                )
        ns_queues: dict[tuple[str, str], str] = {}
        for i, t in enumerate(teams):
            nsq = (t.namespace, t.local_queue)
            if nsq in ns_queues and ns_queues[nsq] != t.cluster_queue:
                add(
                    ConfigIssue(
                        f"teams[{i}].localQueue",
                        t.local_queue,
                        f"LocalQueue {t.local_queue!r} in {t.namespace!r} already points at {ns_queues[nsq]!r}",
                    )
                )
            ns_queues.setdefault(nsq, t.cluster_queue)

    if inference_ns is not None and len(set(inference_ns)) != len(inference_ns):
        add(ConfigIssue("inferenceNamespaces", inference_ns, "lists a namespace twice"))

    if priorities is not None:
        train, infer = priorities.pod.training, priorities.pod.inference
        if train.value <= infer.value:
            add(
                ConfigIssue(
                    "priorities.pod.training.value",
                    train.value,
                    f"training priority {train.value} must be above inference's {infer.value}: training always wins",
                )
            )
        if train.name == infer.name:
            add(ConfigIssue("priorities.pod.inference.name", infer.name, "same name as the training class"))
        wl = priorities.workload
        for i in range(1, len(wl)):
            if wl[i].value >= wl[i - 1].value:
                add(
                    ConfigIssue(
                        f"priorities.workload[{i}].value",
                        wl[i].value,
                        f"workload priorities are listed highest first: {wl[i].name!r} ({wl[i].value}) must be "
                        f"below {wl[i - 1].name!r} ({wl[i - 1].value})",
                    )
                )
        wl_names = [w.name for w in wl]
        for i, n in enumerate(wl_names):
            if n in wl_names[:i]:
                add(ConfigIssue(f"priorities.workload[{i}].name", n, f"{n!r} is declared twice"))

    desched: DeschedulerSettings | None = v.get("descheduler")
    if desched is not None and desched.max_pods_to_evict_per_node > desched.max_pods_to_evict_total:
        add(
            ConfigIssue(
                "descheduler.maxPodsToEvictPerNode",
                desched.max_pods_to_evict_per_node,
                f"{desched.max_pods_to_evict_per_node} exceeds maxPodsToEvictTotal "
                f"({desched.max_pods_to_evict_total}): the total bound would never apply",
            )
        )

    storage: StorageSettings | None = v.get("storage")
    if storage is not None:
        if storage.mode == "static" and not storage.volume_handle_prefix:
            add(
                ConfigIssue(
                    "storage.volumeHandlePrefix",
                    None,
                    "static mode needs it (the CSI volumeHandle of each PV)",
                )
            )
        if storage.mode == "dynamic" and storage.volume_handle_prefix:
            add(ConfigIssue("storage.volumeHandlePrefix", storage.volume_handle_prefix, "only applies to mode: static"))
        if storage.mode == "dynamic":
            for needed in _DRIVER_PARAMETERS.get(storage.driver, ()):
                if needed not in storage.parameters:
                    add(
                        ConfigIssue(
                            f"storage.parameters.{needed}",
                            None,
                            f"the {storage.driver} driver's StorageClass needs it",
                        )
                    )

    burst_key = v.get("burstTaintKey")
    if isinstance(burst_key, str):
        try:
            check_qualified_name(burst_key, "taint key")
        except ValueError as exc:
            add(ConfigIssue("burstTaintKey", burst_key, str(exc)))
    return issues


def _burst_model_issues(err: ValidationError, raw: Any) -> list[ConfigIssue]:
    """BurstSettings' issues under ``burst``; its cross-field rule names its keys in the text, lifted into paths."""
    issues = []
    for issue in _pydantic_issues(BURST_KEY, raw, err):
        if issue.path != BURST_KEY:
            issues.append(issue)
            continue
        for part in issue.reason.split("; "):
            m = _KEY_PATH.match(part)
            if m:
                issues.append(ConfigIssue(f"{BURST_KEY}.{m.group(1)}", None, m.group(2)))
            else:
                issues.append(ConfigIssue(BURST_KEY, None, part))
    return issues


def _parse_burst(raw: Any) -> tuple[BurstConfig | None, list[ConfigIssue]]:
    """``gpucluster:burst``: the provider service's model for the section, the taint controller's for
    ``taintController``, each problem with its key path."""
    if not isinstance(raw, Mapping):
        return None, [ConfigIssue(BURST_KEY, raw, f"expected a map with virtualNode and providers, got {raw!r}")]
    issues: list[ConfigIssue] = []
    burst_raw = {k: v for k, v in raw.items() if k != _TAINT_CONTROLLER_KEY}
    tc_raw = raw.get(_TAINT_CONTROLLER_KEY)
    tc_raw = {} if tc_raw is None else tc_raw
    settings: BurstSettings | None = None
    controller: TaintControllerSettings | None = None
    try:
        settings = _BURST_SETTINGS.validate_python(burst_raw)
    except ValidationError as err:
        issues.extend(_burst_model_issues(err, burst_raw))
    tc_path = f"{BURST_KEY}.{_TAINT_CONTROLLER_KEY}"
    if isinstance(tc_raw, Mapping):
        for key, origin in _TAINT_CONTROLLER_FILLED.items():
            if key in tc_raw:
                issues.append(ConfigIssue(f"{tc_path}.{key}", tc_raw[key], f"is filled from {origin}; do not set it"))
    try:
        controller = _TAINT_CONTROLLER.validate_python(tc_raw)
    except ValidationError as err:
        issues.extend(_pydantic_issues(tc_path, tc_raw, err))
    if settings is None or controller is None or issues:
        return None, issues
    filled: dict[str, Any] = {"node_name": settings.virtual_node.node_name}
    if "inference_namespaces" not in controller.model_fields_set:
        filled["inference_namespaces"] = list(settings.virtual_node.inference_namespaces)
    return BurstConfig(settings, controller.model_copy(update=filled)), []


def _burst_issues(
    burst: BurstConfig, v: Mapping[str, Any], raw: Mapping[str, Any], secret_keys: Collection[str] | None
) -> list[ConfigIssue]:
    """Rules between the burst section and the rest of the stack, and the provider secrets it names."""
    issues: list[ConfigIssue] = []
    add = issues.append
    inference_ns: list[str] | None = v.get("inferenceNamespaces")
    teams: list[Team] | None = v.get("teams")
    training_ns = {t.namespace for t in teams} if teams is not None else set()
    vn, tc = burst.settings.virtual_node, burst.taint_controller
    for path, ns in (("burst.virtualNode.namespace", vn.namespace), ("burst.taintController.namespace", tc.namespace)):
        if ns in training_ns or (inference_ns is not None and ns in inference_ns):
            add(
                ConfigIssue(
                    path, ns, "is a team or inference namespace: the burst daemons get a namespace of their own"
                )
            )
    if inference_ns is not None:
        for path, listed in (
            ("burst.virtualNode.inferenceNamespaces", vn.inference_namespaces),
            ("burst.taintController.inferenceNamespaces", tc.inference_namespaces),
        ):
            extra = sorted(set(listed) - set(inference_ns))
            if extra:
                add(ConfigIssue(path, listed, f"{extra} not in gpucluster:inferenceNamespaces ({inference_ns})"))
    burst_key = v.get("burstTaintKey")
    if isinstance(burst_key, str) and burst_key.startswith("virtual-kubelet.io/"):
        add(ConfigIssue("burstTaintKey", burst_key, "must differ from the virtual node's own taint key"))
    flavors: list[GpuFlavor] | None = v.get("flavors")
    if flavors is not None and tc.enabled:
        total = sum(f.capacity for f in flavors)
        if tc.high_mark > total:
            add(
                ConfigIssue(
                    "burst.taintController.highMark",
                    tc.high_mark,
                    f"{tc.high_mark} free GPUs can never happen with the {total} GPUs the flavors declare: "
                    "the burst taint would never go on",
                )
            )
    if not burst.enabled:
        return issues
    for name, path in burst.secret_paths().items():
        if name in _SECTIONS or name == BURST_KEY:
            add(ConfigIssue(path, name, f"{name!r} is a config section, not a secret config key"))
        elif name not in raw:
            add(
                ConfigIssue(
                    path,
                    name,
                    f"names the secret gpucluster:{name}, which this stack does not set "
                    f"(pulumi config set --secret {name} ...)",
                )
            )
        elif not _is_secret(name, raw[name], secret_keys):
            # Never echo the value: it is a credential in clear.
            add(ConfigIssue(name, None, f"gpucluster:{name} is in clear; set it with `pulumi config set --secret`"))
    return issues


def _is_secret(name: str, value: Any, secret_keys: Collection[str] | None) -> bool:
    """A stack file holds a secret as ``{secure: ...}``; the engine names its secret keys."""
    if isinstance(value, Mapping) and "secure" in value:
        return True
    return secret_keys is not None and f"{PROJECT}:{name}" in secret_keys


def _inference_issues(
    services: list[InferenceServiceSpec], v: Mapping[str, Any], burst: BurstConfig | None
) -> list[ConfigIssue]:
    issues: list[ConfigIssue] = []
    add = issues.append
    inference_ns: list[str] | None = v.get("inferenceNamespaces")
    teams: list[Team] | None = v.get("teams")
    training_ns = {t.namespace: t.name for t in teams} if teams is not None else {}
    seen: set[tuple[str, str]] = set()
    offered = burst.settings.gpu_types() if burst is not None and burst.enabled else None
    for i, svc in enumerate(services):
        path = f"inferenceServices[{i}]"
        if svc.namespace in training_ns:
            add(
                ConfigIssue(
                    f"{path}.namespace",
                    svc.namespace,
                    f"is team {training_ns[svc.namespace]!r}'s training namespace: inference never runs there",
                )
            )
        elif inference_ns is not None and svc.namespace not in inference_ns:
            add(ConfigIssue(f"{path}.namespace", svc.namespace, f"is not an inference namespace ({inference_ns})"))
        if (svc.namespace, svc.name) in seen:
            add(ConfigIssue(f"{path}.name", svc.name, f"{svc.namespace}/{svc.name} is declared twice"))
        seen.add((svc.namespace, svc.name))
        if offered is not None and svc.gpu_type is not None and svc.gpu_type not in offered:
            add(
                ConfigIssue(
                    f"{path}.gpuType",
                    svc.gpu_type,
                    f"no burst provider offers {svc.gpu_type!r} (offered: {list(offered)})",
                )
            )
    return issues


def parse_stack_config(
    raw: Mapping[str, Any], source: str = "stack config", secret_keys: Collection[str] | None = None
) -> StackConfig:
    """Validate the ``gpucluster:*`` settings (keys without the project prefix) and build the model.

    Keys that are not sections must be the provider secrets the burst section names, and secret: ``{secure:}``
    in a stack file, or listed in ``secret_keys`` (full ``gpucluster:<name>`` keys, as the engine reports them).
    Raises :class:`StackConfigError` with every problem found; never returns a partly valid config.
    """
    issues: list[ConfigIssue] = []
    values: dict[str, Any] = {}
    burst: BurstConfig | None = None
    if raw.get(BURST_KEY) is not None:
        burst, burst_problems = _parse_burst(raw[BURST_KEY])
        issues.extend(burst_problems)
    secret_names = set(burst.secret_paths()) if burst is not None and burst.enabled else set()
    known = [*_SECTIONS, BURST_KEY]
    for key in sorted(set(raw) - set(known) - secret_names):
        # The value is not echoed: an unknown key may well be a secret the burst section does not name.
        issues.append(ConfigIssue(f"{key}", None, f"unknown key gpucluster:{key} (known: {', '.join(known)})"))
    for key, (adapter, default) in _SECTIONS.items():
        if key in raw and raw[key] is not None:
            data = raw[key]
        elif default is _MISSING:
            issues.append(ConfigIssue(key, None, f"required key gpucluster:{key} is missing"))
            continue
        else:
            data = default
        try:
            values[key] = adapter.validate_python(data)
        except ValidationError as err:
            issues.extend(_pydantic_issues(key, data, err))
    issues.extend(_semantic_issues(values))
    if burst is not None:
        issues.extend(_burst_issues(burst, values, raw, secret_keys))
    if "inferenceServices" in values:
        issues.extend(_inference_issues(values["inferenceServices"], values, burst))
    if issues:
        raise StackConfigError(issues, source)
    return StackConfig(
        environment=values["environment"],
        cluster_name=values["clusterName"],
        cohort=values["cohort"],
        burst_taint_key=values["burstTaintKey"],
        flavors=tuple(values["flavors"]),
        queues=dict(values["queues"]),
        teams=tuple(values["teams"]),
        inference_namespaces=tuple(values["inferenceNamespaces"]),
        priorities=values["priorities"],
        kueue=values["kueue"],
        descheduler=values["descheduler"],
        storage=values["storage"],
        telemetry=values["telemetry"],
        burst=_with_taint_key(burst, values["burstTaintKey"]),
        inference_services=tuple(values["inferenceServices"]),
    )


def _with_taint_key(burst: BurstConfig | None, key: str) -> BurstConfig | None:
    """The taint controller sets the stack's burst taint key, the one the descheduler acts on."""
    if burst is None:
        return None
    return BurstConfig(burst.settings, burst.taint_controller.model_copy(update={"taint_key": key}))


# ----------------------------------------------------------------------------------------------------
# Loading: from a stack file (offline) or from the engine (pulumi up)
# ----------------------------------------------------------------------------------------------------


def project_defaults(project_file: Path = PROJECT_ROOT / "Pulumi.yaml") -> dict[str, Any]:
    """Defaults declared in Pulumi.yaml's ``config:`` schema, as the engine applies them."""
    try:
        doc = yaml.safe_load(project_file.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return {}
    out: dict[str, Any] = {}
    for key, spec in (doc.get("config") or {}).items():
        if isinstance(spec, dict) and "default" in spec:
            out[key.removeprefix(f"{PROJECT}:")] = spec["default"]
    return out


def read_stack_file(path: Path) -> dict[str, Any]:
    """The ``gpucluster:*`` settings of a stack file, project defaults applied, prefix stripped."""
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise StackConfigError([ConfigIssue(str(path), None, f"cannot read: {exc.strerror}")], str(path)) from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise StackConfigError([ConfigIssue(str(path), None, f"{where}invalid YAML: {problem}")], str(path)) from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("config"), dict):
        raise StackConfigError([ConfigIssue("config", None, "the stack file has no `config:` map")], str(path))
    raw: dict[str, Any] = project_defaults()
    foreign: list[ConfigIssue] = []
    for key, value in doc["config"].items():
        if not isinstance(key, str) or ":" not in key:
            foreign.append(ConfigIssue(str(key), value, f"config keys are namespaced: write {PROJECT}:{key}"))
        elif key.startswith(f"{PROJECT}:"):
            raw[key.removeprefix(f"{PROJECT}:")] = value
        # other namespaces (kubernetes:context, pulumi:...) belong to providers and the engine
    if foreign:
        raise StackConfigError(foreign, str(path))
    return raw


def load_stack_file(path: Path | str) -> StackConfig:
    path = Path(path)
    return parse_stack_config(read_stack_file(path), str(path))


def from_pulumi_config() -> StackConfig:
    """Read the settings the engine passed to this program run and validate them."""
    raw: dict[str, Any] = project_defaults()
    for full_key, value in runtime_config.get_config_env().items():
        if not full_key.startswith(f"{PROJECT}:"):
            continue
        key = full_key.removeprefix(f"{PROJECT}:")
        raw[key] = _decode(value)
    return parse_stack_config(raw, f"stack {_stack_name()}", runtime_config.get_config_secret_keys_env())


def _decode(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def _stack_name() -> str:
    return pulumi.get_stack()


# ----------------------------------------------------------------------------------------------------
# Checkpoint cadence (Young/Daly)
# ----------------------------------------------------------------------------------------------------


def checkpoint_interval_seconds(write_seconds: float, mtbf_seconds: float) -> float:
    """Young/Daly first-order optimum: sqrt(2 x checkpoint write time x mean time between failures)."""
    if write_seconds <= 0 or mtbf_seconds <= 0:
        raise ValueError("write time and MTBF must both be positive")
    return math.sqrt(2.0 * write_seconds * mtbf_seconds)


# ----------------------------------------------------------------------------------------------------
# CLI
# ----------------------------------------------------------------------------------------------------


def _cmd_check(paths: Sequence[str], out: Callable[[str], None]) -> int:
    failed = 0
    for p in paths:
        try:
            cfg = load_stack_file(p)
        except StackConfigError as err:
            failed += 1
            out(str(err))
            continue
        out(
            f"{p}: ok ({cfg.environment}: {len(cfg.flavors)} flavor(s), {cfg.total_gpus} GPUs, "
            f"{len(cfg.queues)} ClusterQueue(s), {len(cfg.teams)} team(s){_burst_summary(cfg)})"
        )
    return 1 if failed else 0


def _burst_summary(cfg: StackConfig) -> str:
    if cfg.burst is None:
        return ", no bursting"
    if not cfg.burst.enabled:
        return ", bursting configured but off"
    return f", bursts to {cfg.burst.capacity} GPUs through {len(cfg.burst.settings.providers)} provider(s)"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m components.config", description="Validate gpucluster stack files without the engine."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="validate stack files; exit 1 if any has a problem")
    check.add_argument("files", nargs="+", metavar="stacks/Pulumi.<stack>.yaml")
    args = parser.parse_args(argv)
    if args.command == "check":
        return _cmd_check(args.files, print)
    return 2  # pragma: no cover - argparse enforces the choices


if __name__ == "__main__":
    sys.exit(main())
