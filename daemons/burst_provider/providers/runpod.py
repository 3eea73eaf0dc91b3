"""RunPod as a burst provider, through RunPod's REST API v2 (base ``https://api.runpod.io/v2``).

Read from RunPod's own OpenAPI document of v2, ``api-reference-v2/openapi.json`` in its docs repository
(github.com/runpod/docs, commit a900806e253c4f8c16da27d1a4370e72456da4cb; kept as
``tests/fixtures/runpod/openapi-v2.json``, which the contract test holds this adapter to), and from
``api-reference-v2/migrate-from-v1.mdx``. REST v1 (``rest.runpod.io/v1``) was retired on 2026-11-15
(``api-reference/overview.mdx``, ``release-notes.mdx``); this adapter does not speak it.

Operations used, and the fields read or sent:

- Authentication (``bearerAuth``): ``Authorization: Bearer <api key>``; 401 without it, 403 when the key may not
  do what is asked. Errors are RFC 9457 problems (``ErrorResponse``: ``title``, ``status``, ``detail``, optional
  ``errors``, as ``application/problem+json``). A 429 (``TooManyRequestsError``) carries ``Retry-After`` in whole
  seconds.
- ``createPod``, ``POST /v2/pods`` with a ``CreatePodRequest``: ``name``, ``image``, ``cloud`` (``SECURE`` |
  ``COMMUNITY``), ``disk`` (container disk in GB), ``env`` (string to string), ``ports`` (``"<port>/tcp"``),
  ``args`` (one string, passed to the image's entrypoint), and exactly one of ``gpu`` (``CreateGpuConfig``: ``id``,
  ``count``) or ``cpu`` (``CreateCpuConfig``: ``id``, ``vcpuCount``, a power of two, at least 2). ``201`` with the
  ``Pod``. The operation's own table of refusals: ``422`` the body breaks the contract; ``400`` a cross-field rule
  or no capacity for this GPU and data center (capacity has no code of its own, only ``detail``); ``402``
  insufficient balance; ``403`` no access to the pool; ``429`` back off for ``Retry-After``; ``5xx`` transient.
- ``listPods``, ``GET /v2/pods``: ``{"pods": [Pod, ...]}``. The document gives this operation no pagination (its
  one parameter is ``includeClusterPods``; ``ListPodsResponse`` has only ``pods``), so one reply is the listing.
- ``getPod``, ``GET /v2/pods/{id}``: one ``Pod``; ``404`` once deleted.
- ``deletePod``, ``DELETE /v2/pods/{id}``: ``204``; it also destroys the pod's disk, which is what stops a stopped
  pod's storage billing.
- ``listGpuTypes``, ``GET /v2/catalog/gpus?include=AVAILABILITY&product=POD&cloud=<cloud>``: ``GpuType.id``,
  ``secure`` / ``community``, ``price.<cloud>``, ``maxCount.<cloud>`` (most GPUs on one pod) and ``availability``
  (``NONE`` | ``LOW`` | ``MEDIUM`` | ``HIGH``).
- ``getCpuType``, ``GET /v2/catalog/cpus/{id}``: ``vcpu.min``, ``vcpu.max``, ``ramGbPerVcpu``.

``Pod`` fields read: ``id``, ``name``, ``status`` (``PodStatus``: ``PROVISIONING``, ``STARTING``, ``RUNNING``,
``EXITED``, ``ERROR``, ``TERMINATED``), ``env``, ``gpu.id``, ``gpu.count``, ``runtime.ports[]`` (``private``,
``public``, ``type``, ``ip``; ``runtime`` is null unless RUNNING), ``startedAt`` (ISO 8601 date-time or null).

What follows from them:

- Tags. RunPod pods carry no labels, so the tags travel in the pod ``name`` (``gpucluster-<node>-<uid>``, at most 63
  characters) and in ``env`` (``GPUCLUSTER_NODE``, ``GPUCLUSTER_POD_NAMESPACE``, ``GPUCLUSTER_POD_NAME``,
  ``GPUCLUSTER_POD_UID``, ``GPUCLUSTER_GPU_TYPE``, ``GPUCLUSTER_PORTS``), which ``listPods`` returns. Env values
  go to RunPod in plain text and come back on every read of the pod (README, "Secrets").
- Never two billed pods for one replica. ``createPod`` is sent once per attempt and never retried blindly: after a
  5xx or no answer (a pod may have been created all the same), the pod is looked up by its name and tags first and
  adopted when it exists; only when the listing shows none is the create sent again. When that listing cannot be
  read, the create fails without another attempt (reconciliation deletes a pod created anyway, as an orphan).
  A 429 is waited out for its ``Retry-After`` and sent again (nothing was created).
- Refusals. A 400 in RunPod's words for no capacity ("There are no longer any instances available ...") is a
  ``CapacityError``: nothing was created, so the service tries the next provider of the same placement. Other
  400s, 402, 403 and 422 fail the create with what RunPod said. After a 402 every GPU type is offered as
  0 free for ``REFUSAL_HOLD`` seconds, after a 403 the refused GPU type, so selection places elsewhere meanwhile.
- Availability. ``offers()`` reads the catalogue: a type RunPod lists as ``NONE``, or not at all, or not in the
  configured cloud, is 0 free and selection does not choose RunPod for it; otherwise up to ``maxCount`` of the
  cloud (capped by ``maxGpus``), at the catalogue's price. The catalogue is not a reservation: a create can still
  be refused for capacity.
- Disks. ``disk`` is sent as configured (``containerDiskGb``) and ``mounts`` never, so no persistent volume exists
  to bill after a stop (v1's ``volumeInGb`` defaulted to one).
- CPU and memory. A pod without GPUs becomes a CPU pod of the configured flavor with the fewest vCPUs (a power of
  two, at least the flavor's minimum) that cover its CPU request and, at ``ramGbPerVcpu``, its memory request;
  a request above the flavor's maximum is refused. A GPU pod gets the CPU and memory RunPod gives its GPUs:
  ``CreatePodRequest`` has no CPU or memory field for one.
- Status. ``PROVISIONING`` and ``STARTING`` are creating; ``RUNNING`` is running once every wanted port has a
  public port and address in ``runtime.ports`` (creating until then, and the service fails the pod after
  ``creationTimeout`` if that never comes); ``EXITED`` means stopped (RunPod restarts a container that exits by
  itself, and a stopped pod bills its disk), reported as exited so the pod fails and the pod is deleted;
  ``ERROR`` is failed, ``TERMINATED`` terminated. A pod seen running that starts again (back to ``STARTING``, or a
  later ``startedAt``) had its container exit and restarted by RunPod, still billing: it is reported failed, so the
  replica is replaced and the pod deleted.

Not covered: logs (``getPodLogs`` streams Server-Sent Events on an open connection, which this JSON client does not
read; ``logs()`` names the endpoint instead). A RunPod pod runs one container, with no entrypoint override (the
body has ``args`` only): a pod with several containers, or one that sets ``command``, is refused at create.
"""

from __future__ import annotations

import logging
import math
import re
import shlex
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from contract.burst_settings import RUNPOD_V2_URL
from contract.times import unix_seconds
from daemons.burst_provider import replies
from daemons.burst_provider.http_client import HttpStatusError, JsonHttpClient, UnreachableError
from daemons.burst_provider.providers.base import (
    AdapterContext,
    CapacityError,
    GpuTypePrice,
    GpuTypeSettingsLike,
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

DEFAULT_URL = RUNPOD_V2_URL
NAME_PREFIX = "gpucluster-"
NAME_LIMIT = 63
ENV_NODE = "GPUCLUSTER_NODE"
ENV_NAMESPACE = "GPUCLUSTER_POD_NAMESPACE"
ENV_POD = "GPUCLUSTER_POD_NAME"
ENV_UID = "GPUCLUSTER_POD_UID"
ENV_GPU_TYPE = "GPUCLUSTER_GPU_TYPE"
ENV_PORTS = "GPUCLUSTER_PORTS"
#: How RunPod words a 400 for capacity (it has no code of its own), as its API and clients have reported it: "There
#: are no longer any instances available with the requested specifications. Please refresh and try again." (runpodctl
#: #189, runpod-python's QueryError), "... with the request specifications. Please try again later." (dstack #1740),
#: "... with enough disk space." (runpod-python #297). Such a refusal created nothing: the service tries the next
#: provider at once.
NO_CAPACITY_DETAIL = re.compile(r"no longer any instances available", re.IGNORECASE)
#: Seconds after a 402 (balance) or 403 (pool) during which offers() reports the refused GPUs as 0 free.
REFUSAL_HOLD = 300.0
#: What createPod's refusals mean, from the operation's own table in the OpenAPI document.
REFUSALS = {
    400: "refused: no capacity for this GPU type and data center, or a rule the request breaks",
    402: "refused: insufficient RunPod balance; no create will succeed until it is topped up",
    403: "refused: the API key may not use this GPU pool or action",
    422: "refused: the request does not match RunPod's v2 contract",
}
#: RunPod GPU type ids for our GPU type names, used when a GPU type's ``providerType`` is left empty; any other name
#: is sent as it is (RunPod refuses an id it does not know, which fails the create with its message).
DEFAULT_GPU_TYPE_IDS = {
    "H100": "NVIDIA H100 80GB HBM3",
    "H200": "NVIDIA H200",
    "A100": "NVIDIA A100-SXM4-80GB",
    "L40S": "NVIDIA L40S",
}
_AVAILABLE = frozenset({"LOW", "MEDIUM", "HIGH"})
#: Most pods whose first start this adapter remembers (to see a restart); the oldest are forgotten first.
_STARTS_KEPT = 10_000


# --- field helpers -------------------------------------------------------------------------------------------------


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


def vcpus_for(cpu_millis: int, memory_bytes: int, vcpu_min: int, vcpu_max: int, ram_gb_per_vcpu: float) -> int | None:
    """The fewest vCPUs, a power of two within the flavor's range, that cover the CPU and memory requests."""
    need = max(2, vcpu_min, math.ceil(cpu_millis / 1000))
    if memory_bytes > 0 and ram_gb_per_vcpu > 0:
        need = max(need, math.ceil(memory_bytes / 1e9 / ram_gb_per_vcpu))
    count = 1 << (need - 1).bit_length()
    return count if count <= vcpu_max else None


@dataclass(frozen=True)
class _RuntimePort:
    private: int
    public: int | None
    type: str
    ip: str


@dataclass(frozen=True)
class _PodFields:
    """The fields of one v2 ``Pod`` this adapter reads, type-checked (see the module docstring)."""

    id: str
    name: str
    status: str
    env: dict[str, str]
    gpu_id: str
    gpu_count: int
    ports: tuple[_RuntimePort, ...]
    started_at: str


def _runtime_ports(value: object, field: str) -> tuple[_RuntimePort, ...]:
    join = replies.join
    runtime = replies.opt_obj(value, field)
    ports_field = join(field, "ports")
    out: list[_RuntimePort] = []
    for i, item in enumerate(replies.opt_items(runtime.get("ports"), ports_field)):
        f = join(ports_field, i)
        port = replies.obj(item, f)
        out.append(
            _RuntimePort(
                private=replies.integer(port.get("private"), join(f, "private"), low=1, high=65535),
                public=replies.opt_integer(port.get("public"), join(f, "public"), low=1, high=65535),
                type=replies.opt_text(port.get("type"), join(f, "type"), max_len=16),
                ip=replies.opt_text(port.get("ip"), join(f, "ip"), max_len=253),
            )
        )
    return tuple(out)


def _pod_fields(value: object, field: str) -> _PodFields:
    """A ``Pod`` object from a reply; ReplyError naming the field when one has the wrong type or size."""
    join = replies.join
    pod = replies.obj(value, field)
    gpu = replies.opt_obj(pod.get("gpu"), join(field, "gpu"))
    gpu_count = 0
    if gpu:
        gpu_count = replies.opt_integer(gpu.get("count"), join(field, "gpu.count"), high=1024) or 1
    return _PodFields(
        id=replies.text(pod.get("id"), join(field, "id"), max_len=256),
        name=replies.opt_text(pod.get("name"), join(field, "name"), max_len=256),
        status=replies.text(pod.get("status"), join(field, "status"), max_len=64),
        env=replies.string_map(pod.get("env"), join(field, "env")),
        gpu_id=replies.opt_text(gpu.get("id"), join(field, "gpu.id"), max_len=256),
        gpu_count=gpu_count,
        ports=_runtime_ports(pod.get("runtime"), join(field, "runtime")),
        started_at=replies.opt_text(pod.get("startedAt"), join(field, "startedAt"), max_len=64),
    )


# --- the adapter ---------------------------------------------------------------------------------------------------


class RunPodProvider(Provider):
    """RunPod pods as instances. Thread-safe: the HTTP client is stateless; the refusal holds and the first starts
    seen are kept under a lock."""

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
        cpu_flavor: str = "cpu5c",
        timeout: float = 10.0,
        retries: int = 2,
        backoff: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not api_key:
            raise ValueError(f"provider {name}: the RunPod API key is empty")
        if cloud_type not in ("SECURE", "COMMUNITY"):
            raise ValueError(f"provider {name}: cloudType {cloud_type!r} is not SECURE or COMMUNITY")
        if container_disk_gb < 1:
            raise ValueError(f"provider {name}: containerDiskGb {container_disk_gb} is below RunPod's minimum of 1")
        self.name = name
        self.gpu_types = dict(gpu_types)
        self.max_gpus = max_gpus
        self.cloud_type = cloud_type
        self.container_disk_gb = container_disk_gb
        self.cpu_flavor = cpu_flavor
        self.retries = retries
        self.backoff = backoff
        self._clock = clock
        self._sleep = sleep
        self._http = JsonHttpClient(name, url, token=api_key, timeout=timeout, retries=retries, backoff=backoff)
        self._by_provider_type = {self.runpod_gpu_id(ours): ours for ours in self.gpu_types}
        self._lock = threading.Lock()
        self._held: dict[str, float] = {}  # "*" (402) or a GPU type (403) -> until when offers report 0 free
        self._first_start: dict[str, str] = {}  # pod id -> the startedAt it first ran with

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
            container_disk_gb=int(rp.container_disk_gb),
            cpu_flavor=str(rp.cpu_flavor),
        )

    def __repr__(self) -> str:
        return f"RunPodProvider(name={self.name!r}, url={self._http.base_url!r})"

    # -- Provider --

    def offers(self) -> list[Offer]:
        """Free GPUs per configured type from the catalogue (``listGpuTypes`` with pod availability)."""
        call = "offers"
        query = {"include": "AVAILABILITY", "product": "POD", "cloud": self.cloud_type}
        reply = self._http.request(call, "GET", "/catalog/gpus", query=query)
        try:
            catalogue = self._catalogue(reply)
        except ReplyError as exc:
            raise replies.provider_error(self.name, call, exc) from None
        out: list[Offer] = []
        for ours, configured in sorted(self.gpu_types.items()):
            entry = catalogue.get(self.runpod_gpu_id(ours))
            free, price = 0, configured.price_per_gpu_hour
            if entry is not None and entry["in_cloud"] and entry["availability"] in _AVAILABLE:
                free = min(self.max_gpus, entry["max_count"])
                price = entry["price"] or price
            if self._is_held(ours):
                free = 0
            out.append(Offer(ours, price, free))
        return out

    def create_instance(self, spec: InstanceSpec) -> Instance:
        call = "create_instance"
        body = self.pod_body(spec)
        attempts = 1 + max(self.retries, 0)
        for attempt in range(attempts):
            last = attempt == attempts - 1
            try:
                reply = self._http.request(call, "POST", "/pods", body=body, retry=False)
            except HttpStatusError as exc:
                if exc.status == 429 and not last:
                    self._sleep(min(exc.retry_after if exc.retry_after is not None else self._backoff(attempt), 60))
                    continue
                if exc.status < 500:
                    raise self._refused(spec, exc) from None
                uncertain: ProviderError = exc
            except UnreachableError as exc:
                uncertain = exc
            else:
                inst = self._instance(call, reply, "reply", fallback_tags=spec.tags)
                log.info(
                    "pod created", extra={"provider": self.name, "pod_id": inst.instance_id, "pod": spec.tags.key()}
                )
                return inst
            # A 5xx or no answer: RunPod may have created the pod anyway. Look before sending the create again.
            try:
                found = self._find(spec.tags)
            except ProviderError as exc:
                raise ProviderError(
                    self.name,
                    call,
                    f"{uncertain.detail}; whether a pod was created anyway is unknown (listing pods failed: "
                    f"{exc.detail}), so the create is not sent again",
                ) from None
            if found is not None:
                log.warning(
                    "create answered with an error but the pod exists: adopted",
                    extra={"provider": self.name, "pod_id": found.instance_id, "pod": spec.tags.key()},
                )
                return found
            if last:
                raise ProviderError(
                    self.name, call, f"{uncertain.detail} ({attempts} attempts; no pod named {body['name']} exists)"
                )
            self._sleep(self._backoff(attempt))
        raise ProviderError(self.name, call, "no attempt made")  # unreachable: attempts >= 1

    def get_instance(self, instance_id: str) -> Instance | None:
        reply = self._http.request("get_instance", "GET", f"/pods/{_quote(instance_id)}", missing_ok=True)
        if reply is None:
            self._forget_start(instance_id)
            return None
        return self._instance("get_instance", reply, "reply")

    def delete_instance(self, instance_id: str) -> None:
        """``deletePod``: the pod and its disk go, so nothing of it bills any more."""
        self._http.request("delete_instance", "DELETE", f"/pods/{_quote(instance_id)}", missing_ok=True)
        self._forget_start(instance_id)

    def list_instances(self, node: str) -> list[Instance]:
        call = "list_instances"
        return [inst for inst in self._list(call) if inst.tags.node == node]

    def logs(self, instance_id: str, container: str, tail: int | None) -> str:
        return (
            f"provider {self.name}: RunPod streams logs as Server-Sent Events (GET /v2/pods/{instance_id}/logs), "
            "which this adapter does not read; see the pod in the RunPod console for its logs\n"
        )

    # -- translation --

    def runpod_gpu_id(self, gpu_type: str) -> str:
        """RunPod's GPU type id for ours: the configured providerType, else a known id, else our name."""
        return runpod_gpu_id(self.gpu_types, gpu_type)

    def pod_body(self, spec: InstanceSpec) -> dict[str, Any]:
        """The ``CreatePodRequest`` for one pod; refuses what RunPod cannot run."""

        def refuse(detail: str) -> ProviderError:
            return ProviderError(self.name, "create_instance", detail)

        if len(spec.containers) != 1:
            raise refuse(f"RunPod runs one container per pod; this pod has {len(spec.containers)}")
        container = spec.containers[0]
        if container.command:
            raise refuse(
                f"container {container.name} sets command: RunPod's v2 create takes no entrypoint, only args "
                "passed to the image's own entrypoint; put the command in the image or in args"
            )
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
                raise refuse(f"port {port.port}/{port.protocol}: RunPod exposes TCP only")
            ports.append(f"{port.port}/tcp")
        body: dict[str, Any] = {
            "name": pod_name(spec.tags),
            "image": container.image,
            "cloud": self.cloud_type,
            "disk": self.container_disk_gb,
            "env": env,
            "ports": ports,
        }
        if container.args:
            body["args"] = shlex.join(container.args)
        if spec.gpu_count > 0:
            if spec.gpu_type not in self.gpu_types:
                raise refuse(f"GPU type {spec.gpu_type!r} is not configured for this provider")
            body["gpu"] = {"id": self.runpod_gpu_id(spec.gpu_type), "count": spec.gpu_count}
        else:
            body["cpu"] = {"id": self.cpu_flavor, "vcpuCount": self._vcpus(spec)}
        return body

    def _vcpus(self, spec: InstanceSpec) -> int:
        call = "create_instance"
        reply = self._http.request(call, "GET", f"/catalog/cpus/{_quote(self.cpu_flavor)}")
        try:
            flavor = replies.obj(reply, "reply")
            vcpu = replies.obj(flavor.get("vcpu"), "reply.vcpu")
            low = replies.integer(vcpu.get("min"), "reply.vcpu.min", high=4096)
            high = replies.integer(vcpu.get("max"), "reply.vcpu.max", high=4096)
            ram = replies.number(flavor.get("ramGbPerVcpu"), "reply.ramGbPerVcpu", high=4096)
        except ReplyError as exc:
            raise replies.provider_error(self.name, call, exc) from None
        count = vcpus_for(spec.cpu_millis, spec.memory_bytes, low, high, ram)
        if count is None:
            raise ProviderError(
                self.name,
                call,
                f"CPU flavor {self.cpu_flavor} offers at most {high} vCPUs ({high * ram:g} GB); the pod asks for "
                f"{spec.cpu_millis}m CPU and {spec.memory_bytes / 1e9:.3g} GB of memory",
            )
        return count

    # -- replies --

    def _catalogue(self, reply: object) -> dict[str, dict[str, Any]]:
        join = replies.join
        gpus = replies.items(replies.obj(reply, "reply").get("gpus"), "reply.gpus")
        cloud = self.cloud_type.lower()
        out: dict[str, dict[str, Any]] = {}
        for i, item in enumerate(gpus):
            f = f"reply.gpus[{i}]"
            gpu = replies.obj(item, f)
            price = replies.opt_obj(gpu.get("price"), join(f, "price"))
            max_count = replies.opt_obj(gpu.get("maxCount"), join(f, "maxCount"))
            in_cloud = gpu.get(cloud)
            out[replies.text(gpu.get("id"), join(f, "id"), max_len=256)] = {
                "in_cloud": in_cloud is True,
                "availability": replies.opt_text(gpu.get("availability"), join(f, "availability"), max_len=16),
                "max_count": replies.opt_integer(max_count.get(cloud), join(f, f"maxCount.{cloud}"), high=1024) or 0,
                "price": replies.opt_number(price.get(cloud), join(f, f"price.{cloud}")),
            }
        return out

    def _list(self, call: str, name: str = "") -> list[Instance]:
        """Our pods in the listing (a name: only the pod of that name)."""
        reply = self._http.request(call, "GET", "/pods")
        try:
            pods = replies.items(replies.obj(reply, "reply").get("pods"), "reply.pods")
        except ReplyError as exc:
            raise replies.provider_error(self.name, call, exc) from None
        out: list[Instance] = []
        for i, item in enumerate(pods):
            field = f"reply.pods[{i}]"
            try:
                pod = replies.obj(item, field)
                env = replies.opt_obj(pod.get("env"), f"{field}.env")
            except ReplyError as exc:
                raise replies.provider_error(self.name, call, exc) from None
            # Other pods of the account are none of this adapter's business; only ours are read field by field.
            named = pod.get("name")
            ours = isinstance(named, str) and named.startswith(NAME_PREFIX) and (not name or named == name)
            if ours and isinstance(env.get(ENV_NODE), str):
                out.append(self._instance(call, pod, field))
        return out

    def _find(self, tags: InstanceTags) -> Instance | None:
        """The pod created for these tags, if any (looked up by name and tags, before a create is sent again)."""
        for inst in self._list("create_instance", name=pod_name(tags)):
            if inst.tags == tags:
                return inst
        return None

    def _refused(self, spec: InstanceSpec, exc: HttpStatusError) -> ProviderError:
        meaning = REFUSALS.get(exc.status, "refused")
        if exc.status == 402:
            self._hold("*")
        elif exc.status == 403:
            self._hold(spec.gpu_type)
        elif exc.status == 400 and NO_CAPACITY_DETAIL.search(exc.detail):
            return CapacityError(self.name, "create_instance", f"no capacity ({exc.detail})")
        return ProviderError(self.name, "create_instance", f"{meaning} ({exc.detail})")

    def _hold(self, key: str) -> None:
        with self._lock:
            self._held[key] = self._clock() + REFUSAL_HOLD

    def _is_held(self, gpu_type: str) -> bool:
        now = self._clock()
        with self._lock:
            return any(self._held.get(k, 0.0) > now for k in ("*", gpu_type))

    def _backoff(self, attempt: int) -> float:
        return float(self.backoff * (2**attempt))

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
        public = {p.private: p for p in pod.ports if p.type == "tcp" and p.public is not None and p.ip}
        state, message = self._state(pod, wanted, public)
        running = state is InstanceState.RUNNING
        address = ""
        if running:
            address = next((p.ip for p in public.values()), "")
        ports = tuple(
            Port(port=public[p.port].public or p.port, protocol=p.protocol, name=p.name) for p in wanted if running
        )
        return Instance(
            provider=self.name,
            instance_id=pod.id,
            tags=tags,
            state=state,
            gpu_type=gpu_type,
            gpu_count=pod.gpu_count,
            address=address,
            ports=ports,
            message=message,
            started_at=unix_seconds(pod.started_at) if running else None,
        )

    def _state(
        self, pod: _PodFields, wanted: list[Port], public: Mapping[int, _RuntimePort]
    ) -> tuple[InstanceState, str]:
        status = pod.status
        restarted = "the container exited and RunPod restarted it (the pod keeps billing); the replica is replaced"
        if status == "RUNNING":
            if self._restarted(pod.id, pod.started_at):
                return InstanceState.FAILED, restarted
            if all(p.port in public for p in wanted):
                return InstanceState.RUNNING, ""
            return InstanceState.CREATING, "running, waiting for a public address and port for every port"
        if status in ("PROVISIONING", "STARTING"):
            with self._lock:
                seen = pod.id in self._first_start
            if seen:
                return InstanceState.FAILED, restarted
            return InstanceState.CREATING, status.lower()
        if status == "EXITED":
            return InstanceState.EXITED, "stopped (EXITED); its disk bills until the pod is deleted"
        if status == "ERROR":
            return InstanceState.FAILED, "the container is in an unrecoverable error state (ERROR)"
        if status == "TERMINATED":
            return InstanceState.TERMINATED, "the pod was terminated"
        return InstanceState.CREATING, f"unrecognised status {replies.shown(status)}"

    def _restarted(self, pod_id: str, started_at: str) -> bool:
        """Whether a RUNNING pod started again since it was first seen running (remembering its first start)."""
        with self._lock:
            first = self._first_start.get(pod_id)
            if first is None:
                if len(self._first_start) >= _STARTS_KEPT:
                    self._first_start.pop(next(iter(self._first_start)))
                self._first_start[pod_id] = started_at
                return False
            return bool(started_at) and bool(first) and started_at != first

    def _forget_start(self, pod_id: str) -> None:
        with self._lock:
            self._first_start.pop(pod_id, None)


def runpod_gpu_id(gpu_types: Mapping[str, GpuTypeSettingsLike], gpu_type: str) -> str:
    """RunPod's GPU type id for one of a provider's GPU types: its providerType, else a known id, else our name."""
    configured = gpu_types.get(gpu_type)
    if configured is not None and configured.provider_type:
        return configured.provider_type
    return DEFAULT_GPU_TYPE_IDS.get(gpu_type, gpu_type)


def _quote(instance_id: str) -> str:
    return urllib.parse.quote(instance_id, safe="")
