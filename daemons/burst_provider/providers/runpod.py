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

import http.client
import json
import logging
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from daemons.burst_provider.providers.base import (
    Instance,
    InstanceSpec,
    InstanceState,
    InstanceTags,
    Offer,
    Port,
    Provider,
    ProviderError,
)

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


# --- what the adapters read from the settings (the real pydantic models satisfy these) ---------------------------


class GpuTypeSettingsLike(Protocol):
    @property
    def price_per_gpu_hour(self) -> float: ...

    @property
    def provider_type(self) -> str | None: ...


class RunpodSettingsLike(Protocol):
    @property
    def url(self) -> str: ...

    @property
    def api_key_secret(self) -> str: ...

    @property
    def cloud_type(self) -> str: ...


class FakeSettingsLike(Protocol):
    @property
    def url(self) -> str: ...


class ProviderSettingsLike(Protocol):
    """The slice of ``settings.ProviderSettings`` the adapters need."""

    @property
    def name(self) -> str: ...

    @property
    def max_gpus(self) -> int: ...

    @property
    def gpu_types(self) -> Mapping[str, GpuTypeSettingsLike]: ...

    @property
    def runpod(self) -> RunpodSettingsLike | None: ...

    @property
    def fake(self) -> FakeSettingsLike | None: ...


class SecretsLike(Protocol):
    def get(self, name: str) -> str: ...


@dataclass(frozen=True)
class GpuTypePrice:
    """Our GPU type's configured price, and the provider's own id for it (RunPod: a ``gpuTypeIds`` entry)."""

    price_per_gpu_hour: float
    provider_type: str = ""


def prices_from_settings(gpu_types: Mapping[str, GpuTypeSettingsLike]) -> dict[str, GpuTypePrice]:
    return {name: GpuTypePrice(float(t.price_per_gpu_hour), t.provider_type or "") for name, t in gpu_types.items()}


# --- JSON over HTTP with timeouts, bounded retries and a key that never shows ---------------------------------------


class _Redacted:
    """Holds a credential; its repr and str never show it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "<redacted>"

    __str__ = __repr__


_RETRYABLE_METHODS = frozenset({"GET", "DELETE"})
_DETAIL_LIMIT = 300


class JsonHttpClient:
    """A small JSON client: every call has a timeout; GET and DELETE are retried on 5xx, 429 and network errors.

    Errors become ``ProviderError(provider, call, detail)``; the bearer token is scrubbed from every detail.
    """

    def __init__(
        self,
        provider: str,
        base_url: str,
        *,
        token: str | None = None,
        timeout: float = 10.0,
        retries: int = 2,
        backoff: float = 0.5,
    ) -> None:
        self.provider = provider
        self.base_url = base_url.rstrip("/")
        self._token = _Redacted(token) if token else None
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff

    def __repr__(self) -> str:
        return f"JsonHttpClient(provider={self.provider!r}, base_url={self.base_url!r})"

    def _scrub(self, text: str) -> str:
        if self._token is not None and self._token.reveal():
            text = text.replace(self._token.reveal(), "<redacted>")
        return text[:_DETAIL_LIMIT]

    def _error(self, call: str, detail: str) -> ProviderError:
        return ProviderError(self.provider, call, self._scrub(detail))

    def request(
        self,
        call: str,
        method: str,
        path: str,
        *,
        body: object = None,
        query: Mapping[str, str] | None = None,
        missing_ok: bool = False,
        want_text: bool = False,
    ) -> Any:
        """The parsed JSON reply (None for an empty reply, or for 404 when ``missing_ok``)."""
        url = self.base_url + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        attempts = 1 + (self.retries if method in _RETRYABLE_METHODS else 0)
        for attempt in range(attempts):
            last = attempt == attempts - 1
            try:
                status, raw = self._once(method, url, body)
            except urllib.error.HTTPError as exc:
                if exc.code == 404 and missing_ok:
                    return None
                retryable = exc.code >= 500 or exc.code == 429
                if retryable and not last:
                    self._sleep(attempt)
                    continue
                raise self._error(call, f"HTTP {exc.code}: {_error_text(exc)}") from None
            except (OSError, http.client.HTTPException) as exc:  # URLError, timeouts, resets
                if not last:
                    self._sleep(attempt)
                    continue
                reason = getattr(exc, "reason", exc)
                raise self._error(call, f"unreachable ({method} {self.base_url}): {reason}") from None
            return self._decode(call, status, raw, want_text)
        raise self._error(call, "no attempt made")  # unreachable: attempts >= 1

    def _once(self, method: str, url: str, body: object) -> tuple[int, bytes]:
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self._token is not None:
            headers["Authorization"] = "Bearer " + self._token.reveal()
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:
            return int(resp.status), resp.read()

    def _decode(self, call: str, status: int, raw: bytes, want_text: bool) -> Any:
        if want_text:
            return raw.decode("utf-8", errors="replace")
        if status == 204 or not raw.strip():
            return None
        try:
            return json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise self._error(call, f"reply is not JSON (HTTP {status}): {exc}") from None

    def _sleep(self, attempt: int) -> None:
        if self.backoff > 0:
            time.sleep(self.backoff * (2**attempt))


def _error_text(exc: urllib.error.HTTPError) -> str:
    """The server's error message: ``{"error": ...}`` or ``{"message": ...}`` when JSON, else the raw text."""
    try:
        raw = exc.read()
    except OSError:
        raw = b""
    text = raw.decode("utf-8", errors="replace").strip()
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        return text or str(exc.reason)
    if isinstance(parsed, dict):
        for key in ("error", "message", "detail"):
            if isinstance(parsed.get(key), str):
                return str(parsed[key])
    return text


# --- field helpers -------------------------------------------------------------------------------------------------


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def _int(value: object, default: int = 0) -> int:
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return default


def _iso_to_unix(value: object) -> float | None:
    if not isinstance(value, str) or not value:
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
        if number.isdigit():
            ports.append(Port(port=int(number), protocol=proto or "TCP", name=name))
    return ports


def pod_name(tags: InstanceTags) -> str:
    """``gpucluster-<node>-<uid>``; the node part is shortened so the name stays within 63 characters."""
    room = NAME_LIMIT - len(NAME_PREFIX) - 1 - len(tags.uid)
    node = tags.node[: max(room, 1)]
    return f"{NAME_PREFIX}{node}-{tags.uid}"[:NAME_LIMIT]


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
    def from_settings(cls, settings: ProviderSettingsLike, secrets: SecretsLike) -> RunPodProvider:
        rp = settings.runpod
        if rp is None:
            raise ValueError(f"provider {settings.name}: kind runpod needs a runpod section")
        return cls(
            settings.name,
            secrets.get(rp.api_key_secret),
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
        body = self.pod_body(spec)
        reply = self._http.request("create_instance", "POST", "/pods", body=body)
        pod = _dict(reply)
        if not _str(pod.get("id")):
            raise ProviderError(self.name, "create_instance", "reply has no pod id")
        log.info("pod created", extra={"provider": self.name, "pod_id": pod["id"], "instance": spec.tags.key()})
        return self._to_instance(pod, fallback_tags=spec.tags)

    def get_instance(self, instance_id: str) -> Instance | None:
        reply = self._http.request("get_instance", "GET", f"/pods/{_quote(instance_id)}", missing_ok=True)
        if reply is None:
            return None
        if not isinstance(reply, dict):
            raise ProviderError(self.name, "get_instance", f"reply is not a pod object: {type(reply).__name__}")
        return self._to_instance(reply)

    def delete_instance(self, instance_id: str) -> None:
        self._http.request("delete_instance", "DELETE", f"/pods/{_quote(instance_id)}", missing_ok=True)

    def stop_instance(self, instance_id: str) -> None:
        """Stop without deleting (``POST /pods/{id}/stop``); not part of the Provider interface."""
        self._http.request("stop_instance", "POST", f"/pods/{_quote(instance_id)}/stop")

    def list_instances(self, node: str) -> list[Instance]:
        reply = self._http.request("list_instances", "GET", "/pods")
        if not isinstance(reply, list):
            raise ProviderError(self.name, "list_instances", "reply is not a list of pods")
        out: list[Instance] = []
        for pod in reply:
            env = _dict(_dict(pod).get("env"))
            if env.get(ENV_NODE) == node and _str(_dict(pod).get("name")).startswith(NAME_PREFIX):
                out.append(self._to_instance(pod))
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

    def _to_instance(self, pod: dict[str, Any], fallback_tags: InstanceTags | None = None) -> Instance:
        env = _dict(pod.get("env"))
        tags = InstanceTags(
            node=_str(env.get(ENV_NODE)) or (fallback_tags.node if fallback_tags else ""),
            namespace=_str(env.get(ENV_NAMESPACE)) or (fallback_tags.namespace if fallback_tags else ""),
            pod=_str(env.get(ENV_POD)) or (fallback_tags.pod if fallback_tags else ""),
            uid=_str(env.get(ENV_UID)) or (fallback_tags.uid if fallback_tags else ""),
        )
        gpu = _dict(pod.get("gpu"))
        gpu_type = _str(env.get(ENV_GPU_TYPE)) or self._by_provider_type.get(_str(gpu.get("id")), "")
        wanted = decode_ports(_str(env.get(ENV_PORTS)))
        mappings = _dict(pod.get("portMappings"))
        public_ip = _str(pod.get("publicIp"))
        status = _str(pod.get("desiredStatus"))
        state, message = self._state(status, public_ip, wanted, mappings)
        ports = tuple(
            Port(port=_int(mappings.get(str(p.port)), p.port), protocol=p.protocol, name=p.name) for p in wanted
        )
        running = state is InstanceState.RUNNING
        return Instance(
            provider=self.name,
            instance_id=_str(pod.get("id")),
            tags=tags,
            state=state,
            gpu_type=gpu_type,
            gpu_count=_int(pod.get("gpuCount"), _int(gpu.get("count"))),
            address=public_ip if running else "",
            ports=ports if running else (),
            message=message,
            started_at=_iso_to_unix(pod.get("lastStartedAt")) if running else None,
        )

    @staticmethod
    def _state(status: str, public_ip: str, wanted: list[Port], mappings: dict[str, Any]) -> tuple[InstanceState, str]:
        if status == "RUNNING":
            if public_ip and all(str(p.port) in mappings for p in wanted):
                return InstanceState.RUNNING, ""
            return InstanceState.CREATING, "waiting for a public IP and port mappings"
        if status == "EXITED":
            return InstanceState.EXITED, "the pod exited"
        if status == "TERMINATED":
            return InstanceState.TERMINATED, "the pod was terminated"
        return InstanceState.CREATING, f"unrecognised desiredStatus {status!r}"


def _quote(instance_id: str) -> str:
    return urllib.parse.quote(instance_id, safe="")
