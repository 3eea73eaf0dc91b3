"""The validated settings of one stack (:class:`StackConfig`), composed of each room's own settings model.

Each ``gpucluster:<key>`` section is validated by the model that lives beside its component (queues, storage,
descheduler, telemetry, burst, inference), and ``gpucluster:images`` names our own images: every image field of ours
a stack leaves unset is filled from it (:meth:`StackSections.to_config`). :func:`parse_sections` validates every
section on its own and keeps what validated as :class:`StackSections`; the rules between sections (``rules.py``) then
run on what is there, and only a stack without a single problem becomes a :class:`StackConfig`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from components.telemetry.settings import FILLED as TELEMETRY_FILLED
from components.telemetry.settings import TelemetrySettings
from components.training.settings import TrainingSettings
from contract.burst_settings import BurstSettings, VirtualNodeSettings, settings_issues
from contract.constants import DEFAULT_BURST_TAINT_KEY, PROJECT
from contract.descheduler_settings import DeschedulerSettings
from contract.guardrails_settings import GuardrailsSettings
from contract.images_settings import DAEMONS_IMAGE, VIRTUAL_NODE_IMAGE, ImagesSettings
from contract.inference_settings import InferenceServiceSpec
from contract.interruptions_settings import STACK_KEY as INTERRUPTIONS_KEY
from contract.interruptions_settings import InterruptionsSettings
from contract.issues import ConfigIssue, SettingsError, issues_from_validation_error, key_text, shown
from contract.jobset_settings import JobSetSettings
from contract.make_before_break_settings import FILLED as MAKE_BEFORE_BREAK_FILLED
from contract.make_before_break_settings import STACK_KEY as MAKE_BEFORE_BREAK_KEY
from contract.make_before_break_settings import MakeBeforeBreakSettings
from contract.metrics_adapter_settings import STACK_KEY as METRICS_ADAPTER_KEY
from contract.metrics_adapter_settings import MetricsAdapterSettings
from contract.model import MAX_STRING, ControllerSettings, DnsLabel, TaintKey, parse_duration
from contract.prerequisites_settings import PrerequisitesSettings
from contract.quarantine_settings import FILLED as QUARANTINE_FILLED
from contract.quarantine_settings import STACK_KEY as QUARANTINE_KEY
from contract.quarantine_settings import QuarantineFlavor, QuarantineSettings
from contract.queues_settings import ClusterQueueSpec, GpuFlavor, KueueSettings, Priorities, Team, Topology
from contract.quota_controller_settings import FILLED as QUOTA_CONTROLLER_FILLED
from contract.quota_controller_settings import STACK_KEY as QUOTA_CONTROLLER_KEY
from contract.quota_controller_settings import QuotaControllerSettings, QuotaFlavor, QuotaQueue
from contract.stall_detector_settings import FILLED as STALL_DETECTOR_FILLED
from contract.stall_detector_settings import STACK_KEY as STALL_DETECTOR_KEY
from contract.stall_detector_settings import StallDetectorSettings
from contract.storage_settings import StorageSettings
from contract.taint_controller_queries import gpu_types_in_cluster
from contract.taint_controller_settings import SECTION_KEY as TAINT_CONTROLLER_SECTION
from contract.taint_controller_settings import STACK_KEY as TAINT_CONTROLLER_STACK_KEY
from contract.taint_controller_settings import TaintControllerSettings

_M = TypeVar("_M", bound=BaseModel)

#: Where a misspelt key is checked against.
UNKNOWN_KEY_HINT = "check the spelling against README's config reference"


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
    #: The JobSet controller: training jobs are JobSets.
    jobset: JobSetSettings
    #: The make-before-break AdmissionCheck controller; its ``inferenceNamespaces`` filled from the stack's.
    make_before_break: MakeBeforeBreakSettings
    #: The quota controller; its flavors and the queues' shares filled from the stack's.
    quota_controller: QuotaControllerSettings
    #: The quarantine controller; its flavors filled from the stack's.
    quarantine: QuarantineSettings
    #: Training jobs' restart bounds and where their measured reliability is read.
    training: TrainingSettings
    #: The interruption accounting daemon (ETTR, the restart bound, the measured reliability).
    interruptions: InterruptionsSettings
    #: The stall detector; its team namespaces and exporters' scrape jobs filled from the stack's.
    stall_detector: StallDetectorSettings
    #: Where our own images come from: every image of ours above that the stack did not set is named by it.
    images: ImagesSettings
    #: None when the stack has no ``gpucluster:burst`` section.
    burst: BurstConfig | None = None
    #: Network topologies Kueue places gangs by (flavors name them).
    topologies: tuple[Topology, ...] = ()
    inference_services: tuple[InferenceServiceSpec, ...] = ()
    #: The custom metrics adapter the InferenceServices' request-rate HPAs read.
    metrics_adapter: MetricsAdapterSettings = field(default_factory=MetricsAdapterSettings)
    #: What the API server holds: Pod Security labels and admission policies (``components/guardrails.py``).
    guardrails: GuardrailsSettings = field(default_factory=GuardrailsSettings)
    #: The cluster add-ons checked before any change, and the NVIDIA operators the stack may install.
    prerequisites: PrerequisitesSettings = field(default_factory=PrerequisitesSettings)

    @property
    def burst_enabled(self) -> bool:
        return self.burst is not None and self.burst.enabled

    def controller_settings(self, stack_key: str) -> Any:
        """The settings of the controller whose section is ``stack_key`` (a spec's, ``contract/registry.py``); None
        while that section is not deployed at all (the taint controller's, while bursting is off)."""
        sections = {key: getattr(self, section.attribute) for key, section in CONTROLLER_SECTIONS.items()}
        sections[TAINT_CONTROLLER_STACK_KEY] = (
            self.burst.taint_controller if self.burst_enabled and self.burst else None
        )
        if stack_key not in sections:
            raise KeyError(f"no controller's section is {stack_key!r}; known: {', '.join(sections)}")
        return sections[stack_key]

    @property
    def provider_secret_names(self) -> tuple[str, ...]:
        """The secret config keys the burst providers read (none while bursting is off)."""
        return tuple(sorted(self.burst.secret_paths())) if self.burst is not None and self.burst.enabled else ()

    def flavor(self, name: str) -> GpuFlavor:
        return next(f for f in self.flavors if f.name == name)

    def topology_of(self, flavor: GpuFlavor) -> Topology | None:
        """The topology Kueue places ``flavor``'s gangs by; None for a flavor without one."""
        return next((t for t in self.topologies if t.name == flavor.topology), None)

    @property
    def total_gpus(self) -> int:
        return sum(f.capacity for f in self.flavors)

    @property
    def training_namespaces(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(t.namespace for t in self.teams))


class StackConfigError(SettingsError):
    """Raised with every problem of a stack config at once."""

    def __init__(self, issues: list[ConfigIssue], source: str = "stack config") -> None:
        super().__init__(issues, source)


# ----------------------------------------------------------------------------------------------------
# Sections
# ----------------------------------------------------------------------------------------------------

_MISSING = object()
_STRICT = ConfigDict(strict=True, str_max_length=MAX_STRING)


@dataclass(frozen=True)
class _Section:
    """A ``gpucluster:<key>`` section: the attribute it fills, how it is validated, its default."""

    attribute: str
    adapter: TypeAdapter[Any]
    default: Any = _MISSING
    #: What it validates to.
    tp: Any = None

    @property
    def controller(self) -> bool:
        """Whether the section is a controller's settings, whole."""
        return isinstance(self.tp, type) and issubclass(self.tp, ControllerSettings)


def _section(attribute: str, tp: Any, default: Any = _MISSING, *, model: bool = False) -> _Section:
    return _Section(attribute, TypeAdapter(tp) if model else TypeAdapter(tp, config=_STRICT), default, tp)


#: Each section's filled fields (camelCase key: where from): a stack that sets one is refused.
FILLED_BY_STACK = {
    MAKE_BEFORE_BREAK_KEY: MAKE_BEFORE_BREAK_FILLED,
    QUOTA_CONTROLLER_KEY: QUOTA_CONTROLLER_FILLED,
    QUARANTINE_KEY: QUARANTINE_FILLED,
    STALL_DETECTOR_KEY: STALL_DETECTOR_FILLED,
    "telemetry": TELEMETRY_FILLED,
}

SECTIONS: dict[str, _Section] = {
    "environment": _section("environment", DnsLabel),
    "clusterName": _section("cluster_name", DnsLabel),
    "cohort": _section("cohort", DnsLabel, "research"),
    "burstTaintKey": _section("burst_taint_key", TaintKey, DEFAULT_BURST_TAINT_KEY),
    "flavors": _section("flavors", Annotated[list[GpuFlavor], Field(min_length=1)]),
    "topologies": _section("topologies", list[Topology], []),
    "queues": _section("queues", Annotated[dict[DnsLabel, ClusterQueueSpec], Field(min_length=1)]),
    "teams": _section("teams", Annotated[list[Team], Field(min_length=1)]),
    "inferenceNamespaces": _section("inference_namespaces", Annotated[list[DnsLabel], Field(min_length=1)]),
    "priorities": _section("priorities", Priorities, model=True),
    "kueue": _section("kueue", KueueSettings, {}, model=True),
    "jobset": _section("jobset", JobSetSettings, {}, model=True),
    "descheduler": _section("descheduler", DeschedulerSettings, {}, model=True),
    "storage": _section("storage", StorageSettings, model=True),
    "telemetry": _section("telemetry", TelemetrySettings, {}, model=True),
    MAKE_BEFORE_BREAK_KEY: _section("make_before_break", MakeBeforeBreakSettings, {}, model=True),
    QUOTA_CONTROLLER_KEY: _section("quota_controller", QuotaControllerSettings, {}, model=True),
    QUARANTINE_KEY: _section("quarantine", QuarantineSettings, {}, model=True),
    "training": _section("training", TrainingSettings, {}, model=True),
    INTERRUPTIONS_KEY: _section("interruptions", InterruptionsSettings, {}, model=True),
    STALL_DETECTOR_KEY: _section("stall_detector", StallDetectorSettings, {}, model=True),
    "images": _section("images", ImagesSettings, {}, model=True),
    "inferenceServices": _section("inference_services", list[InferenceServiceSpec], []),
    METRICS_ADAPTER_KEY: _section("metrics_adapter", MetricsAdapterSettings, {}, model=True),
    "guardrails": _section("guardrails", GuardrailsSettings, {}, model=True),
    "prerequisites": _section("prerequisites", PrerequisitesSettings, {}, model=True),
}
#: The sections that are a controller's settings, whole (the taint controller's is inside ``burst``).
CONTROLLER_SECTIONS = {key: section for key, section in SECTIONS.items() if section.controller}
#: Validated by :func:`parse_burst`: two daemons' models share the section.
BURST_KEY = "burst"
TAINT_CONTROLLER_KEY = TAINT_CONTROLLER_SECTION
#: Fields of the taint controller's settings the component fills; the stack does not set them.
TAINT_CONTROLLER_FILLED = {"nodeName": "burst.virtualNode.nodeName", "taintKey": "gpucluster:burstTaintKey"}
_TAINT_CONTROLLER = TypeAdapter(TaintControllerSettings)


@dataclass(frozen=True)
class StackSections:
    """What of a stack validated on its own, section by section (None: absent or invalid), and the raw settings.

    The cross-section rules (``rules.py``) read this: each runs only when the sections it needs are here.
    """

    raw: Mapping[str, Any]
    #: Full ``gpucluster:<name>`` keys the engine reports as secret (None: a stack file, where ``{secure:}`` says).
    secret_keys: Collection[str] | None = None
    environment: str | None = None
    cluster_name: str | None = None
    cohort: str | None = None
    burst_taint_key: str | None = None
    flavors: tuple[GpuFlavor, ...] | None = None
    topologies: tuple[Topology, ...] | None = None
    queues: Mapping[str, ClusterQueueSpec] | None = None
    teams: tuple[Team, ...] | None = None
    inference_namespaces: tuple[str, ...] | None = None
    priorities: Priorities | None = None
    kueue: KueueSettings | None = None
    jobset: JobSetSettings | None = None
    descheduler: DeschedulerSettings | None = None
    storage: StorageSettings | None = None
    telemetry: TelemetrySettings | None = None
    make_before_break: MakeBeforeBreakSettings | None = None
    quota_controller: QuotaControllerSettings | None = None
    quarantine: QuarantineSettings | None = None
    training: TrainingSettings | None = None
    interruptions: InterruptionsSettings | None = None
    stall_detector: StallDetectorSettings | None = None
    images: ImagesSettings | None = None
    inference_services: tuple[InferenceServiceSpec, ...] | None = None
    metrics_adapter: MetricsAdapterSettings | None = None
    guardrails: GuardrailsSettings | None = None
    prerequisites: PrerequisitesSettings | None = None
    #: None when the stack has no ``gpucluster:burst`` section or it did not validate.
    burst: BurstConfig | None = None
    #: Keys under ``config:`` that are neither sections nor secrets the burst section names.
    unknown: tuple[str, ...] = field(default_factory=tuple)

    @property
    def training_namespaces(self) -> set[str]:
        return {t.namespace for t in self.teams} if self.teams is not None else set()

    def is_secret(self, name: str) -> bool:
        """A stack file holds a secret as ``{secure: ...}``; the engine names its secret keys."""
        value = self.raw.get(name)
        if isinstance(value, Mapping) and "secure" in value:
            return True
        return self.secret_keys is not None and f"{PROJECT}:{name}" in self.secret_keys

    def to_config(self) -> StackConfig:
        """The whole stack, once every section validated and every rule held."""
        values = {s.attribute: getattr(self, s.attribute) for s in SECTIONS.values()}
        if any(v is None for v in values.values()):  # pragma: no cover - the caller checks for issues first
            raise ValueError("a section did not validate")
        images: ImagesSettings = values["images"]
        daemons = images.ref(DAEMONS_IMAGE)
        # Every daemon of ours runs the daemons' image by the stack's scheme, unless its section names one.
        for attribute, value in values.items():
            if isinstance(value, ControllerSettings):
                values[attribute] = with_image(value, daemons)
        telemetry: TelemetrySettings = values["telemetry"]
        # The exporters tolerate make-before-break's reservation taint: a running gang's nodes stay watched.
        values["telemetry"] = telemetry.model_copy(
            update={
                "fabric_exporter": with_image(telemetry.fabric_exporter, daemons),
                "reservation_taint_key": values["make_before_break"].reservation_key,
                "inference_priority_class": values["priorities"].pod.inference.name,
                "make_before_break_hold_seconds": (
                    parse_duration(values["make_before_break"].max_hold)
                    if values["make_before_break"].enabled
                    else None
                ),
                "bursting": self.burst is not None and self.burst.enabled,
                "taint_controller_running": (
                    self.burst is not None and self.burst.enabled and self.burst.taint_controller.enabled
                ),
            }
        )
        burst = self.burst
        if burst is not None:
            burst = BurstConfig(
                burst.settings.model_copy(
                    update={"virtual_node": fill_virtual_node_images(burst.settings.virtual_node, images)}
                ),
                with_image(burst.taint_controller, daemons),
            )
            # The taint controller sets the stack's burst taint key, the one the descheduler acts on, and tells the
            # GPU types apart that the flavors' product labels name (two or more; one type decides as one pool).
            tc = burst.taint_controller
            update: dict[str, Any] = {"taint_key": self.burst_taint_key}
            if "gpu_types" not in tc.model_fields_set:
                labels = [f.node_labels.get(tc.gpu_type_node_label, "") for f in values["flavors"]]
                update["gpu_types"] = gpu_types_in_cluster(labels, burst.settings.gpu_types())
            burst = BurstConfig(burst.settings, tc.model_copy(update=update))
        values["metrics_adapter"] = with_image(values["metrics_adapter"], images.ref(VIRTUAL_NODE_IMAGE))
        mbb = values["make_before_break"]
        # The make-before-break controller acts on the stack's virtual node (none without burst) and burst taint.
        filled: dict[str, Any] = {
            "virtual_node_name": burst.settings.virtual_node.node_name if burst is not None and burst.enabled else None,
            "burst_taint_key": self.burst_taint_key,
        }
        if "inference_namespaces" not in mbb.model_fields_set:
            # It moves Deployments in the stack's inference namespaces unless told fewer.
            filled["inference_namespaces"] = list(values["inference_namespaces"])
        values["make_before_break"] = mbb.model_copy(update=filled)
        values["quota_controller"] = fill_quota_controller(
            values["quota_controller"], values["flavors"], values["queues"]
        )
        # Every node of a flavor is a candidate (its own labels, not the acceptance label): a hot node that has not
        # passed acceptance yet is still taken out, and the breaker's share is of the whole flavor.
        flavors = [QuarantineFlavor(name=f.name, node_labels=dict(f.node_labels)) for f in values["flavors"]]
        values["quarantine"] = values["quarantine"].model_copy(update={"flavors": flavors})
        # The stall detector watches the teams' namespaces and reads the exporters' own scrape jobs only.
        values["stall_detector"] = values["stall_detector"].model_copy(
            update={
                "workload_namespaces": [t.namespace for t in values["teams"]],
                "dcgm_scrape_job": values["telemetry"].dcgm_scrape_job,
                "fabric_scrape_job": values["telemetry"].fabric_scrape_job,
            }
        )
        return StackConfig(**values, burst=burst)


def with_image(model: _M, ref: str) -> _M:
    """``model`` with ``image`` set to ``ref``, unless the stack set it (an explicit image wins: a build under
    test)."""
    return model if "image" in model.model_fields_set else model.model_copy(update={"image": ref})


def fill_virtual_node_images(vn: VirtualNodeSettings, images: ImagesSettings) -> VirtualNodeSettings:
    """The virtual node's two images from the stack's scheme, each unless the stack set it."""
    update: dict[str, str] = {}
    if "node_image" not in vn.model_fields_set:
        update["node_image"] = images.ref(VIRTUAL_NODE_IMAGE)
    if "provider_image" not in vn.model_fields_set:
        update["provider_image"] = images.ref(DAEMONS_IMAGE)
    return vn.model_copy(update=update)


def fill_quota_controller(
    settings: QuotaControllerSettings, flavors: tuple[GpuFlavor, ...], queues: Mapping[str, ClusterQueueSpec]
) -> QuotaControllerSettings:
    """The quota controller's settings with the stack's flavors, and the queues' numbers at full capacity as shares."""
    filled = {
        "flavors": [
            QuotaFlavor(
                name=f.name,
                node_labels=dict(f.node_labels),
                gpu_resource=f.gpu_resource,
                declared_gpus=f.capacity,
                require_acceptance=f.require_acceptance,
            )
            for f in flavors
        ],
        "cluster_queues": [
            QuotaQueue(name=name, quota=dict(q.quota), borrowing_limit=dict(q.borrowing_limit))
            for name, q in queues.items()
        ],
    }
    return QuotaControllerSettings.model_validate({**settings.model_dump(), **filled})


def parse_burst(raw: Any) -> tuple[BurstConfig | None, list[ConfigIssue]]:
    """``gpucluster:burst``: the provider service's model for the section, the taint controller's for
    ``taintController``, each problem with its key path."""
    if not isinstance(raw, Mapping):
        return None, [ConfigIssue(BURST_KEY, None, f"expected a map with virtualNode and providers, got {shown(raw)}")]
    issues: list[ConfigIssue] = []
    burst_raw = {k: v for k, v in raw.items() if k != TAINT_CONTROLLER_KEY}
    tc_raw = raw.get(TAINT_CONTROLLER_KEY)
    tc_raw = {} if tc_raw is None else tc_raw
    settings: BurstSettings | None = None
    controller: TaintControllerSettings | None = None
    try:
        settings = BurstSettings.model_validate(burst_raw)
    except ValidationError as err:
        issues.extend(settings_issues(err, BURST_KEY))
    tc_path = f"{BURST_KEY}.{TAINT_CONTROLLER_KEY}"
    if isinstance(tc_raw, Mapping):
        for key, origin in TAINT_CONTROLLER_FILLED.items():
            if key in tc_raw:
                issues.append(ConfigIssue(f"{tc_path}.{key}", tc_raw[key], f"is filled from {origin}; do not set it"))
    try:
        controller = _TAINT_CONTROLLER.validate_python(tc_raw)
    except ValidationError as err:
        issues.extend(issues_from_validation_error(err, tc_path, unknown_key_hint=UNKNOWN_KEY_HINT))
    if settings is None or controller is None or issues:
        return None, issues
    filled: dict[str, Any] = {"node_name": settings.virtual_node.node_name}
    if "inference_namespaces" not in controller.model_fields_set:
        filled["inference_namespaces"] = list(settings.virtual_node.inference_namespaces)
    return BurstConfig(settings, controller.model_copy(update=filled)), []


def parse_sections(
    raw: Mapping[str, Any], secret_keys: Collection[str] | None = None
) -> tuple[StackSections, list[ConfigIssue]]:
    """Validate every section of ``raw`` (the ``gpucluster:*`` settings, prefix stripped) on its own."""
    issues: list[ConfigIssue] = []
    values: dict[str, Any] = {}
    burst: BurstConfig | None = None
    if raw.get(BURST_KEY) is not None:
        burst, burst_problems = parse_burst(raw[BURST_KEY])
        issues.extend(burst_problems)
    secret_names = set(burst.secret_paths()) if burst is not None and burst.enabled else set()
    known = [*SECTIONS, BURST_KEY]
    unknown = tuple(sorted(set(raw) - set(known) - secret_names))
    for key in unknown:
        # The value is not echoed: an unknown key may well be a secret the burst section does not name.
        name = key_text(key)
        issues.append(ConfigIssue(name, None, f"unknown key {PROJECT}:{name} (known: {', '.join(known)})"))
    for key, section in SECTIONS.items():
        if key in raw and raw[key] is not None:
            data = raw[key]
        elif section.default is _MISSING:
            issues.append(ConfigIssue(key, None, f"required key {PROJECT}:{key} is missing"))
            continue
        else:
            data = section.default
        if key in FILLED_BY_STACK and isinstance(data, Mapping):
            for name, origin in FILLED_BY_STACK[key].items():
                if name in data:
                    issues.append(ConfigIssue(f"{key}.{name}", data[name], f"is filled from {origin}; do not set it"))
        try:
            value = section.adapter.validate_python(data)
        except ValidationError as err:
            issues.extend(issues_from_validation_error(err, key, unknown_key_hint=UNKNOWN_KEY_HINT))
            continue
        values[section.attribute] = tuple(value) if isinstance(value, list) else value
    sections = StackSections(raw=raw, secret_keys=secret_keys, burst=burst, unknown=unknown, **values)
    return sections, issues
