"""Test doubles for the provider service: an in-memory provider, a fake source cluster, a manual clock, and the rig
that puts a service on them."""

from __future__ import annotations

import copy
import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from contract.burst_settings import BurstSettings, parse_settings
from daemons.burst_provider import addresses
from daemons.burst_provider.providers.base import (
    CapacityError,
    Instance,
    InstanceSpec,
    InstanceState,
    Offer,
    Port,
    Provider,
    ProviderError,
)
from daemons.burst_provider.service import BurstService


class ManualClock:
    """Time that moves only when a test says so."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class QueuedSpawn:
    """Collects background work; the test runs it when it wants (deterministic ordering)."""

    def __init__(self) -> None:
        self.jobs: list[tuple[str, Callable[[], None]]] = []

    def __call__(self, target: Callable[[], None], name: str) -> None:
        self.jobs.append((name, target))

    def run_all(self) -> int:
        done = 0
        while self.jobs:
            _, job = self.jobs.pop(0)
            job()
            done += 1
        return done


def sync_spawn(target: Callable[[], None], name: str) -> None:
    target()


class MemoryProvider(Provider):
    """A provider whose instances live in a dict; tests flip their states and inject failures."""

    def __init__(
        self,
        name: str,
        offers: dict[str, int] | None = None,
        *,
        price: float = 1.0,
        address_prefix: str = "203.0.113.",
        create_state: InstanceState = InstanceState.CREATING,
    ) -> None:
        self.name = name
        self.free = dict(offers if offers is not None else {"H100": 8})
        self.price = price
        self.instances: dict[str, Instance] = {}
        self.specs: dict[str, InstanceSpec] = {}
        self.create_error: str | None = None
        self.capacity_refusal: str | None = None  # set: creates are refused for capacity (nothing is created)
        self.offers_error: str | None = None
        self.list_error: str | None = None
        self.create_state = create_state
        self.create_gate: threading.Event | None = None  # set: create_instance blocks until the event is set
        self.deleted: list[str] = []
        self.created: list[str] = []
        self._ids = itertools.count(1)
        self._address_prefix = address_prefix
        self._lock = threading.Lock()

    def offers(self) -> list[Offer]:
        if self.offers_error:
            raise ProviderError(self.name, "offers", self.offers_error)
        return [Offer(t, self.price, n) for t, n in self.free.items()]

    def create_instance(self, spec: InstanceSpec) -> Instance:
        if self.create_gate is not None:
            self.create_gate.wait(10)
        if self.create_error:
            raise ProviderError(self.name, "create_instance", self.create_error)
        if self.capacity_refusal:
            raise CapacityError(self.name, "create_instance", self.capacity_refusal)
        with self._lock:
            n = next(self._ids)
            iid = f"{self.name}-i{n}"
            inst = Instance(
                provider=self.name,
                instance_id=iid,
                tags=spec.tags,
                state=self.create_state,
                gpu_type=spec.gpu_type,
                gpu_count=spec.gpu_count,
                address=f"{self._address_prefix}{n}" if self.create_state is InstanceState.RUNNING else "",
                ports=tuple(p for c in spec.containers for p in c.ports),
            )
            self.instances[iid] = inst
            self.specs[iid] = spec
            self.created.append(iid)
        return inst

    def set_state(self, iid: str, state: InstanceState, exit_code: int | None = None, address: str = "") -> None:
        with self._lock:
            inst = self.instances[iid]
            n = iid.rsplit("i", 1)[-1]
            addr = address or inst.address or (f"{self._address_prefix}{n}" if state is InstanceState.RUNNING else "")
            self.instances[iid] = Instance(
                provider=inst.provider,
                instance_id=iid,
                tags=inst.tags,
                state=state,
                gpu_type=inst.gpu_type,
                gpu_count=inst.gpu_count,
                address=addr,
                ports=inst.ports,
                exit_code=exit_code,
            )

    def add(self, inst: Instance) -> None:
        with self._lock:
            self.instances[inst.instance_id] = inst

    def vanish(self, iid: str) -> None:
        with self._lock:
            self.instances.pop(iid, None)

    def get_instance(self, instance_id: str) -> Instance | None:
        with self._lock:
            return self.instances.get(instance_id)

    def delete_instance(self, instance_id: str) -> None:
        """As a provider deletes: a live instance is gone at once; one that already ended by itself (failed,
        exited) stays listed as it is until the provider drops it, the way the fake cloud keeps it for its TTL."""
        with self._lock:
            self.deleted.append(instance_id)
            inst = self.instances.get(instance_id)
            if inst is None or inst.state not in (InstanceState.FAILED, InstanceState.EXITED):
                self.instances.pop(instance_id, None)

    def list_instances(self, node: str) -> list[Instance]:
        if self.list_error:
            raise ProviderError(self.name, "list_instances", self.list_error)
        with self._lock:
            return [i for i in self.instances.values() if i.tags.node == node]

    def logs(self, instance_id: str, container: str, tail: int | None) -> str:
        return f"logs of {instance_id}/{container} tail={tail}\n"


class FakeSource:
    """A source cluster in memory: pods, ConfigMaps, Secrets, Services, EndpointSlices, annotation patches."""

    def __init__(self) -> None:
        self.pods: list[dict[str, Any]] = []
        self.config_maps: dict[tuple[str, str], dict[str, str]] = {}
        self.secrets: dict[tuple[str, str], dict[str, str]] = {}
        self.svcs: dict[str, list[dict[str, Any]]] = {}
        self.slices: dict[tuple[str, str], dict[str, Any]] = {}
        self.annotations: dict[tuple[str, str], dict[str, str]] = {}
        self.annotate_calls = 0
        self.applied = 0
        self.events: list[dict[str, Any]] = []
        self.list_error: str | None = None

    def config_map(self, namespace: str, name: str) -> dict[str, str] | None:
        return self.config_maps.get((namespace, name))

    def secret(self, namespace: str, name: str) -> dict[str, str] | None:
        return self.secrets.get((namespace, name))

    def live_pods_on_node(self, node: str) -> list[dict[str, Any]]:
        if self.list_error:
            raise RuntimeError(self.list_error)
        return [p for p in self.pods if p["spec"].get("nodeName") == node]

    def create_event(self, event: dict[str, Any]) -> None:
        self.events.append(event)

    def services(self, namespace: str) -> list[dict[str, Any]]:
        return self.svcs.get(namespace, [])

    def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str | None]) -> None:
        """A merge patch of the pod's annotations, kept apart (``annotations``) and on the pod itself, as listed."""
        self.annotate_calls += 1
        current = self.annotations.setdefault((namespace, name), {})
        on_pods = [
            p["metadata"].setdefault("annotations", {})
            for p in self.pods
            if p["metadata"].get("namespace") == namespace and p["metadata"].get("name") == name
        ]
        for target in [current, *on_pods]:
            for k, v in annotations.items():
                if v is None:
                    target.pop(k, None)
                else:
                    target[k] = v

    def endpoint_slices(self, namespace: str, labels: dict[str, str]) -> list[dict[str, Any]]:
        return [
            copy.deepcopy(s)
            for (ns, _), s in sorted(self.slices.items())
            if ns == namespace and all(s["metadata"]["labels"].get(k) == v for k, v in labels.items())
        ]

    def apply_endpoint_slice(self, endpoint_slice: dict[str, Any]) -> None:
        meta = endpoint_slice["metadata"]
        self.slices[(meta["namespace"], meta["name"])] = copy.deepcopy(endpoint_slice)
        self.applied += 1

    def delete_endpoint_slice(self, namespace: str, name: str) -> None:
        self.slices.pop((namespace, name), None)


def make_pod(
    name: str = "web-1",
    *,
    uid: str | None = None,
    namespace: str = "inference",
    gpus: int = 1,
    node: str = "gpu-burst",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    env: list[dict[str, Any]] | None = None,
    ports: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": "500m", "memory": "1Gi"}}
    if gpus:
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or f"uid-{name}",
            "labels": labels if labels is not None else {"app": "web"},
            "annotations": annotations or {},
        },
        "spec": {
            "nodeName": node,
            "containers": [
                {
                    "name": "server",
                    "image": "registry.example.com/serve:1.0",
                    "command": ["serve"],
                    "args": ["--port", "8080"],
                    "env": env or [],
                    "ports": ports if ports is not None else [{"name": "http", "containerPort": 8080}],
                    "resources": resources,
                }
            ],
        },
        "status": {"phase": "Pending"},
    }


TEST_ADDRESS_RANGES = ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "127.0.0.0/8", "198.18.0.0/15")


def provider_entry(name: str, price: float = 2.0, max_gpus: int = 16, **extra: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": name,
        "kind": "fake",
        "maxGpus": max_gpus,
        "gpuTypes": {"H100": {"pricePerGpuHour": price}},
        # The documentation ranges and loopback the tests' instances report (none of them public).
        "addressRanges": list(TEST_ADDRESS_RANGES),
        "fake": {"url": f"http://127.0.0.1:1/{name}"},
    }
    entry.update(extra)
    return entry


def make_settings(*providers: dict[str, Any], **virtual_node: Any) -> BurstSettings:
    vn: dict[str, Any] = {
        "nodeImage": "registry.example.com/virtual-node:0.1.0",
        "providerImage": "registry.example.com/daemons:0.1.0",
    }
    vn.update(virtual_node)
    return parse_settings(
        {"virtualNode": vn, "providers": list(providers) or [provider_entry("fake-a")]}, "test settings"
    )


def port(n: int, name: str = "") -> Port:
    return Port(port=n, name=name)


@dataclass
class Rig:
    """A provider service on the doubles above: its memory providers, its source cluster, a manual clock and
    background work that runs only when the test says (``spawn.run_all()``)."""

    svc: BurstService
    clock: ManualClock
    spawn: QueuedSpawn
    source: FakeSource
    providers: dict[str, MemoryProvider]

    @property
    def provider(self) -> MemoryProvider:
        """The first provider (most tests rent from one)."""
        return next(iter(self.providers.values()))

    def submit(self, *pods: dict[str, Any]) -> None:
        """Each pod posted to the service as the virtual kubelet posts it, then the background work (the providers'
        creates) run to the end."""
        for pod in pods:
            self.svc.create_pod(pod)
        self.spawn.run_all()

    def status(self, name: str = "web-1", namespace: str = "inference") -> dict[str, Any]:
        """The pod's status as the service reports it; the pod must be known."""
        status = self.svc.get_pod(namespace, name)
        assert status is not None, f"the service does not know {namespace}/{name}"
        return status


def rig(
    *providers: MemoryProvider,
    settings: BurstSettings | None = None,
    source: FakeSource | None = None,
    address_resolver: addresses.Resolver = addresses.system_resolver,
    **virtual_node: Any,
) -> Rig:
    """A service over ``providers`` (one ``fake-a`` when none is given). Without ``settings``, each provider is
    configured at its own price, with ``virtual_node`` as the virtualNode section's extra keys."""
    providers = providers or (MemoryProvider("fake-a"),)
    if settings is None:
        settings = make_settings(*(provider_entry(p.name, price=p.price) for p in providers), **virtual_node)
    elif virtual_node:
        raise TypeError("rig: pass virtualNode keys or whole settings, not both")
    clock, spawn, source = ManualClock(), QueuedSpawn(), source if source is not None else FakeSource()
    by_name = {p.name: p for p in providers}
    svc = BurstService(settings, by_name, source, clock=clock, spawn=spawn, address_resolver=address_resolver)
    return Rig(svc, clock, spawn, source, by_name)
