"""Settings of the burst provider service: the stack-config section ``gpucluster:burst`` and the daemon's file.

One model validates both: the stack check (``components/config/``) validates the section with it, the VirtualNode
component renders it (``model_dump(by_alias=True)``) into the ConfigMap the daemon reads with
:func:`load_settings`. Pure pydantic (no Pulumi): the daemon imports it.

Example (stack YAML)::

    gpucluster:burst:
      virtualNode:
        nodeName: gpu-burst
        inferenceNamespaces: [inference]
        creationTimeout: 10m
        maxSpendPerHour: 200          # USD/h of everything rented at once, at the prices below; unset: none
        notReadyTimeout: 10m          # running, but its probes not passing for this long: Failed, replaced
      providers:
        - name: fake-a
          kind: fake
          maxGpus: 16
          gpuTypes: {H100: {pricePerGpuHour: 2.50}}
          fake: {url: "http://127.0.0.1:18080"}

``nodeImage`` and ``providerImage`` are filled from ``gpucluster:images`` unless the section sets them.

Secrets (API keys, kubeconfigs) are referenced by NAME only; their values live in files under the daemon's
``--secrets-dir`` (see daemons/burst_provider/secrets.py).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, Field, ValidationError

from contract.constants import GPU_RESOURCE
from contract.documents import read_settings_file
from contract.images_settings import DEFAULT_DAEMONS_IMAGE, DEFAULT_VIRTUAL_NODE_IMAGE
from contract.issues import ConfigIssue, SettingsError, issues_from_validation_error, shown
from contract.model import (
    ByteQuantity,
    ConfigModel,
    DnsLabel,
    HttpUrl,
    Image,
    PollInterval,
    PositiveDuration,
    Problem,
    QualifiedName,
    Quantity,
    Seconds,
    Toleration,
    UnprivilegedPort,
    parse_duration,
)


def _address_range(v: str) -> str:
    try:
        return str(ipaddress.ip_network(v, strict=False))
    except ValueError:
        raise ValueError(f"{shown(v)} is not a CIDR such as 203.0.113.0/24") from None


AddressRange = Annotated[str, AfterValidator(_address_range)]

STACK_KEY = "gpucluster:burst"
DEFAULT_PORT = 10299
#: The provider service's /metrics and /healthz for Prometheus and the kubelet, on the pod's address (its API stays
#: on loopback: it has no authentication).
PROVIDER_METRICS_PORT = 10297
#: The provider service's liveness path beside /healthz (its readiness: 503 until it has rebuilt its state).
PROVIDER_LIVEZ_PATH = "/livez"
PROVIDER_KINDS = ("fake", "runpod", "kubernetes")
#: How traffic to a rented replica travels, by provider kind, as the adapters implement it today. The Service's
#: EndpointSlice carries the address and port the provider reports (an IP: ``addresses.py`` resolves a name and judges
#: every address), and the provider service's probes go there too; nothing of ours wraps that connection in TLS.
#:
#: * ``http``: plain, unless the replica's own server speaks TLS (the stack cannot know; its probes may then say
#:   ``scheme: HTTPS``, whose certificate is not verified, as the kubelet does not). ``fake``: the simulated cluster's
#:   fake cloud. ``runpod``: ``<port>/tcp`` ports, reached at their public IP and port (``runtime.ports``), over the
#:   internet. ``kubernetes``: the target cluster's pod addresses (its pod network in ``addressRanges``), over whatever
#:   links the two clusters.
#: * ``https``: an address that terminates TLS for the replica. No kind offers one yet: RunPod's HTTPS proxy serves
#:   ``<port>/http`` ports under a host name, which an EndpointSlice cannot carry.
REPLICA_TRANSPORTS: Mapping[str, Literal["http", "https"]] = {"fake": "http", "runpod": "http", "kubernetes": "http"}
#: No rented instance is running sooner than this: a shorter creationTimeout would fail every pod.
MIN_CREATION_TIMEOUT_SECONDS = 10.0
#: A replica gets at least this long to pass its probes: its first probe may wait a period (10 s by default) and a
#: threshold of three.
MIN_NOT_READY_TIMEOUT_SECONDS = 30.0
#: Failures are forgotten after failureWindow; under a minute the failure penalty could never steer a choice.
MIN_FAILURE_WINDOW_SECONDS = 60.0
_UNKNOWN_KEY_HINT = "check the spelling against daemons/burst_provider/README.md"

# A Kubernetes Secret data key (the secret becomes a file of that name) that is also a Pulumi config key name.
_SECRET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,252}$")
_GPU_TYPE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


# ----------------------------------------------------------------------------------------------------
# Value rules
# ----------------------------------------------------------------------------------------------------


def _check_secret_name(v: str) -> str:
    if not _SECRET_NAME.match(v):
        # Never echo it: what is here instead of a name may be the secret itself.
        raise ValueError(
            "is not a secret name: give the NAME of a secret config key (letters, digits, '_', '-', '.'), "
            "never the secret itself"
        )
    return v


def _check_gpu_type(v: str) -> str:
    if not _GPU_TYPE.match(v):
        raise ValueError(f"{shown(v)} is not a GPU type name such as H100 (letters, digits, '.', '_', '-')")
    return v


SecretName = Annotated[str, AfterValidator(_check_secret_name)]
GpuTypeName = Annotated[str, AfterValidator(_check_gpu_type)]


# ----------------------------------------------------------------------------------------------------
# Sections
# ----------------------------------------------------------------------------------------------------


class GpuTypeOffer(ConfigModel):
    """What we accept to pay for one of our GPU types at one provider, and the provider's own name for it."""

    price_per_gpu_hour: Annotated[float, Field(gt=0, le=10_000)]
    #: The provider's id of this GPU type (RunPod: its gpuTypeId such as "NVIDIA H100 80GB HBM3"); empty: the
    #: adapter maps our name itself.
    provider_type: Annotated[str, Field(max_length=253)] = ""


class FakeProviderSettings(ConfigModel):
    """The fake cloud (tests, the simulated cluster): an HTTP server speaking a RunPod-like API."""

    url: HttpUrl


#: RunPod's REST API v2 (api-reference-v2/overview.mdx of RunPod's docs repository).
RUNPOD_V2_URL = "https://api.runpod.io/v2"
#: RunPod's REST API v1 base, retired on 2026-11-15 (api-reference/overview.mdx, release-notes.mdx).
_RUNPOD_V1 = re.compile(r"^https?://rest\.runpod\.io(/|$)|/v1/?$")


class RunPodSettings(ConfigModel):
    """RunPod pods through RunPod's REST API v2 (daemons/burst_provider/providers/runpod.py)."""

    url: HttpUrl = RUNPOD_V2_URL
    #: NAME of the secret holding the API key (file ``<secrets-dir>/<name>``).
    api_key_secret: SecretName
    cloud_type: Literal["SECURE", "COMMUNITY"] = "SECURE"
    #: Container disk in GB (``disk``); no persistent volume is ever asked for, so a stopped pod bills nothing.
    container_disk_gb: Annotated[int, Field(ge=1, le=4096)] = 50
    #: CPU flavor (``cpu.id``, from GET /v2/catalog/cpus) for pods that ask for no GPU.
    cpu_flavor: Annotated[str, Field(min_length=1, max_length=64)] = "cpu5c"

    def rule_problems(self) -> Iterator[Problem]:
        if _RUNPOD_V1.search(str(self.url)):
            yield Problem(
                ("url",),
                f"RunPod's REST API v1 was retired on 2026-11-15; use its REST API v2, {RUNPOD_V2_URL}",
                str(self.url),
            )


class KubernetesClusterSettings(ConfigModel):
    """Another Kubernetes cluster with GPUs: pods are re-created there."""

    #: NAME of the secret holding the kubeconfig (file ``<secrets-dir>/<name>``).
    kubeconfig_secret: SecretName
    #: Source namespace -> namespace in the target cluster; a namespace not listed keeps its name.
    namespace_map: dict[DnsLabel, DnsLabel] = {}
    node_selector: dict[QualifiedName, str] = {}
    tolerations: list[Toleration] = []

    def target_namespace(self, source_namespace: str) -> str:
        return self.namespace_map.get(source_namespace, source_namespace)


class ProviderSettings(ConfigModel):
    """One external provider: its kind, cap, prices per GPU type and the kind's own section (exactly one)."""

    name: DnsLabel
    kind: Literal["fake", "runpod", "kubernetes"]
    #: Most GPUs this provider may hold for us at once; the node advertises the sum of all caps.
    max_gpus: Annotated[int, Field(ge=1, le=100_000)]
    #: Tie-break after effective price: higher is preferred, then the order of the list.
    preference: Annotated[int, Field(ge=-1000, le=1000)] = 0
    gpu_types: Annotated[dict[GpuTypeName, GpuTypeOffer], Field(min_length=1)]
    #: Where this provider's replicas may be (CIDRs). Empty: public addresses only. An instance the provider reports
    #: at an address outside them (a private, loopback or link-local one: a provider, or a compromise of one, that
    #: would point the Service's traffic or the service's probes at the cluster's own network) fails
    #: ``AddressRefused`` before anything is sent to it. A ``kubernetes`` provider's pods have the target cluster's
    #: private addresses: its pod network must be listed.
    address_ranges: Annotated[list[AddressRange], Field(max_length=64)] = []
    fake: FakeProviderSettings | None = None
    runpod: RunPodSettings | None = None
    kubernetes: KubernetesClusterSettings | None = None

    def rule_problems(self) -> Iterator[Problem]:
        if self.kind == "kubernetes" and not self.address_ranges:
            yield Problem(
                ("addressRanges",),
                f"provider {self.name!r}: a kubernetes provider's replicas have the target cluster's pod addresses, "
                "which are not public: list its pod network (for example [10.96.0.0/12])",
                [],
            )
        sections = {"fake": self.fake, "runpod": self.runpod, "kubernetes": self.kubernetes}
        if sections[self.kind] is None:
            yield Problem((), f"provider {self.name!r}: kind {self.kind} needs its section `{self.kind}:`")
        foreign = sorted(k for k, v in sections.items() if v is not None and k != self.kind)
        if foreign:
            yield Problem(
                (), f"provider {self.name!r}: kind {self.kind} takes no section {', '.join(f'`{k}:`' for k in foreign)}"
            )

    @property
    def replica_transport(self) -> Literal["http", "https"]:
        """How traffic to this provider's replicas travels (:data:`REPLICA_TRANSPORTS`): derived from the kind, never
        configured."""
        return REPLICA_TRANSPORTS[self.kind]

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


class VirtualNodeSettings(ConfigModel):
    """The virtual node and the provider service behind it."""

    node_name: DnsLabel = "gpu-burst"
    #: This cluster's name among all that rent from the same provider accounts. Every instance is tagged with it and
    #: the node name, and the service lists, adopts and deletes only instances carrying both: without it, two
    #: clusters whose virtual nodes share a name (gpu-burst, the default) would take each other's replicas for
    #: their own, or for orphans. Unset in a stack, the VirtualNode component fills it with the Pulumi stack's name.
    #: Changing it leaves running instances to no one: drain bursting first.
    cluster_name: DnsLabel | None = None
    namespace: DnsLabel = "gpucluster-burst"
    #: The Go virtual node's image and the provider service's (the daemons' image); unset in a stack, both are filled
    #: from ``gpucluster:images``.
    node_image: Image = DEFAULT_VIRTUAL_NODE_IMAGE
    provider_image: Image = DEFAULT_DAEMONS_IMAGE
    #: Loopback port of the provider service (the container runs as a non-root user).
    port: UnprivilegedPort = DEFAULT_PORT
    #: Namespaces whose pods may burst, and where EndpointSlices for external replicas are kept.
    inference_namespaces: Annotated[list[DnsLabel], Field(min_length=1)] = ["inference"]
    creation_timeout: PositiveDuration = "10m"
    #: A rented replica that is running but not ready (its readiness or startup probe not passing) for this long,
    #: from when it ran or from when it last went unready, fails (``NotReadyTimeout``) and is replaced: a model that
    #: never loads, or a replica that stopped answering with no liveness probe to say so, does not bill forever.
    not_ready_timeout: PositiveDuration = "10m"
    reconcile_interval: PollInterval = "5s"
    failure_window: PositiveDuration = "30m"
    failure_penalty: Annotated[float, Field(ge=0, le=1000)] = 2.0
    #: USD per hour that everything rented at once may cost, at the providers' configured prices (GPUs x
    #: pricePerGpuHour). A rental that would pass it is refused: the pod fails ``SpendCeiling`` with a Warning Event,
    #: and only providers it still fits under are tried. Unset: no ceiling.
    max_spend_per_hour: Annotated[float, Field(gt=0, le=10_000_000)] | None = None
    default_gpu_type: GpuTypeName = "H100"
    #: Advertised on the Node besides nvidia.com/gpu (which is the sum of the providers' caps).
    cpu: Quantity = "1000"
    memory: ByteQuantity = "8Ti"
    max_pods: Annotated[int, Field(ge=1, le=100_000)] = 1000
    #: Where the virtual node's pod (the node and the provider service) runs: the Deployment's nodeSelector and
    #: tolerations, as a rule system nodes. They place the pod and stay out of the settings file it reads.
    node_selector: dict[QualifiedName, str] = {}
    tolerations: list[Toleration] = []
    #: ``refuse``: the policy ``confidential-env-stays-in-our-clusters`` refuses a burstable workload whose env reads a
    #: Secret while a provider that is not a Kubernetes cluster of ours (kind ``runpod`` or ``fake``) is configured:
    #: such a provider receives every env value in plain text and returns it on every read.
    confidential_env_to_rented_providers: Literal["send", "refuse"] = "send"

    def rule_problems(self) -> Iterator[Problem]:
        if self.creation_timeout_seconds < MIN_CREATION_TIMEOUT_SECONDS:
            yield Problem(
                ("creationTimeout",),
                f"{self.creation_timeout!r} is shorter than {MIN_CREATION_TIMEOUT_SECONDS:g}s: no rented instance "
                "starts that fast, every pod would fail",
                self.creation_timeout,
            )
        if self.not_ready_timeout_seconds < MIN_NOT_READY_TIMEOUT_SECONDS:
            yield Problem(
                ("notReadyTimeout",),
                f"{self.not_ready_timeout!r} is shorter than {MIN_NOT_READY_TIMEOUT_SECONDS:g}s: a replica would fail "
                "before its probes could pass",
                self.not_ready_timeout,
            )
        if self.failure_window_seconds < MIN_FAILURE_WINDOW_SECONDS:
            yield Problem(
                ("failureWindow",),
                f"{self.failure_window!r} is shorter than a minute: failures would be forgotten before the failure "
                "penalty could steer a choice",
                self.failure_window,
            )

    @property
    def instance_owner(self) -> str:
        """The tag every instance of this node carries: ``<clusterName>.<nodeName>`` (the node name alone when no
        cluster name is set, as before it existed)."""
        return f"{self.cluster_name}.{self.node_name}" if self.cluster_name else self.node_name

    creation_timeout_seconds: ClassVar[Seconds] = Seconds("creation_timeout")
    not_ready_timeout_seconds: ClassVar[Seconds] = Seconds("not_ready_timeout")
    reconcile_interval_seconds: ClassVar[Seconds] = Seconds("reconcile_interval")
    failure_window_seconds: ClassVar[Seconds] = Seconds("failure_window")


class BurstSettings(ConfigModel):
    """``gpucluster:burst``: the virtual node and the providers it bursts to."""

    enabled: bool = True
    virtual_node: VirtualNodeSettings
    providers: list[ProviderSettings] = []

    def rule_problems(self) -> Iterator[Problem]:
        if self.enabled and not self.providers:
            yield Problem(("providers",), "at least one provider is needed when burst is enabled", [])
        seen: dict[str, int] = {}
        for i, p in enumerate(self.providers):
            if p.name in seen:
                yield Problem(
                    ("providers", i, "name"), f"{p.name!r} is already the name of providers[{seen[p.name]}]", p.name
                )
            else:
                seen[p.name] = i
        default = self.virtual_node.default_gpu_type
        if self.providers and not any(default in p.gpu_types for p in self.providers):
            yield Problem(("virtualNode", "defaultGpuType"), f"{default!r} is in no provider's gpuTypes", default)

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
# Loading
# ----------------------------------------------------------------------------------------------------


def settings_issues(err: ValidationError, prefix: str = "") -> list[ConfigIssue]:
    """The model's errors as key paths under ``prefix`` (``burst`` in the stack check, nothing for the file)."""
    return issues_from_validation_error(err, prefix, unknown_key_hint=_UNKNOWN_KEY_HINT)


def parse_settings(raw: Any, source: str = "burst settings") -> BurstSettings:
    """Validate a decoded settings document; raises :class:`SettingsError` listing every problem."""
    if not isinstance(raw, Mapping):
        raise SettingsError([ConfigIssue("(top level)", None, "expected a map with virtualNode and providers")], source)
    try:
        return BurstSettings.model_validate(dict(raw))
    except ValidationError as err:
        raise SettingsError(settings_issues(err), source) from None


def load_settings(path: str | Path) -> BurstSettings:
    """Read a JSON or YAML settings file (``.json``: JSON, else YAML); a file holding ``gpucluster:burst:`` at the
    top is unwrapped, so a stack-config excerpt works as is. Hostile files are refused (contract/documents.py)."""
    raw = read_settings_file(path)
    if isinstance(raw, Mapping) and set(raw) == {STACK_KEY}:
        raw = raw[STACK_KEY]
    return parse_settings(raw, str(Path(path)))


def with_cluster_name(settings: BurstSettings, stack: str) -> BurstSettings:
    """``settings`` with ``virtualNode.clusterName`` filled from the stack's name when it is unset (lower case,
    characters a DNS label does not allow as '-', at most 63)."""
    if settings.virtual_node.cluster_name is not None:
        return settings
    name = re.sub(r"[^a-z0-9-]+", "-", stack.lower()).strip("-")[:63].strip("-") or "cluster"
    vn = settings.virtual_node.model_copy(update={"cluster_name": name})
    return settings.model_copy(update={"virtual_node": vn})


def node_capacity(settings: BurstSettings) -> dict[str, str]:
    """What the virtual node advertises (GET /v1/capacity): GPUs = the sum of the providers' caps."""
    vn = settings.virtual_node
    return {
        GPU_RESOURCE: str(sum(p.max_gpus for p in settings.providers)),
        "cpu": vn.cpu,
        "memory": vn.memory,
        "pods": str(vn.max_pods),
    }


#: The virtual node's fields that place its pod: never in the settings file, so a move changes no settings digest.
PLACEMENT_FIELDS = ("node_selector", "tolerations")


def settings_json(settings: BurstSettings) -> str:
    """The settings as the daemon's JSON file (camelCase keys), as the VirtualNode component renders it."""
    placement = {"virtual_node": set(PLACEMENT_FIELDS)}
    return settings.model_dump_json(by_alias=True, exclude_none=True, exclude=placement, indent=2)


__all__ = [
    "PROVIDER_KINDS",
    "REPLICA_TRANSPORTS",
    "STACK_KEY",
    "BurstSettings",
    "ConfigIssue",
    "FakeProviderSettings",
    "GpuTypeOffer",
    "KubernetesClusterSettings",
    "ProviderSettings",
    "RunPodSettings",
    "SettingsError",
    "Toleration",
    "VirtualNodeSettings",
    "load_settings",
    "node_capacity",
    "parse_duration",
    "parse_settings",
    "settings_issues",
    "settings_json",
]


#: What every series of the burst provider service begins with (``daemons/burst_provider/metrics.py``).
METRICS_PREFIX = "gpucluster_burst"
