"""Settings of the burst provider service: the stack-config section ``gpucluster:burst`` and the daemon's file.

One model validates both: components/config.py checks the stack config with it, the VirtualNode component renders
it (``model_dump(by_alias=True)``) into the ConfigMap the daemon reads with :func:`load_settings`. The daemon image
ships only ``daemons/``, so this module has its own small base model instead of importing ``components.model``.

Example (stack YAML)::

    gpucluster:burst:
      virtualNode:
        nodeName: gpu-burst
        nodeImage: ghcr.io/example/gpucluster-virtual-node:0.1.0
        providerImage: ghcr.io/example/gpucluster-daemons:0.1.0
        inferenceNamespaces: [inference]
        creationTimeout: 10m
      providers:
        - name: fake-a
          kind: fake
          maxGpus: 16
          gpuTypes: {H100: {pricePerGpuHour: 2.50}}
          fake: {url: "http://127.0.0.1:18080"}

Secrets (API keys, kubeconfigs) are referenced by NAME only; their values live in files under the daemon's
``--secrets-dir`` (see daemons/burst_provider/secrets.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import AfterValidator, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from daemons.settings_rules import (
    SettingsModel,
    check_dns_label,
    check_http_url,
    check_image,
    check_positive_duration,
    check_qualified_name,
    parse_duration,
)

STACK_KEY = "gpucluster:burst"
DEFAULT_PORT = 10299
PROVIDER_KINDS = ("fake", "runpod", "kubernetes")

# A Kubernetes Secret data key (the secret becomes a file of that name) that is also a Pulumi config key name.
_SECRET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,252}$")
_GPU_TYPE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
_QUANTITY = re.compile(r"^\d+(\.\d+)?(m|Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")


# ----------------------------------------------------------------------------------------------------
# Value rules
# ----------------------------------------------------------------------------------------------------


def _check_secret_name(v: str) -> str:
    if not _SECRET_NAME.match(v):
        raise ValueError(
            f"{v!r} is not a secret name: give the NAME of a secret config key (letters, digits, '_', '-', '.'), "
            "never the secret itself"
        )
    return v


def _check_gpu_type(v: str) -> str:
    if not _GPU_TYPE.match(v):
        raise ValueError(f"{v!r} is not a GPU type name such as H100 (letters, digits, '.', '_', '-')")
    return v


def _check_quantity(v: str) -> str:
    if not _QUANTITY.match(v):
        raise ValueError(f"{v!r} is not a Kubernetes quantity such as 512, 500m or 4Ti")
    return v


DnsLabel = Annotated[str, AfterValidator(check_dns_label)]
Duration = Annotated[str, AfterValidator(check_positive_duration)]
SecretName = Annotated[str, AfterValidator(_check_secret_name)]
GpuTypeName = Annotated[str, AfterValidator(_check_gpu_type)]
Image = Annotated[str, AfterValidator(check_image)]
Url = Annotated[str, AfterValidator(check_http_url)]
Quantity = Annotated[str, AfterValidator(_check_quantity)]
QualifiedName = Annotated[str, AfterValidator(check_qualified_name)]


# ----------------------------------------------------------------------------------------------------
# Sections
# ----------------------------------------------------------------------------------------------------


class GpuTypeOffer(SettingsModel):
    """What we accept to pay for one of our GPU types at one provider, and the provider's own name for it."""

    price_per_gpu_hour: Annotated[float, Field(gt=0, le=10_000)]
    #: The provider's id of this GPU type (RunPod: its gpuTypeId such as "NVIDIA H100 80GB HBM3"); empty: the
    #: adapter maps our name itself.
    provider_type: str = ""


class FakeProviderSettings(SettingsModel):
    """The fake cloud (tests, the simulated cluster): an HTTP server speaking a RunPod-like API."""

    url: Url


class RunPodSettings(SettingsModel):
    url: Url = "https://rest.runpod.io/v1"
    #: NAME of the secret holding the API key (file ``<secrets-dir>/<name>``).
    api_key_secret: SecretName
    cloud_type: Literal["SECURE", "COMMUNITY"] = "SECURE"


class Toleration(SettingsModel):
    key: QualifiedName
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None

    @model_validator(mode="after")
    def _exists_has_no_value(self) -> Toleration:
        if self.operator == "Exists" and self.value is not None:
            raise ValueError("operator Exists takes no value")
        return self

    def to_k8s(self) -> dict[str, str]:
        out = {"key": self.key, "operator": self.operator}
        if self.value is not None:
            out["value"] = self.value
        if self.effect is not None:
            out["effect"] = self.effect
        return out


class KubernetesClusterSettings(SettingsModel):
    """Another Kubernetes cluster with GPUs: pods are re-created there."""

    #: NAME of the secret holding the kubeconfig (file ``<secrets-dir>/<name>``).
    kubeconfig_secret: SecretName
    #: Source namespace -> namespace in the target cluster; a namespace not listed keeps its name.
    namespace_map: dict[DnsLabel, DnsLabel] = {}
    node_selector: dict[QualifiedName, str] = {}
    tolerations: list[Toleration] = []

    def target_namespace(self, source_namespace: str) -> str:
        return self.namespace_map.get(source_namespace, source_namespace)


class ProviderSettings(SettingsModel):
    """One external provider: its kind, cap, prices per GPU type and the kind's own section (exactly one)."""

    name: DnsLabel
    kind: Literal["fake", "runpod", "kubernetes"]
    #: Most GPUs this provider may hold for us at once; the node advertises the sum of all caps.
    max_gpus: Annotated[int, Field(ge=1, le=100_000)]
    #: Tie-break after effective price: higher is preferred, then the order of the list.
    preference: int = 0
    gpu_types: Annotated[dict[GpuTypeName, GpuTypeOffer], Field(min_length=1)]
    fake: FakeProviderSettings | None = None
    runpod: RunPodSettings | None = None
    kubernetes: KubernetesClusterSettings | None = None

    @model_validator(mode="after")
    def _kind_section(self) -> ProviderSettings:
        sections = {"fake": self.fake, "runpod": self.runpod, "kubernetes": self.kubernetes}
        problems = []
        if sections[self.kind] is None:
            problems.append(f"kind {self.kind} needs its section `{self.kind}:`")
        foreign = sorted(k for k, v in sections.items() if v is not None and k != self.kind)
        if foreign:
            problems.append(f"kind {self.kind} takes no section {', '.join(f'`{k}:`' for k in foreign)}")
        if problems:
            raise ValueError(f"provider {self.name!r}: " + "; ".join(problems))
        return self

    def secret_names(self) -> tuple[str, ...]:
        """Names of the secrets this provider reads from the secrets directory."""
        if self.runpod is not None:
            return (self.runpod.api_key_secret,)
        if self.kubernetes is not None:
            return (self.kubernetes.kubeconfig_secret,)
        return ()

    def price(self, gpu_type: str) -> float | None:
        offer = self.gpu_types.get(gpu_type)
        return offer.price_per_gpu_hour if offer is not None else None


class VirtualNodeSettings(SettingsModel):
    """The virtual node and the provider service behind it."""

    node_name: DnsLabel = "gpu-burst"
    namespace: DnsLabel = "gpucluster-burst"
    node_image: Image
    provider_image: Image
    #: Loopback port of the provider service.
    port: Annotated[int, Field(ge=1, le=65535)] = DEFAULT_PORT
    #: Namespaces whose pods may burst, and where EndpointSlices for external replicas are kept.
    inference_namespaces: Annotated[list[DnsLabel], Field(min_length=1)] = ["inference"]
    creation_timeout: Duration = "10m"
    reconcile_interval: Duration = "5s"
    failure_window: Duration = "30m"
    failure_penalty: Annotated[float, Field(ge=0, le=1000)] = 2.0
    default_gpu_type: GpuTypeName = "H100"
    #: Advertised on the Node besides nvidia.com/gpu (which is the sum of the providers' caps).
    cpu: Quantity = "1000"
    memory: Quantity = "8Ti"
    max_pods: Annotated[int, Field(ge=1, le=100_000)] = 1000

    @property
    def creation_timeout_seconds(self) -> float:
        return parse_duration(self.creation_timeout)

    @property
    def reconcile_interval_seconds(self) -> float:
        return parse_duration(self.reconcile_interval)

    @property
    def failure_window_seconds(self) -> float:
        return parse_duration(self.failure_window)


class BurstSettings(SettingsModel):
    """``gpucluster:burst``: the virtual node and the providers it bursts to."""

    enabled: bool = True
    virtual_node: VirtualNodeSettings
    providers: list[ProviderSettings] = []

    @model_validator(mode="after")
    def _cross_rules(self) -> BurstSettings:
        problems: list[str] = []
        if self.enabled and not self.providers:
            problems.append("providers: at least one provider is needed when burst is enabled")
        seen: dict[str, int] = {}
        for i, p in enumerate(self.providers):
            if p.name in seen:
                problems.append(f"providers[{i}].name: {p.name!r} is already the name of providers[{seen[p.name]}]")
            else:
                seen[p.name] = i
        if self.providers and not any(self.virtual_node.default_gpu_type in p.gpu_types for p in self.providers):
            problems.append(
                f"virtualNode.defaultGpuType: {self.virtual_node.default_gpu_type!r} is in no provider's gpuTypes"
            )
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def provider(self, name: str) -> ProviderSettings:
        for p in self.providers:
            if p.name == name:
                return p
        raise KeyError(name)

    def gpu_types(self) -> tuple[str, ...]:
        """Every GPU type some provider offers, sorted."""
        return tuple(sorted({t for p in self.providers for t in p.gpu_types}))

    def secret_names(self) -> tuple[str, ...]:
        """Every secret name the providers reference, sorted, each once (the component mounts these)."""
        return tuple(sorted({s for p in self.providers for s in p.secret_names()}))


# ----------------------------------------------------------------------------------------------------
# Loading, errors with key paths
# ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SettingsIssue:
    """One problem: its key path (camelCase, as written in the file) and why it is wrong."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


class SettingsError(ValueError):
    """Every problem of a settings file at once."""

    def __init__(self, issues: Sequence[SettingsIssue], source: str) -> None:
        self.issues = list(issues)
        self.source = source
        lines = "\n".join(f"  - {issue}" for issue in self.issues)
        super().__init__(f"{source}: {len(self.issues)} problem(s)\n{lines}")


def _loc_to_path(loc: Iterable[int | str]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            name = to_camel(part) if "_" in part else part
            path += f".{name}" if path else name
    return path or "(top level)"


def validation_issues(err: ValidationError) -> list[SettingsIssue]:
    """pydantic's errors as key paths and plain reasons (model-level rules already name their keys)."""
    issues = []
    for e in err.errors(include_url=False):
        loc = [p for p in e["loc"] if not (isinstance(p, str) and ("[" in p or p.startswith("function-")))]
        reason = e["msg"].removeprefix("Value error, ")
        if e["type"] == "missing":
            reason = "required key is missing"
        elif e["type"] == "extra_forbidden":
            reason = "unknown key (check the spelling against daemons/burst_provider/README.md)"
        elif e["type"] != "value_error" and not isinstance(e.get("input"), (dict, list)):
            reason = f"{reason} (got {e.get('input')!r})"
        issues.append(SettingsIssue(_loc_to_path(loc), reason))
    return issues


def parse_settings(raw: Any, source: str = "burst settings") -> BurstSettings:
    """Validate a decoded settings document; raises :class:`SettingsError` listing every problem."""
    if not isinstance(raw, Mapping):
        raise SettingsError([SettingsIssue("(top level)", "expected a map with virtualNode and providers")], source)
    try:
        return BurstSettings.model_validate(dict(raw))
    except ValidationError as err:
        raise SettingsError(validation_issues(err), source) from None


def load_settings(path: str | Path) -> BurstSettings:
    """Read a JSON or YAML settings file (JSON is YAML); a file holding ``gpucluster:burst:`` at the top is
    unwrapped, so a stack-config excerpt works as is."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise SettingsError([SettingsIssue(str(p), f"cannot read: {exc.strerror}")], str(p)) from None
    try:
        raw = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise SettingsError([SettingsIssue(str(p), f"not valid JSON/YAML: {exc}")], str(p)) from None
    if isinstance(raw, Mapping) and set(raw) == {STACK_KEY}:
        raw = raw[STACK_KEY]
    return parse_settings(raw, str(p))


def node_capacity(settings: BurstSettings) -> dict[str, str]:
    """What the virtual node advertises (GET /v1/capacity): GPUs = the sum of the providers' caps."""
    vn = settings.virtual_node
    return {
        "nvidia.com/gpu": str(sum(p.max_gpus for p in settings.providers)),
        "cpu": vn.cpu,
        "memory": vn.memory,
        "pods": str(vn.max_pods),
    }


def settings_json(settings: BurstSettings) -> str:
    """The settings as the daemon's JSON file (camelCase keys), as the VirtualNode component renders it."""
    return settings.model_dump_json(by_alias=True, exclude_none=True, indent=2)


__all__ = [
    "PROVIDER_KINDS",
    "STACK_KEY",
    "BurstSettings",
    "FakeProviderSettings",
    "GpuTypeOffer",
    "KubernetesClusterSettings",
    "ProviderSettings",
    "RunPodSettings",
    "SettingsError",
    "SettingsIssue",
    "Toleration",
    "VirtualNodeSettings",
    "load_settings",
    "node_capacity",
    "parse_duration",
    "parse_settings",
    "settings_json",
    "validation_issues",
]
