"""The validated settings of one stack (:class:`StackConfig`), composed of each room's own settings model.

Each ``gpucluster:<key>`` section is validated by the model that lives beside its component (queues, storage,
descheduler, telemetry, burst, inference), and ``gpucluster:images`` names our own images: every image field of ours
a stack leaves unset is filled from it (:meth:`StackSections.to_config`). A registered controller's section comes
from its spec (``contract/registry.py``): its key, its model, which fields the stack fills and how. Nothing here
names a controller but the two the rest of the stack reads (the taint controller, inside ``burst``, and
make-before-break, whose hold the alerts know). :func:`parse_sections` validates every
section on its own and keeps what validated as :class:`StackSections`; the rules between sections (``rules.py``) then
run on what is there, and only a stack without a single problem becomes a :class:`StackConfig`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar, cast

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
from contract.issues import ConfigIssue, SettingsError, issues_from_validation_error, key_text, shown
from contract.jobset_settings import JobSetSettings
from contract.metrics_adapter_settings import STACK_KEY as METRICS_ADAPTER_KEY
from contract.metrics_adapter_settings import MetricsAdapterSettings
from contract.model import MAX_STRING, ControllerSettings, DnsLabel, TaintKey, parse_duration
from contract.prerequisites_settings import PrerequisitesSettings
from contract.queues_settings import ClusterQueueSpec, GpuFlavor, KueueSettings, Priorities, Team, Topology
from contract.registry import CHECKPOINT_VERIFIER, CONTROLLERS, MAKE_BEFORE_BREAK, TAINT_CONTROLLER
from contract.spec import ControllerSettingsLike, ControllerSpec
from contract.stack_facts import StackFacts
from contract.storage_settings import StorageSettings
from contract.taint_controller_queries import gpu_types_in_cluster
from contract.taint_controller_settings import SECTION_KEY as TAINT_CONTROLLER_SECTION
from contract.taint_controller_settings import TaintControllerSettings

_M = TypeVar("_M", bound=BaseModel)
_S = TypeVar("_S", bound=ControllerSettingsLike)

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
    #: Training jobs' restart bounds and where their measured reliability is read.
    training: TrainingSettings
    #: Where our own images come from: every image of ours that the stack did not set is named by it.
    images: ImagesSettings
    #: Each registered controller with a section of its own, by spec name: its settings complete (what the stack
    #: fills, filled by its spec). Read them with :meth:`controller`.
    controllers: Mapping[str, ControllerSettings]
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

    def controller(self, spec: ControllerSpec[_S]) -> _S:
        """The complete settings of ``spec``'s controller (``contract/registry.py``); KeyError for the taint
        controller of a stack without a burst section."""
        if spec.nested:
            if self.burst is None:
                raise KeyError(f"{spec.name}: the stack has no burst section, where its settings live")
            return cast(_S, nested_settings(spec, self.burst))
        return cast(_S, self.controllers[spec.name])

    def running(self, spec: ControllerSpec[_S]) -> _S | None:
        """The settings of ``spec``'s controller while the stack runs it; None while it is off (or, for one inside
        ``burst``, while bursting is off)."""
        if spec.nested and not self.burst_enabled:
            return None
        settings = self.controller(spec)
        return settings if settings.enabled else None

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
    """A ``gpucluster:<key>`` section: the attribute it fills (a controller's: its spec), how it is validated, its
    default."""

    attribute: str
    adapter: TypeAdapter[Any]
    default: Any = _MISSING
    spec: ControllerSpec[Any] | None = None


def _section(attribute: str, tp: Any, default: Any = _MISSING, *, model: bool = False) -> _Section:
    return _Section(attribute, TypeAdapter(tp) if model else TypeAdapter(tp, config=_STRICT), default)


def _controller_section(spec: ControllerSpec[Any]) -> _Section:
    return _Section(spec.name, TypeAdapter(spec.settings_model), {}, spec)


#: The registered controllers whose settings are a ``gpucluster:<key>`` of their own (``contract/registry.py``).
OWN_SECTION = tuple(spec for spec in CONTROLLERS if not spec.nested)

#: Each section's filled fields (camelCase key: where from): a stack that sets one is refused.
FILLED_BY_STACK = {"telemetry": TELEMETRY_FILLED, **{spec.stack_key: spec.filled_by_stack for spec in OWN_SECTION}}

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
    **{spec.stack_key: _controller_section(spec) for spec in OWN_SECTION},
    "training": _section("training", TrainingSettings, {}, model=True),
    "images": _section("images", ImagesSettings, {}, model=True),
    "inferenceServices": _section("inference_services", list[InferenceServiceSpec], []),
    METRICS_ADAPTER_KEY: _section("metrics_adapter", MetricsAdapterSettings, {}, model=True),
    "guardrails": _section("guardrails", GuardrailsSettings, {}, model=True),
    "prerequisites": _section("prerequisites", PrerequisitesSettings, {}, model=True),
}
#: Validated by :func:`parse_burst`: two daemons' models share the section (the taint controller's spec is the one
#: registered controller whose settings are nested, ``burst.taintController``).
BURST_KEY = "burst"
TAINT_CONTROLLER_KEY = TAINT_CONTROLLER_SECTION
_TAINT_CONTROLLER = TypeAdapter(TaintControllerSettings)
if [spec for spec in CONTROLLERS if spec.nested] != [TAINT_CONTROLLER]:  # pragma: no cover - a registry change
    raise ValueError("components.config.stack: only the taint controller's settings may live inside another section")


def nested_settings(spec: ControllerSpec[Any], burst: BurstConfig) -> Any:
    """The settings of a controller whose section lies inside ``burst`` (the taint controller's)."""
    if spec is not TAINT_CONTROLLER:  # pragma: no cover - guarded at import
        raise KeyError(f"{spec.name}: its settings are in no section the stack model knows ({spec.stack_key})")
    return burst.taint_controller


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
    training: TrainingSettings | None = None
    images: ImagesSettings | None = None
    #: Each registered controller's own section that validated, by spec name (:meth:`controller`).
    controllers: Mapping[str, ControllerSettings] = field(default_factory=dict)
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

    def controller(self, spec: ControllerSpec[_S]) -> _S | None:
        """``spec``'s settings as its section validated (nothing filled yet); None when absent or invalid."""
        if spec.nested:
            return None if self.burst is None else cast(_S, nested_settings(spec, self.burst))
        return cast(_S | None, self.controllers.get(spec.name))

    def is_secret(self, name: str) -> bool:
        """A stack file holds a secret as ``{secure: ...}``; the engine names its secret keys."""
        value = self.raw.get(name)
        if isinstance(value, Mapping) and "secure" in value:
            return True
        return self.secret_keys is not None and f"{PROJECT}:{name}" in self.secret_keys

    def to_config(self) -> StackConfig:
        """The whole stack, once every section validated and every rule held."""
        values = {s.attribute: getattr(self, s.attribute) for s in SECTIONS.values() if s.spec is None}
        controllers: dict[str, Any] = dict(self.controllers)
        if any(v is None for v in values.values()) or len(controllers) != len(OWN_SECTION):  # pragma: no cover
            raise ValueError("a section did not validate")  # the caller checks for issues first
        images: ImagesSettings = values["images"]
        daemons = images.ref(DAEMONS_IMAGE)
        burst = self.burst
        mbb = controllers[MAKE_BEFORE_BREAK.name]
        verifier = controllers[CHECKPOINT_VERIFIER.name]
        telemetry: TelemetrySettings = values["telemetry"]
        # The exporters tolerate make-before-break's reservation taint: a running gang's nodes stay watched.
        values["telemetry"] = telemetry.model_copy(
            update={
                "fabric_exporter": with_image(telemetry.fabric_exporter, daemons),
                "reservation_taint_key": mbb.reservation_key,
                "inference_priority_class": values["priorities"].pod.inference.name,
                "make_before_break_hold_seconds": parse_duration(mbb.max_hold) if mbb.enabled else None,
                "bursting": burst is not None and burst.enabled,
                "taint_controller_running": burst is not None and burst.enabled and burst.taint_controller.enabled,
                "checkpoint_verifier_running": verifier.enabled,
                "restore_drill_stale_seconds": verifier.restore_drill.stale_after_seconds
                if verifier.enabled and verifier.restore_drill.enabled
                else None,
            }
        )
        if burst is not None:
            burst = fill_burst(burst, images, values["burst_taint_key"], values["flavors"])
        values["metrics_adapter"] = with_image(values["metrics_adapter"], images.ref(VIRTUAL_NODE_IMAGE))
        facts = StackFacts(
            flavors=values["flavors"],
            queues=values["queues"],
            team_namespaces=tuple(dict.fromkeys(t.namespace for t in values["teams"])),
            inference_namespaces=tuple(values["inference_namespaces"]),
            teams=tuple(values["teams"]),
            priorities=values["priorities"],
            cpu_queue=values["kueue"].cpu_queue.name,
            checkpoints_verified=controllers[CHECKPOINT_VERIFIER.name].enabled,
            burst_taint_key=values["burst_taint_key"],
            virtual_node_name=burst.settings.virtual_node.node_name if burst is not None and burst.enabled else None,
            dcgm_scrape_job=values["telemetry"].dcgm_scrape_job,
            fabric_scrape_job=values["telemetry"].fabric_scrape_job,
        )
        # Every daemon of ours runs the daemons' image by the stack's scheme, unless its section names one; then its
        # spec fills what the stack knows.
        for spec in OWN_SECTION:
            controllers[spec.name] = spec.fill(with_image(controllers[spec.name], daemons), facts)
        return StackConfig(**values, controllers=controllers, burst=burst)


def fill_burst(
    burst: BurstConfig, images: ImagesSettings, taint_key: str, flavors: tuple[GpuFlavor, ...]
) -> BurstConfig:
    """The burst section with its images from the stack's scheme, and the taint controller's burst taint key (the one
    the descheduler acts on) and GPU types (those the flavors' product labels name, two or more; one type decides
    as one pool)."""
    settings = burst.settings.model_copy(
        update={"virtual_node": fill_virtual_node_images(burst.settings.virtual_node, images)}
    )
    tc = with_image(burst.taint_controller, images.ref(DAEMONS_IMAGE))
    update: dict[str, Any] = {"taint_key": taint_key}
    if "gpu_types" not in tc.model_fields_set:
        labels = [f.node_labels.get(tc.gpu_type_node_label, "") for f in flavors]
        update["gpu_types"] = gpu_types_in_cluster(labels, settings.gpu_types())
    return BurstConfig(settings, tc.model_copy(update=update))


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
        for key, origin in TAINT_CONTROLLER.filled_by_stack.items():
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
    controllers: dict[str, ControllerSettings] = {}
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
        if section.spec is not None:
            controllers[section.spec.name] = value
        else:
            values[section.attribute] = tuple(value) if isinstance(value, list) else value
    sections = StackSections(
        raw=raw, secret_keys=secret_keys, burst=burst, unknown=unknown, controllers=controllers, **values
    )
    return sections, issues
