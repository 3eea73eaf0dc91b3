"""The fake rental cloud (``fakes/cloud_server.py``) as a burst provider.

The cloud is a separate process that owns all instance state, so a provider service killed with SIGKILL finds its
instances again through ``list_instances`` when it comes back, exactly as with a real provider.

Mapping: tags go in and come back as the ``tags`` object; ``gpuType`` is our GPU type name (the fake cloud uses ours);
states are the same words as ``InstanceState``; ports are the containers' own ports on the instance's address.
``offers()`` comes from ``GET /offers``: the cloud's live price and free GPUs, limited to the GPU types this provider
is configured with (all of them when none are configured) and to its ``max_gpus`` cap.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from typing import Any

from daemons.burst_provider.providers.base import (
    ContainerSpec,
    Instance,
    InstanceSpec,
    InstanceState,
    InstanceTags,
    Offer,
    Port,
    Provider,
    ProviderError,
)
from daemons.burst_provider.providers.runpod import (
    GpuTypePrice,
    JsonHttpClient,
    ProviderSettingsLike,
    SecretsLike,
    prices_from_settings,
)

_STATES = {s.value: s for s in InstanceState}


def _quote(instance_id: str) -> str:
    return urllib.parse.quote(instance_id, safe="")


def _container_json(c: ContainerSpec) -> dict[str, Any]:
    return {
        "name": c.name,
        "image": c.image,
        "command": list(c.command),
        "args": list(c.args),
        "env": dict(c.env),
        "ports": [{"name": p.name, "port": p.port, "protocol": p.protocol} for p in c.ports],
    }


class FakeCloudProvider(Provider):
    """A client of the fake cloud's JSON API. Thread-safe (no state of its own)."""

    def __init__(
        self,
        name: str,
        url: str,
        gpu_types: Mapping[str, GpuTypePrice] | None = None,
        *,
        max_gpus: int = 16,
        timeout: float = 5.0,
        retries: int = 2,
        backoff: float = 0.2,
    ) -> None:
        self.name = name
        self.gpu_types = dict(gpu_types or {})
        self.max_gpus = max_gpus
        self._http = JsonHttpClient(name, url, timeout=timeout, retries=retries, backoff=backoff)

    @classmethod
    def from_settings(cls, settings: ProviderSettingsLike, secrets: SecretsLike) -> FakeCloudProvider:
        fake = settings.fake
        if fake is None:
            raise ValueError(f"provider {settings.name}: kind fake needs a fake section with its url")
        return cls(settings.name, str(fake.url), prices_from_settings(settings.gpu_types), max_gpus=settings.max_gpus)

    def __repr__(self) -> str:
        return f"FakeCloudProvider(name={self.name!r}, url={self._http.base_url!r})"

    def offers(self) -> list[Offer]:
        reply = self._http.request("offers", "GET", "/offers")
        items = reply.get("offers") if isinstance(reply, dict) else None
        if not isinstance(items, list):
            raise ProviderError(self.name, "offers", "reply has no offers list")
        out = []
        for item in items:
            try:
                gpu_type = str(item["gpuType"])
                offer = Offer(gpu_type, float(item["pricePerGpuHour"]), min(int(item["availableGpus"]), self.max_gpus))
            except (KeyError, TypeError, ValueError) as exc:
                raise ProviderError(self.name, "offers", f"malformed offer {item!r}: {exc}") from None
            if not self.gpu_types or gpu_type in self.gpu_types:
                out.append(offer)
        return out

    def create_instance(self, spec: InstanceSpec) -> Instance:
        body = {
            "tags": {
                "node": spec.tags.node,
                "namespace": spec.tags.namespace,
                "pod": spec.tags.pod,
                "uid": spec.tags.uid,
            },
            "gpuType": spec.gpu_type,
            "gpuCount": spec.gpu_count,
            "containers": [_container_json(c) for c in spec.containers],
        }
        return self._to_instance(
            "create_instance", self._http.request("create_instance", "POST", "/instances", body=body)
        )

    def get_instance(self, instance_id: str) -> Instance | None:
        reply = self._http.request("get_instance", "GET", f"/instances/{_quote(instance_id)}", missing_ok=True)
        return None if reply is None else self._to_instance("get_instance", reply)

    def delete_instance(self, instance_id: str) -> None:
        self._http.request("delete_instance", "DELETE", f"/instances/{_quote(instance_id)}", missing_ok=True)

    def list_instances(self, node: str) -> list[Instance]:
        reply = self._http.request("list_instances", "GET", "/instances", query={"node": node})
        items = reply.get("instances") if isinstance(reply, dict) else None
        if not isinstance(items, list):
            raise ProviderError(self.name, "list_instances", "reply has no instances list")
        return [self._to_instance("list_instances", i) for i in items]

    def logs(self, instance_id: str, container: str, tail: int | None) -> str:
        query = {"container": container}
        if tail is not None:
            query["tail"] = str(tail)
        text = self._http.request("logs", "GET", f"/instances/{_quote(instance_id)}/logs", query=query, want_text=True)
        return str(text)

    def _to_instance(self, call: str, item: object) -> Instance:
        if not isinstance(item, dict):
            raise ProviderError(self.name, call, f"reply is not an instance object: {type(item).__name__}")
        try:
            tags = item["tags"]
            state = _STATES.get(str(item["state"]))
            if state is None:
                raise ValueError(f"unknown state {item['state']!r}")
            return Instance(
                provider=self.name,
                instance_id=str(item["id"]),
                tags=InstanceTags(str(tags["node"]), str(tags["namespace"]), str(tags["pod"]), str(tags["uid"])),
                state=state,
                gpu_type=str(item.get("gpuType") or ""),
                gpu_count=int(item.get("gpuCount") or 0),
                address=str(item.get("address") or ""),
                ports=tuple(
                    Port(port=int(p["port"]), protocol=str(p.get("protocol", "TCP")), name=str(p.get("name", "")))
                    for p in item.get("ports") or []
                ),
                exit_code=None if item.get("exitCode") is None else int(item["exitCode"]),
                message=str(item.get("message") or ""),
                started_at=None if item.get("startedAt") is None else float(item["startedAt"]),
                finished_at=None if item.get("finishedAt") is None else float(item["finishedAt"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ProviderError(self.name, call, f"malformed instance: {exc}") from None
