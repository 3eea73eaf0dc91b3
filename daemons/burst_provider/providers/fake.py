"""The fake rental cloud (``fakes/cloud_server.py``) as a burst provider.

The cloud is a separate process that owns all instance state, so a provider service killed with SIGKILL finds its
instances again through ``list_instances`` when it comes back, exactly as with a real provider.

Mapping: tags go in and come back as the ``tags`` object; ``gpuType`` is our GPU type name (the fake cloud uses ours);
states are the same words as ``InstanceState``; ports are the containers' own ports on the instance's address.
``offers()`` comes from ``GET /offers``: the cloud's live price and free GPUs, limited to the GPU types this provider
is configured with (all of them when none are configured) and to its ``max_gpus`` cap. Every field of a reply is
type-checked; one of the wrong type or size is a ``ProviderError`` naming it.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from typing import Any

from daemons.burst_provider import replies
from daemons.burst_provider.http_client import HttpStatusError, JsonHttpClient
from daemons.burst_provider.providers.base import (
    AdapterContext,
    CapacityError,
    ContainerSpec,
    GpuTypePrice,
    Instance,
    InstanceSpec,
    InstanceState,
    InstanceTags,
    Offer,
    Port,
    Provider,
    ProviderSettingsLike,
    prices_from_settings,
)
from daemons.burst_provider.replies import ReplyError

_STATES = {s.value: s for s in InstanceState}
_TAG_KEYS = ("node", "namespace", "pod", "uid")


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


def offer_from_reply(value: object, field: str, max_gpus: int) -> Offer:
    item = replies.obj(value, field)
    join = replies.join
    return Offer(
        replies.text(item.get("gpuType"), join(field, "gpuType"), max_len=256),
        replies.number(item.get("pricePerGpuHour"), join(field, "pricePerGpuHour"), high=1e6),
        min(replies.integer(item.get("availableGpus"), join(field, "availableGpus"), high=10**9), max_gpus),
    )


def instance_from_reply(provider: str, value: object, field: str) -> Instance:
    """The instance a fake-cloud instance object describes; ReplyError naming the first field that is wrong."""
    join = replies.join
    item = replies.obj(value, field)
    tags_field = join(field, "tags")
    tags = replies.obj(item.get("tags"), tags_field)
    node, namespace, pod, uid = (replies.text(tags.get(k), join(tags_field, k), max_len=253) for k in _TAG_KEYS)
    state_text = replies.text(item.get("state"), join(field, "state"), max_len=256)
    state = _STATES.get(state_text)
    if state is None:
        raise ReplyError(join(field, "state"), f"unknown state {replies.shown(state_text)}")
    ports_field = join(field, "ports")
    ports = []
    for i, p in enumerate(replies.opt_items(item.get("ports"), ports_field)):
        port = replies.obj(p, join(ports_field, i))
        ports.append(
            Port(
                port=replies.integer(port.get("port"), join(join(ports_field, i), "port"), low=1, high=65535),
                protocol=replies.opt_text(port.get("protocol"), join(join(ports_field, i), "protocol"), max_len=16)
                or "TCP",
                name=replies.opt_text(port.get("name"), join(join(ports_field, i), "name"), max_len=63),
            )
        )
    return Instance(
        provider=provider,
        instance_id=replies.text(item.get("id"), join(field, "id"), max_len=256),
        tags=InstanceTags(node, namespace, pod, uid),
        state=state,
        gpu_type=replies.opt_text(item.get("gpuType"), join(field, "gpuType"), max_len=256),
        gpu_count=replies.opt_integer(item.get("gpuCount"), join(field, "gpuCount"), high=1024) or 0,
        address=replies.opt_text(item.get("address"), join(field, "address"), max_len=253),
        ports=tuple(ports),
        exit_code=replies.opt_integer(item.get("exitCode"), join(field, "exitCode"), low=-(2**31), high=2**31),
        message=replies.opt_text(item.get("message"), join(field, "message"), max_len=4096),
        started_at=replies.opt_number(item.get("startedAt"), join(field, "startedAt"), high=1e11),
        finished_at=replies.opt_number(item.get("finishedAt"), join(field, "finishedAt"), high=1e11),
    )


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
    def from_settings(cls, settings: ProviderSettingsLike, context: AdapterContext) -> FakeCloudProvider:
        fake = settings.fake
        if fake is None:
            raise ValueError(f"provider {settings.name}: kind fake needs a fake section with its url")
        return cls(settings.name, str(fake.url), prices_from_settings(settings.gpu_types), max_gpus=settings.max_gpus)

    def __repr__(self) -> str:
        return f"FakeCloudProvider(name={self.name!r}, url={self._http.base_url!r})"

    def offers(self) -> list[Offer]:
        reply = self._http.request("offers", "GET", "/offers")
        try:
            items = replies.items(replies.obj(reply, "reply").get("offers"), "reply.offers")
            offers = [offer_from_reply(item, f"reply.offers[{i}]", self.max_gpus) for i, item in enumerate(items)]
        except ReplyError as exc:
            raise replies.provider_error(self.name, "offers", exc) from None
        return [o for o in offers if not self.gpu_types or o.gpu_type in self.gpu_types]

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
        try:
            reply = self._http.request("create_instance", "POST", "/instances", body=body)
        except HttpStatusError as exc:
            if exc.status == 409:  # the fake cloud's "insufficient capacity": nothing was created
                raise CapacityError(self.name, "create_instance", exc.detail) from None
            raise
        return self._to_instance("create_instance", reply, "reply")

    def get_instance(self, instance_id: str) -> Instance | None:
        reply = self._http.request("get_instance", "GET", f"/instances/{_quote(instance_id)}", missing_ok=True)
        return None if reply is None else self._to_instance("get_instance", reply, "reply")

    def delete_instance(self, instance_id: str) -> None:
        self._http.request("delete_instance", "DELETE", f"/instances/{_quote(instance_id)}", missing_ok=True)

    def list_instances(self, node: str) -> list[Instance]:
        call = "list_instances"
        reply = self._http.request(call, "GET", "/instances", query={"node": node})
        try:
            items = replies.items(replies.obj(reply, "reply").get("instances"), "reply.instances")
        except ReplyError as exc:
            raise replies.provider_error(self.name, call, exc) from None
        return [self._to_instance(call, item, f"reply.instances[{i}]") for i, item in enumerate(items)]

    def logs(self, instance_id: str, container: str, tail: int | None) -> str:
        query = {"container": container}
        if tail is not None:
            query["tail"] = str(tail)
        text = self._http.request("logs", "GET", f"/instances/{_quote(instance_id)}/logs", query=query, want_text=True)
        return str(text)

    def _to_instance(self, call: str, item: object, field: str) -> Instance:
        try:
            return instance_from_reply(self.name, item, field)
        except ReplyError as exc:
            raise replies.provider_error(self.name, call, exc) from None
