"""The contract every external GPU provider implements, and how the registry builds one.

A provider runs one pod's containers on rented GPUs as one *instance*. The provider service never keeps state of its
own that it cannot rebuild: every instance carries `InstanceTags`, and `list_instances(node)` returns the instances
tagged with that virtual node, straight from the provider's own API.

Every adapter is built the same way: ``Adapter.from_settings(settings, context)``, where ``settings`` is its entry of
the burst settings' ``providers`` list (read through `ProviderSettingsLike`, which the settings model satisfies) and
``context`` an `AdapterContext`: the provider secrets and the source cluster's ConfigMaps and Secrets.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


class ProviderError(Exception):
    """A provider call failed: refused, malformed reply, unreachable. The message names the provider and the call."""

    def __init__(self, provider: str, call: str, detail: str) -> None:
        super().__init__(f"provider {provider}: {call}: {detail}")
        self.provider = provider
        self.call = call
        self.detail = detail


class CapacityError(ProviderError):
    """The provider refused a create for want of capacity: nothing was created and nothing bills.

    The service then tries the next provider of the same placement at once (a spill), instead of failing the pod
    and waiting for the ReplicaSet's replacement to be placed. Raise it only when the provider's answer says both:
    a refusal that might have left an instance behind is a plain ``ProviderError``.
    """


class InstanceState(enum.StrEnum):
    """The lifecycle of one external instance, as the provider reports it."""

    CREATING = "creating"  # accepted, booting or pulling
    RUNNING = "running"  # containers up
    EXITED = "exited"  # containers stopped by themselves (exit code known when the provider says it)
    FAILED = "failed"  # the provider gave up on it (died, preempted, out of capacity after accept)
    TERMINATED = "terminated"  # deleted; may linger in listings for a while


@dataclass(frozen=True)
class InstanceTags:
    """What ties an instance back to its pod. Written by create_instance, read back by list_instances."""

    node: str  # the owner: ``<cluster>.<virtual node>`` (VirtualNodeSettings.instance_owner)
    namespace: str
    pod: str
    uid: str

    def key(self) -> str:
        return f"{self.namespace}/{self.pod}/{self.uid}"


@dataclass(frozen=True)
class Port:
    port: int
    protocol: str = "TCP"
    name: str = ""


@dataclass(frozen=True)
class ContainerSpec:
    name: str
    image: str
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()  # literal values only; references are resolved by the service first
    ports: tuple[Port, ...] = ()


@dataclass(frozen=True)
class InstanceSpec:
    """What to run for one pod: its containers and the GPUs it asked for."""

    tags: InstanceTags
    gpu_type: str  # our GPU type name (for example "H100"), mapped to a provider's ids by the adapter
    gpu_count: int
    containers: tuple[ContainerSpec, ...]
    cpu_millis: int = 0
    memory_bytes: int = 0
    # The whole source pod as JSON, for providers that translate it themselves (another Kubernetes cluster).
    pod: dict[str, object] = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True)
class Instance:
    """One external instance as the provider reports it now."""

    provider: str
    instance_id: str
    tags: InstanceTags
    state: InstanceState
    gpu_type: str = ""
    gpu_count: int = 0
    address: str = ""  # where the replica is reachable (IP or hostname), once running
    ports: tuple[Port, ...] = ()
    exit_code: int | None = None
    message: str = ""
    started_at: float | None = None  # unix seconds
    finished_at: float | None = None


@dataclass(frozen=True)
class Offer:
    """A provider's price and free capacity for one GPU type, per GPU."""

    gpu_type: str
    price_per_gpu_hour: float
    available_gpus: int


class Provider(abc.ABC):
    """An external GPU provider. Implementations must be safe to call from several threads."""

    name: str

    @abc.abstractmethod
    def offers(self) -> list[Offer]:
        """Prices and free capacity per GPU type right now."""

    @abc.abstractmethod
    def create_instance(self, spec: InstanceSpec) -> Instance:
        """Ask for an instance; returns once the provider accepted it (state CREATING or RUNNING)."""

    @abc.abstractmethod
    def get_instance(self, instance_id: str) -> Instance | None:
        """The instance now, or None if the provider no longer knows it."""

    @abc.abstractmethod
    def delete_instance(self, instance_id: str) -> None:
        """Terminate the instance. Deleting an unknown instance is not an error."""

    @abc.abstractmethod
    def list_instances(self, node: str) -> list[Instance]:
        """Every instance of this provider tagged with the owner `node` (the cluster's and the virtual node's name)."""

    @abc.abstractmethod
    def logs(self, instance_id: str, container: str, tail: int | None) -> str:
        """The container's recent log lines, or an explanation when the provider has no log API."""


# --- what an adapter is built from --------------------------------------------------------------------------------


class SecretsLike(Protocol):
    """The provider secrets, by name (daemons/burst_provider/secrets.py); LookupError when one is missing."""

    def get(self, name: str) -> str: ...


class SourceReader(Protocol):
    """Reads the objects a pod references from the source cluster; None when absent.

    The shape of daemons/burst_provider/pods.py's ReferenceResolver, which the service's source cluster implements.
    """

    def config_map(self, namespace: str, name: str) -> Mapping[str, str] | None: ...

    def secret(self, namespace: str, name: str) -> Mapping[str, str] | None:
        """The Secret's data, base64-decoded."""
        ...


class GpuTypeSettingsLike(Protocol):
    @property
    def price_per_gpu_hour(self) -> float: ...

    @property
    def provider_type(self) -> str | None: ...


class FakeSettingsLike(Protocol):
    @property
    def url(self) -> str: ...


class RunpodSettingsLike(Protocol):
    @property
    def url(self) -> str: ...

    @property
    def api_key_secret(self) -> str: ...

    @property
    def cloud_type(self) -> str: ...

    @property
    def container_disk_gb(self) -> int: ...

    @property
    def cpu_flavor(self) -> str: ...


class KubernetesSettingsLike(Protocol):
    @property
    def kubeconfig_secret(self) -> str: ...

    @property
    def namespace_map(self) -> Mapping[str, str]: ...

    @property
    def node_selector(self) -> Mapping[str, str]: ...

    @property
    def tolerations(self) -> Sequence[Any]: ...


class ProviderSettingsLike(Protocol):
    """One entry of the burst settings' ``providers`` list, as the adapters read it."""

    @property
    def name(self) -> str: ...

    @property
    def max_gpus(self) -> int: ...

    @property
    def gpu_types(self) -> Mapping[str, GpuTypeSettingsLike]: ...

    @property
    def fake(self) -> FakeSettingsLike | None: ...

    @property
    def runpod(self) -> RunpodSettingsLike | None: ...

    @property
    def kubernetes(self) -> KubernetesSettingsLike | None: ...


@dataclass(frozen=True)
class AdapterContext:
    """What every adapter may need besides its settings.

    ``secrets``: the provider secrets (API keys, kubeconfigs) by name. ``source``: the source cluster's ConfigMaps
    and Secrets that a pod references (None when the service runs without a source cluster).
    """

    secrets: SecretsLike
    source: SourceReader | None = None


@dataclass(frozen=True)
class GpuTypePrice:
    """Our GPU type's configured price, and the provider's own id for it (RunPod: a ``gpuTypeIds`` entry)."""

    price_per_gpu_hour: float
    provider_type: str = ""


def prices_from_settings(gpu_types: Mapping[str, GpuTypeSettingsLike]) -> dict[str, GpuTypePrice]:
    return {name: GpuTypePrice(float(t.price_per_gpu_hour), t.provider_type or "") for name, t in gpu_types.items()}
