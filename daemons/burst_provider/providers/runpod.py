"""RunPod as a burst provider, through RunPod's public REST API v1 (base ``https://rest.runpod.io/v1``).

What this adapter relies on, from RunPod's API reference (docs.runpod.io/api-reference, the pages
``pods/POST/pods``, ``pods/GET/pods``, ``pods/GET/pods/podId``, ``pods/PATCH/pods/podId``; the OpenAPI text
``api-reference/pods/POST/pods.md``) and, for the stop/delete replies, the REST v1 action descriptions mirrored at
withone.ai/knowledge/runpod ("Stop a Pod", "Delete a Pod"):

- Authentication: ``Authorization: Bearer <api key>``; 401 when missing or wrong.
- ``POST /pods`` with a ``PodCreateInput`` JSON body answers ``201`` with the Pod, ``400`` on invalid input. Body
  fields used here: ``name``, ``imageName``, ``gpuTypeIds`` (list of RunPod GPU type ids such as
  ``"NVIDIA H100 80GB HBM3"``), ``gpuCount``, ``env`` (object of string to string), ``ports`` (list of
  ``"<port>/http"`` or ``"<port>/tcp"``), ``containerDiskInGb``, ``cloudType`` (``SECURE`` | ``COMMUNITY``),
  ``computeType`` (``GPU`` | ``CPU``), ``dockerEntrypoint`` and ``dockerStartCmd`` (lists of strings),
  ``supportPublicIp``.
- ``GET /pods`` lists the account's pods (query filters include ``name``, ``desiredStatus``, ``computeType``,
  ``gpuTypeId``, ``imageName``, ``id``); ``GET /pods/{podId}`` returns one Pod. Pod fields read here: ``id``,
  ``name``, ``desiredStatus`` (``RUNNING`` | ``EXITED`` | ``TERMINATED``), ``publicIp``, ``portMappings`` (object:
  container port as a string -> public port), ``env``, ``gpuCount`` / ``gpu.count``, ``gpu.id``,
  ``lastStartedAt`` (ISO 8601), ``lastStatusChange``, ``costPerHr``.
- ``DELETE /pods/{podId}`` terminates the pod (``204``); ``POST /pods/{podId}/stop`` stops it (``200``).

RunPod pods carry no labels, so an instance's tags travel twice: in the pod ``name``
(``gpucluster-<node>-<uid>``, at most 63 characters) for people reading the console, and in ``env``
(``GPUCLUSTER_NODE``, ``GPUCLUSTER_POD_NAMESPACE``, ``GPUCLUSTER_POD_NAME``, ``GPUCLUSTER_POD_UID``,
``GPUCLUSTER_GPU_TYPE``, ``GPUCLUSTER_PORTS``), which ``GET /pods`` returns and which ``list_instances`` filters on.

Not covered: RunPod's live availability and prices are only in its GraphQL API, which is out of scope, so
``offers()`` reports the configured price per GPU type and the configured GPU cap as capacity. RunPod's REST v1 has
no log endpoint, so ``logs()`` answers with an explanation. A RunPod pod runs one container; a pod with several
containers is refused at create.
"""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from daemons.burst_provider import replies
from daemons.burst_provider.http_client import JsonHttpClient
from daemons.burst_provider.providers.base import (
    AdapterContext,
    GpuTypePrice,
    Instance,
    InstanceSpec,
    InstanceState,
    InstanceTags,
    Offer,
    Port,
    Provider,
    ProviderError,
    ProviderSettingsLike,
    prices_from_settings,
)
from daemons.burst_provider.replies import ReplyError

log = logging.getLogger("burst_provider.runpod")

DEFAULT_URL = "https://rest.runpod.io/v1"
NAME_PREFIX = "gpucluster-"
NAME_LIMIT = 63
ENV_NODE = "GPUCLUSTER_NODE"
ENV_NAMESPACE = "GPUCLUSTER_POD_NAMESPACE"
ENV_POD = "GPUCLUSTER_POD_NAME"
ENV_UID = "GPUCLUSTER_POD_UID"
ENV_GPU_TYPE = "GPUCLUSTER_GPU_TYPE"
ENV_PORTS = "GPUCLUSTER_PORTS"
#: RunPod gpuTypeIds for our GPU type names, used when a GPU type's ``providerType`` is left empty; any other name
#: is sent as it is (RunPod answers 400 for an id it does not know, which fails the create with its message).
DEFAULT_GPU_TYPE_IDS = {
    "H100": "NVIDIA H100 80GB HBM3",
    "H200": "NVIDIA H200",
    "A100": "NVIDIA A100-SXM4-80GB",
    "L40S": "NVIDIA L40S",
}


# --- field helpers -------------------------------------------------------------------------------------------------


def _iso_to_unix(value: str) -> float | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def encode_ports(spec: InstanceSpec) -> str:
    """``name:port/PROTO,...`` of every container port, so names survive the round trip through the provider."""
    return ",".join(f"{p.name}:{p.port}/{p.protocol}" for c in spec.containers for p in c.ports)


def decode_ports(text: str) -> list[Port]:
    ports: list[Port] = []
    for item in text.split(","):
        name, _, rest = item.rpartition(":")
        number, _, proto = rest.partition("/")
        if number.isascii() and number.isdigit() and 0 < int(number) <= 65535:
            ports.append(Port(port=int(number), protocol=proto or "TCP", name=name))
    return ports


def pod_name(tags: InstanceTags) -> str:
    """``gpucluster-<node>-<uid>``; the node part is shortened so the name stays within 63 characters."""
    room = NAME_LIMIT - len(NAME_PREFIX) - 1 - len(tags.uid)
    node = tags.node[: max(room, 1)]
    return f"{NAME_PREFIX}{node}-{tags.uid}"[:NAME_LIMIT]


@dataclass(frozen=True)
class _PodFields:
    """The fields of one RunPod Pod object this adapter reads, type-checked (see the module docstring)."""

    id: str
    name: str
    status: str
    env: dict[str, str]
    public_ip: str
    mappings: dict[str, int]
    gpu_id: str
    gpu_count: int
    last_started_at: str


def _pod_fields(value: object, field: str) -> _PodFields:
    """A Pod object from a reply; ReplyError naming the field when one has the wrong type or size."""
    join = replies.join
    pod = replies.obj(value, field)
    gpu = replies.opt_obj(pod.get("gpu"), join(field, "gpu"))
    mappings_field = join(field, "portMappings")
    mappings = {
        port: replies.integer(public, join(mappings_field, port), low=1, high=65535)
        for port, public in replies.opt_obj(pod.get("portMappings"), mappings_field).items()
    }
    gpu_count = replies.opt_integer(pod.get("gpuCount"), join(field, "gpuCount"), high=1024)
    if gpu_count is None:
        gpu_count = replies.opt_integer(gpu.get("count"), join(field, "gpu.count"), high=1024) or 0
    return _PodFields(
        id=replies.text(pod.get("id"), join(field, "id"), max_len=256),
        name=replies.opt_text(pod.get("name"), join(field, "name"), max_len=256),
        status=replies.opt_text(pod.get("desiredStatus"), join(field, "desiredStatus"), max_len=256),
        env=replies.string_map(pod.get("env"), join(field, "env")),
        public_ip=replies.opt_text(pod.get("publicIp"), join(field, "publicIp"), max_len=253),
        mappings=mappings,
        gpu_id=replies.opt_text(gpu.get("id"), join(field, "gpu.id"), max_len=256),
        gpu_count=gpu_count,
        last_started_at=replies.opt_text(pod.get("lastStartedAt"), join(field, "lastStartedAt"), max_len=64),
    )


# --- the adapter ---------------------------------------------------------------------------------------------------


class RunPodProvider(Provider):
    """RunPod pods as instances. Thread-safe: calls share no mutable state beyond the (stateless) HTTP client."""

    def __init__(
        self,
        name: str,
        api_key: str,
        gpu_types: Mapping[str, GpuTypePrice],
        *,
        url: str = DEFAULT_URL,
        max_gpus: int = 8,
        cloud_type: str = "SECURE",
        container_disk_gb: int = 50,
        timeout: float = 10.0,
        retries: int = 2,
        backoff: float = 0.5,
    ) -> None:
        if not api_key:
            raise ValueError(f"provider {name}: the RunPod API key is empty")
        if cloud_type not in ("SECURE", "COMMUNITY"):
            raise ValueError(f"provider {name}: cloudType {cloud_type!r} is not SECURE or COMMUNITY")
        self.name = name
        self.gpu_types = dict(gpu_types)
        self.max_gpus = max_gpus
        self.cloud_type = cloud_type
        self.container_disk_gb = container_disk_gb
        self._http = JsonHttpClient(name, url, token=api_key, timeout=timeout, retries=retries, backoff=backoff)
        self._by_provider_type = {self.runpod_gpu_id(ours): ours for ours in self.gpu_types}

    @classmethod
    def from_settings(cls, settings: ProviderSettingsLike, context: AdapterContext) -> RunPodProvider:
        rp = settings.runpod
        if rp is None:
            raise ValueError(f"provider {settings.name}: kind runpod needs a runpod section")
        return cls(
            settings.name,
            context.secrets.get(rp.api_key_secret),
            prices_from_settings(settings.gpu_types),
            url=str(rp.url),
            max_gpus=settings.max_gpus,
            cloud_type=str(rp.cloud_type),
        )

    def __repr__(self) -> str:
        return f"RunPodProvider(name={self.name!r}, url={self._http.base_url!r})"

    # -- Provider --

    def offers(self) -> list[Offer]:
        return [Offer(t, p.price_per_gpu_hour, self.max_gpus) for t, p in sorted(self.gpu_types.items())]

    def create_instance(self, spec: InstanceSpec) -> Instance:
        call = "create_instance"
        body = self.pod_body(spec)
        reply = self._http.request(call, "POST", "/pods", body=body)
        inst = self._instance(call, reply, "reply", fallback_tags=spec.tags)
        log.info("pod created", extra={"provider": self.name, "pod_id": inst.instance_id, "instance": spec.tags.key()})
        return inst

    def get_instance(self, instance_id: str) -> Instance | None:
        reply = self._http.request("get_instance", "GET", f"/pods/{_quote(instance_id)}", missing_ok=True)
        if reply is None:
            return None
        return self._instance("get_instance", reply, "reply")

    def delete_instance(self, instance_id: str) -> None:
        self._http.request("delete_instance", "DELETE", f"/pods/{_quote(instance_id)}", missing_ok=True)

    def stop_instance(self, instance_id: str) -> None:
        """Stop without deleting (``POST /pods/{id}/stop``); not part of the Provider interface."""
        self._http.request("stop_instance", "POST", f"/pods/{_quote(instance_id)}/stop")

    def list_instances(self, node: str) -> list[Instance]:
        call = "list_instances"
        reply = self._http.request(call, "GET", "/pods")
        try:
            pods = replies.items(reply, "reply")
        except ReplyError as exc:
            raise replies.provider_error(self.name, call, exc) from None
        out: list[Instance] = []
        for i, item in enumerate(pods):
            field = f"reply[{i}]"
            try:
                pod = replies.obj(item, field)
                env = replies.opt_obj(pod.get("env"), f"{field}.env")
            except ReplyError as exc:
                raise replies.provider_error(self.name, call, exc) from None
            name = pod.get("name")
            # Other pods of the account are none of this adapter's business; only ours are read field by field.
            if env.get(ENV_NODE) == node and isinstance(name, str) and name.startswith(NAME_PREFIX):
                out.append(self._instance(call, pod, field))
        return out

    def logs(self, instance_id: str, container: str, tail: int | None) -> str:
        return (
            f"provider {self.name}: RunPod's REST API has no log endpoint; "
            f"see the pod {instance_id} in the RunPod console for its logs\n"
        )

    # -- translation --

    def runpod_gpu_id(self, gpu_type: str) -> str:
        """RunPod's gpuTypeId for our GPU type: the configured providerType, else a known id, else our name."""
        configured = self.gpu_types.get(gpu_type)
        if configured is not None and configured.provider_type:
            return configured.provider_type
        return DEFAULT_GPU_TYPE_IDS.get(gpu_type, gpu_type)

    def pod_body(self, spec: InstanceSpec) -> dict[str, Any]:
        """The ``POST /pods`` body for one pod; refuses what RunPod cannot run."""
        if len(spec.containers) != 1:
            raise ProviderError(
                self.name, "create_instance", f"RunPod runs one container per pod; this pod has {len(spec.containers)}"
            )
        container = spec.containers[0]
        env = dict(container.env)
        env.update(
            {
                ENV_NODE: spec.tags.node,
                ENV_NAMESPACE: spec.tags.namespace,
                ENV_POD: spec.tags.pod,
                ENV_UID: spec.tags.uid,
                ENV_GPU_TYPE: spec.gpu_type,
                ENV_PORTS: encode_ports(spec),
            }
        )
        ports: list[str] = []
        for port in container.ports:
            if port.protocol.upper() != "TCP":
                raise ProviderError(
                    self.name, "create_instance", f"port {port.port}/{port.protocol}: RunPod exposes TCP only"
                )
            ports.append(f"{port.port}/tcp")
        body: dict[str, Any] = {
            "name": pod_name(spec.tags),
            "imageName": container.image,
            "env": env,
            "ports": ports,
            "containerDiskInGb": self.container_disk_gb,
            "cloudType": self.cloud_type,
            "supportPublicIp": True,
            "dockerEntrypoint": list(container.command),
            "dockerStartCmd": list(container.args),
        }
        if spec.gpu_count > 0:
            if spec.gpu_type not in self.gpu_types:
                raise ProviderError(
                    self.name, "create_instance", f"GPU type {spec.gpu_type!r} is not configured for this provider"
                )
            gpu_id = self.runpod_gpu_id(spec.gpu_type)
            body.update({"computeType": "GPU", "gpuTypeIds": [gpu_id], "gpuCount": spec.gpu_count})
        else:
            body["computeType"] = "CPU"
        return body

    def _instance(self, call: str, reply: object, field: str, fallback_tags: InstanceTags | None = None) -> Instance:
        try:
            pod = _pod_fields(reply, field)
        except ReplyError as exc:
            raise replies.provider_error(self.name, call, exc) from None
        return self._to_instance(pod, fallback_tags)

    def _to_instance(self, pod: _PodFields, fallback_tags: InstanceTags | None) -> Instance:
        env = pod.env
        tags = InstanceTags(
            node=env.get(ENV_NODE) or (fallback_tags.node if fallback_tags else ""),
            namespace=env.get(ENV_NAMESPACE) or (fallback_tags.namespace if fallback_tags else ""),
            pod=env.get(ENV_POD) or (fallback_tags.pod if fallback_tags else ""),
            uid=env.get(ENV_UID) or (fallback_tags.uid if fallback_tags else ""),
        )
        gpu_type = env.get(ENV_GPU_TYPE) or self._by_provider_type.get(pod.gpu_id, "")
        wanted = decode_ports(env.get(ENV_PORTS, ""))
        state, message = self._state(pod.status, pod.public_ip, wanted, pod.mappings)
        ports = tuple(
            Port(port=pod.mappings.get(str(p.port), p.port), protocol=p.protocol, name=p.name) for p in wanted
        )
        running = state is InstanceState.RUNNING
        return Instance(
            provider=self.name,
            instance_id=pod.id,
            tags=tags,
            state=state,
            gpu_type=gpu_type,
            gpu_count=pod.gpu_count,
            address=pod.public_ip if running else "",
            ports=ports if running else (),
            message=message,
            started_at=_iso_to_unix(pod.last_started_at) if running else None,
        )

    @staticmethod
    def _state(status: str, public_ip: str, wanted: list[Port], mappings: dict[str, int]) -> tuple[InstanceState, str]:
        if status == "RUNNING":
            if public_ip and all(str(p.port) in mappings for p in wanted):
                return InstanceState.RUNNING, ""
            return InstanceState.CREATING, "waiting for a public IP and port mappings"
        if status == "EXITED":
            return InstanceState.EXITED, "the pod exited"
        if status == "TERMINATED":
            return InstanceState.TERMINATED, "the pod was terminated"
        return InstanceState.CREATING, f"unrecognised desiredStatus {replies.shown(status)}"


def _quote(instance_id: str) -> str:
    return urllib.parse.quote(instance_id, safe="")
