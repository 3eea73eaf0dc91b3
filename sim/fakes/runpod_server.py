"""A fake of RunPod's REST API v2 that follows its OpenAPI document: the RunPod adapter without an account.

The contract is RunPod's own document, kept as ``tests/fixtures/runpod/openapi-v2.json`` (its source, commit and
sha256 in the README beside it), read with the handler's rules in ``runpod_contract``;
``tests/sim/fakes/test_runpod_contract.py`` validates every reply this
fake sends against the document's response schemas. What the fake serves, under ``/v2``:

- ``POST /pods`` (createPod): the body is validated against ``CreatePodRequest`` itself (422 with ``errors`` when it
  does not match), then the handler's rules (exactly one of ``gpu`` or ``cpu``: 400), then capacity (400 with a
  ``detail`` only, as the document says capacity has no code of its own). 201 with the ``Pod``.
- ``GET /pods`` (listPods): ``{"pods": [...]}``; one reply is the whole listing (the document gives listPods no
  pagination). ``GET /pods/{id}`` (getPod), ``DELETE /pods/{id}`` (deletePod, 204), ``POST /pods/{id}/action``
  (podAction: ``start``, ``stop``, ``restart``, ``terminate``; 409 for an action the status does not allow).
- ``GET /catalog/gpus`` (listGpuTypes; ``include=AVAILABILITY`` requires ``product``, 400 otherwise) with
  availability from the capacity knob, ``GET /catalog/cpus/{id}`` (getCpuType).
- Errors are RFC 9457 problems (``title``, ``status``, ``detail``, ``errors``) as ``application/problem+json``;
  401 without the right bearer key, 404 for an unknown pod.

Behaviour: a created pod is ``PROVISIONING``, then ``STARTING``, then ``RUNNING`` with ``runtime.ports`` (a public
IP of TEST-NET-3, 203.0.113.x, and a public port per ``tcp`` port) ``boot_seconds`` after the create. ``stop`` ->
``EXITED``: ``cost`` is 0.0 then (the document's ``cost``), but its disk still bills (:meth:`FakeRunpod.billing`)
until it is deleted. A container that exits (:meth:`FakeRunpod.exit_container`) is restarted by RunPod: the pod goes
back to ``STARTING`` and keeps billing, then runs again with a later ``startedAt``.

Serving: with ``public_ip_pool`` set to a range of this machine's (the sim uses 198.19.0.0/24, made local by a
route), a running pod answers on each public IP and port it reports, as a model server would
(``fakes/replica.py``): 503 for ``model_load_seconds`` after it ran, then 200; a pod that stops, restarts, exits or
is deleted closes its ports (connection refused). With the default TEST-NET-3 range nothing listens.

Knobs, one per refusal: :meth:`~FakeRunpod.refuse` (the next creates answer 400 capacity, 402 balance or 403
permission, with RunPod's words), :meth:`~FakeRunpod.rate_limit` (429 with ``Retry-After``),
:meth:`~FakeRunpod.fail_after_create` (the pod is created and billed, the reply is a 5xx anyway),
``capacity`` per GPU type id (exhausted -> 400, and ``NONE`` in the catalogue), ``never_address`` (pods run but never
get public ports), :meth:`~FakeRunpod.inject` (the next replies are a given status and raw body), ``boot_seconds``.

Outside ``/v2``, not RunPod's and never recorded with the requests and replies above (JSON; errors
``{"error": "<what>"}``), for a test driving the fake as its own process: ``GET /healthz``; ``GET /admin/knobs`` and
``POST /admin/knobs`` (a partial update of ``bootSeconds``, ``pricePerGpuHour``, ``capacity`` (replaced whole),
``neverAddress``, and the queues ``refusals`` (statuses of the next refused creates), ``rateLimits`` (``Retry-After``
of the next 429s) and ``failAfterCreate`` (statuses of the next creates answered 5xx), each replaced whole, ``[]``
empties it); ``POST /admin/pods/{id}/exit`` (:meth:`~FakeRunpod.exit_container`), ``POST /admin/pods/{id}/status``
``{"status": "EXITED"}``; ``GET /admin/stats`` (pods, creates, refusals, deletes and what each pod bills).

As its own process: ``python -m sim.fakes.runpod_cli`` (``runpod_cli.py``). It validates creates against the
document, so it runs from a checkout of the project with the dev dependencies (``jsonschema``); importing it needs
neither, and nothing in production starts it.
"""

from __future__ import annotations

import ipaddress
import itertools
import json
import logging
import string
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sim.fakes._http import BackgroundServer, Clock, Reply
from sim.fakes.replica import ReplicaServer, can_listen
from sim.fakes.runpod_contract import (
    CPU_FLAVORS,
    create_rule_problem,
    problem,
    schema_errors,
)

log = logging.getLogger("fakes.runpod")

PREFIX = "/v2"
#: What RunPod says when a GPU type has no machine left (a 400 with a detail only).
NO_CAPACITY = "There are no longer any instances available with the requested specifications."
REFUSAL_DETAIL = {
    400: NO_CAPACITY,
    402: "Insufficient balance: add funds to your account to deploy this pod.",
    403: "Your account cannot access the requested GPU pool.",
}
ACTIONS = {
    "PROVISIONING": ["stop", "terminate"],
    "STARTING": ["stop", "terminate"],
    "RUNNING": ["stop", "restart", "terminate"],
    "EXITED": ["start", "terminate"],
    "ERROR": ["start", "terminate"],
}
#: The pod statuses of the document (``Pod.status``), which ``POST /admin/pods/{id}/status`` may set.
STATUSES = ("PROVISIONING", "STARTING", "RUNNING", "EXITED", "ERROR", "TERMINATED")
_KNOB_KEYS = ("bootSeconds", "pricePerGpuHour", "capacity", "neverAddress", "refusals", "rateLimits", "failAfterCreate")


@dataclass
class _Injection:
    status: int
    raw: bytes
    delay: float
    remaining: int


@dataclass
class FakePod:
    id: str
    body: dict[str, Any]
    created: float
    host: int
    status: str = "PROVISIONING"
    booting_since: float = 0.0
    started: float | None = None
    ports: list[dict[str, Any]] = field(default_factory=list)

    @property
    def gpu_id(self) -> str:
        gpu = self.body.get("gpu")
        return str(gpu["id"]) if gpu else ""

    @property
    def gpu_count(self) -> int:
        gpu = self.body.get("gpu")
        return int(gpu.get("count", 1)) if gpu else 0


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class FakeRunpod:
    """The API's state and rules, independent of HTTP (so tests can also drive it directly)."""

    def __init__(
        self,
        api_key: str,
        *,
        boot_seconds: float = 0.0,
        price_per_gpu_hour: float = 2.99,
        capacity: dict[str, int] | None = None,
        never_address: bool = False,
        public_ip_pool: str = "203.0.113.0/24",
        model_load_seconds: float = 20.0,
        request_seconds: float = 0.05,
        clock: Clock = time.time,
    ) -> None:
        self._key = api_key
        self.boot_seconds = boot_seconds
        self.price_per_gpu_hour = price_per_gpu_hour
        self.capacity = dict(capacity or {})
        self.never_address = never_address
        self._public_net = ipaddress.ip_network(public_ip_pool, strict=False)
        self.model_load_seconds = model_load_seconds
        self.request_seconds = request_seconds
        self._replicas: dict[str, tuple[float, list[ReplicaServer]]] = {}  # pod id -> (started, its ports)
        self._clock = clock
        self._pods: dict[str, FakePod] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._injections: list[_Injection] = []
        self._refusals: list[int] = []
        self._rate_limits: list[int] = []
        self._fail_after_create: list[int] = []
        self._counts = {"creates": 0, "refusals": 0, "deletes": 0}
        self.requests: list[tuple[str, str]] = []  # (method, path) seen, for tests
        self.bodies: list[tuple[str, str, dict[str, list[str]], object]] = []  # method, path, query, JSON body
        #: method, path, status, content type, body, headers of every reply sent
        self.replies: list[tuple[str, str, int, str, bytes, dict[str, str]]] = []

    # -- test knobs --

    def inject(self, status: int, raw: bytes | str = b"", *, times: int = 1, delay: float = 0.0) -> None:
        """Answer the next ``times`` requests with ``status`` and the raw body (after ``delay`` seconds)."""
        data = raw.encode() if isinstance(raw, str) else raw
        with self._lock:
            self._injections.append(_Injection(status, data, delay, times))

    def refuse(self, status: int, *, times: int = 1) -> None:
        """The next ``times`` creates are refused: 400 (no capacity), 402 (balance) or 403 (no access to the pool)."""
        if status not in REFUSAL_DETAIL:
            raise ValueError(f"refuse: {status} is not one of {sorted(REFUSAL_DETAIL)}")
        with self._lock:
            self._refusals.extend([status] * times)

    def rate_limit(self, *, times: int = 1, retry_after: int = 0) -> None:
        """The next ``times`` requests answer 429 with ``Retry-After: retry_after``."""
        with self._lock:
            self._rate_limits.extend([retry_after] * times)

    def fail_after_create(self, status: int = 502, *, times: int = 1) -> None:
        """The next ``times`` creates do create (and bill) the pod, then answer ``status`` anyway."""
        with self._lock:
            self._fail_after_create.extend([status] * times)

    def set_status(self, pod_id: str, status: str) -> None:
        with self._lock:
            self._pods[pod_id].status = status

    def exit_container(self, pod_id: str) -> None:
        """The pod's container exits by itself: RunPod restarts it (``STARTING``, still billing), then it runs again."""
        with self._lock:
            pod = self._pods[pod_id]
            pod.status, pod.booting_since, pod.ports = "STARTING", self._clock(), []

    def pod_count(self) -> int:
        with self._lock:
            return len(self._pods)

    def billing(self) -> dict[str, str]:
        """Pod id -> what it bills now: ``compute`` (provisioning to running, restarts too) or ``disk`` (stopped)."""
        with self._lock:
            return {
                p.id: "disk" if p.status in ("EXITED", "ERROR") else "compute"
                for p in self._pods.values()
                if p.status != "TERMINATED"
            }

    def knobs(self) -> dict[str, Any]:
        """The knobs as ``GET /admin/knobs`` shows them (camelCase; the queues in the order they are used)."""
        with self._lock:
            return self._knobs_json()

    def _knobs_json(self) -> dict[str, Any]:
        return {
            "bootSeconds": self.boot_seconds,
            "pricePerGpuHour": self.price_per_gpu_hour,
            "capacity": dict(self.capacity),
            "neverAddress": self.never_address,
            "refusals": list(self._refusals),
            "rateLimits": list(self._rate_limits),
            "failAfterCreate": list(self._fail_after_create),
        }

    def set_knobs(self, update: object) -> dict[str, Any]:
        """Apply a partial update of the knobs (``POST /admin/knobs``); ValueError naming the bad knob, nothing set."""
        if not isinstance(update, dict):
            raise ValueError("knobs must be a JSON object")
        unknown = sorted(set(update) - set(_KNOB_KEYS))
        if unknown:
            raise ValueError(f"unknown knobs {unknown}; known: {list(_KNOB_KEYS)}")
        parsed: dict[str, Any] = {}
        if "bootSeconds" in update:
            parsed["boot_seconds"] = _number(update["bootSeconds"], "bootSeconds", low=0.0)
        if "pricePerGpuHour" in update:
            parsed["price_per_gpu_hour"] = _number(update["pricePerGpuHour"], "pricePerGpuHour", low=0.0)
        if "capacity" in update:
            capacity = update["capacity"]
            if not isinstance(capacity, dict) or not all(_count(v) for v in capacity.values()):
                raise ValueError("capacity must be an object of RunPod GPU type id -> a whole number of GPUs >= 0")
            parsed["capacity"] = {str(k): int(v) for k, v in capacity.items()}
        if "neverAddress" in update:
            if not isinstance(update["neverAddress"], bool):
                raise ValueError(f"neverAddress must be true or false, got {update['neverAddress']!r}")
            parsed["never_address"] = update["neverAddress"]
        queues: dict[str, tuple[str, Callable[[Any], bool], str]] = {
            "refusals": ("_refusals", lambda v: v in REFUSAL_DETAIL, f"one of {sorted(REFUSAL_DETAIL)}"),
            "rateLimits": ("_rate_limits", _count, "a whole number of seconds >= 0"),
            "failAfterCreate": ("_fail_after_create", lambda v: _count(v) and 500 <= v <= 599, "a 5xx status"),
        }
        for key, (attr, valid, what) in queues.items():
            if key in update:
                items = update[key]
                if not isinstance(items, list) or not all(valid(v) for v in items):
                    raise ValueError(f"{key} must be a list, each item {what}, got {items!r}")
                parsed[attr] = [int(v) for v in items]
        with self._lock:
            for attr, value in parsed.items():
                setattr(self, attr, value)
            return self._knobs_json()

    def stats(self) -> dict[str, Any]:
        """What ``GET /admin/stats`` shows: pods now, creates, refused creates and deletes so far, billing per pod."""
        with self._lock:
            for pod in self._pods.values():
                self._advance(pod)
        billing = self.billing()
        with self._lock:
            return {"pods": len(self._pods), **self._counts, "billing": billing}

    # -- HTTP entry --

    def handle(
        self, method: str, path: str, query: dict[str, list[str]], body: bytes, headers: dict[str, str]
    ) -> Reply:
        if path == "/healthz" or path.startswith("/admin/"):
            return self._admin(method, [p for p in path.split("/") if p], body)
        reply = self._handle(method, path, query, body, headers)
        with self._lock:
            self._sync_replicas()
            self.replies.append((method, path, reply.status, reply.content_type, reply.raw, dict(reply.headers)))
        return reply

    def _handle(
        self, method: str, path: str, query: dict[str, list[str]], body: bytes, headers: dict[str, str]
    ) -> Reply:
        with self._lock:
            self.requests.append((method, path))
            try:
                parsed: object = json.loads(body) if body else None
            except (ValueError, RecursionError):
                parsed = body.decode("utf-8", errors="replace")
            self.bodies.append((method, path, query, parsed))
            injection = self._take_injection()
            retry_after = self._rate_limits.pop(0) if self._rate_limits else None
        if injection is not None:
            if injection.delay:
                time.sleep(injection.delay)
            return Reply(injection.status, raw=injection.raw, content_type="application/json")
        if headers.get("authorization") != f"Bearer {self._key}":
            return problem(
                401, "missing bearer token" if "authorization" not in headers else "the API key is not valid"
            )
        if retry_after is not None:
            return problem(
                429, "rate limit exceeded for the minute window", headers=(("Retry-After", str(retry_after)),)
            )
        if not path.startswith(PREFIX + "/"):
            return problem(404, f"no route {method} {path}")
        rest = path[len(PREFIX) :].strip("/").split("/")
        with self._lock:
            if rest[0] == "pods":
                return self._pods_route(method, rest[1:], body)
            if rest[:2] == ["catalog", "gpus"] and len(rest) == 2 and method == "GET":
                return self._gpu_catalogue(query)
            if rest[:2] == ["catalog", "cpus"] and len(rest) == 3 and method == "GET":
                return self._cpu_type(rest[2])
        return problem(404, f"no route {method} {path}")

    def _admin(self, method: str, parts: list[str], raw: bytes) -> Reply:
        """The fake's own routes (health, knobs, pod events, stats): not RunPod's API, so not recorded."""
        try:
            body: object = json.loads(raw) if raw.strip() else {}
        except (ValueError, RecursionError) as exc:
            return Reply(400, {"error": f"invalid JSON body: {exc}"})
        match (method, *parts):
            case ("GET", "healthz"):
                return Reply(200, raw=b"ok\n", content_type="text/plain")
            case ("GET", "admin", "knobs"):
                return Reply(200, self.knobs())
            case ("POST", "admin", "knobs"):
                try:
                    return Reply(200, self.set_knobs(body))
                except ValueError as exc:
                    return Reply(400, {"error": str(exc)})
            case ("GET", "admin", "stats"):
                return Reply(200, self.stats())
            case ("POST", "admin", "pods", pod_id, event):
                with self._lock:
                    known = pod_id in self._pods
                if not known:
                    return Reply(404, {"error": f"pod {pod_id} not found"})
                if event == "exit":
                    self.exit_container(pod_id)
                    return Reply(200, {"id": pod_id, "status": "STARTING"})
                if event == "status":
                    status = body.get("status") if isinstance(body, dict) else None
                    if status not in STATUSES:
                        return Reply(400, {"error": f"status must be one of {list(STATUSES)}, got {status!r}"})
                    self.set_status(pod_id, str(status))
                    return Reply(200, {"id": pod_id, "status": status})
        return Reply(404, {"error": f"no route {method} /{'/'.join(parts)}"})

    def _take_injection(self) -> _Injection | None:
        if not self._injections:
            return None
        first = self._injections[0]
        first.remaining -= 1
        if first.remaining <= 0:
            self._injections.pop(0)
        return first

    def _pods_route(self, method: str, parts: list[str], body: bytes) -> Reply:
        if not parts:
            if method == "POST":
                return self._create(body)
            if method == "GET":
                return Reply(200, {"pods": [self._render(p) for p in self._pods.values()]})
            return problem(405, "The requested method is not allowed for this path.")
        pod = self._pods.get(parts[0])
        if pod is None:
            return problem(404, "The requested Pod does not exist.")
        if len(parts) == 1 and method == "GET":
            return Reply(200, self._render(pod))
        if len(parts) == 1 and method == "DELETE":
            del self._pods[pod.id]
            self._counts["deletes"] += 1
            return Reply(204)
        if len(parts) == 2 and parts[1] == "action" and method == "POST":
            return self._action(pod, body)
        return problem(404, f"no route {method} /pods/{'/'.join(parts)}")

    # -- operations --

    def _create(self, raw: bytes) -> Reply:
        try:
            body = json.loads(raw or b"null")
        except (ValueError, RecursionError):
            return problem(400, "the request body is not JSON")
        errors = schema_errors("components/schemas/CreatePodRequest", body)
        if errors:
            return problem(422, "Request validation failed.", errors)
        rule = create_rule_problem(body)
        if rule:
            return problem(400, rule)
        if self._refusals:
            status = self._refusals.pop(0)
            self._counts["refusals"] += 1
            return problem(status, REFUSAL_DETAIL[status])
        gpu = body.get("gpu")
        if gpu is not None:
            cap = self.capacity.get(gpu["id"])
            if cap is not None and self._gpus_in_use(gpu["id"]) + int(gpu.get("count", 1)) > cap:
                self._counts["refusals"] += 1
                return problem(400, NO_CAPACITY)
        n = next(self._ids)
        pod_id = "".join(string.ascii_lowercase[(n * 7 + i * 3) % 26] for i in range(6)) + f"{n:08d}"
        now = self._clock()
        pod = FakePod(id=pod_id, body=body, created=now, host=n % 253 + 1, booting_since=now)
        self._pods[pod_id] = pod
        self._counts["creates"] += 1
        if self._fail_after_create:
            status = self._fail_after_create.pop(0)
            return problem(status, "upstream request failed")
        return Reply(201, self._render(pod))

    def _action(self, pod: FakePod, raw: bytes) -> Reply:
        try:
            body = json.loads(raw or b"null")
        except (ValueError, RecursionError):
            return problem(400, "the request body is not JSON")
        errors = schema_errors("components/schemas/PodActionRequest", body)
        if errors:
            return problem(422, "Request validation failed.", errors)
        self._advance(pod)
        action = body["action"]
        if action not in ACTIONS.get(pod.status, []):
            return problem(409, f"action {action} is not valid for a pod that is {pod.status}")
        if action == "terminate":
            del self._pods[pod.id]
            self._counts["deletes"] += 1
            return Reply(204)
        if action == "stop":
            pod.status, pod.ports = "EXITED", []
        else:  # start, restart
            pod.status, pod.booting_since, pod.ports = "STARTING", self._clock(), []
        return Reply(200, self._render(pod))

    def _gpus_in_use(self, gpu_id: str) -> int:
        return sum(p.gpu_count for p in self._pods.values() if p.gpu_id == gpu_id and p.status not in ("EXITED",))

    def _gpu_catalogue(self, query: dict[str, list[str]]) -> Reply:
        include = query.get("include", [""])[0]
        products = query.get("product", [""])[0]
        if bool(include) != bool(products):
            return problem(400, "product is required with include=AVAILABILITY, and valid only with it")
        ids = sorted(set(self.capacity) | {p.gpu_id for p in self._pods.values() if p.gpu_id})
        gpus = []
        for gpu_id in ids:
            entry: dict[str, Any] = {
                "id": gpu_id,
                "name": gpu_id.removeprefix("NVIDIA "),
                "pool": None,
                "manufacturer": "NVIDIA",
                "memory": 80,
                "secure": True,
                "community": True,
                "price": {"secure": self.price_per_gpu_hour, "community": round(self.price_per_gpu_hour * 0.8, 2)},
                "maxCount": {"secure": 8, "community": 8},
            }
            if include:
                cap = self.capacity.get(gpu_id)
                free = 8 if cap is None else cap - self._gpus_in_use(gpu_id)
                level = "NONE" if free <= 0 else "LOW" if free < 2 else "HIGH"
                entry["availability"] = level
                if level != "NONE":
                    entry["dataCenters"] = [{"id": "US-TX-3", "name": "US Texas 3", "availability": level}]
            gpus.append(entry)
        return Reply(200, {"gpus": gpus})

    def _cpu_type(self, flavor_id: str) -> Reply:
        flavor = CPU_FLAVORS.get(flavor_id)
        if flavor is None:
            return problem(404, f"CPU type {flavor_id} does not exist")
        return Reply(
            200,
            {
                "id": flavor_id,
                "name": flavor["name"],
                "group": flavor["group"],
                "vcpu": {"min": flavor["min"], "max": flavor["max"]},
                "ramGbPerVcpu": flavor["ram"],
                "price": {"securePerVcpu": flavor["price"], "serverlessPerVcpu": flavor["price"]},
            },
        )

    def _advance(self, pod: FakePod) -> None:
        """Provisioning -> starting at half the boot time -> running (with public ports) once it has passed."""
        if pod.status not in ("PROVISIONING", "STARTING"):
            return
        elapsed = self._clock() - pod.booting_since
        if elapsed < self.boot_seconds:
            if pod.status == "PROVISIONING" and elapsed >= self.boot_seconds / 2:
                pod.status = "STARTING"
            return
        pod.status, pod.started = "RUNNING", pod.booting_since + self.boot_seconds
        pod.ports = []
        if self.never_address:
            return
        for i, port in enumerate(self.body_ports(pod)):
            number, proto = port.split("/")
            pod.ports.append(
                {"private": int(number), "public": 10000 + pod.host * 10 + i, "type": proto, "ip": self._ip(pod)}
            )

    @staticmethod
    def body_ports(pod: FakePod) -> list[str]:
        return [str(p) for p in pod.body.get("ports", [])]

    def _ip(self, pod: FakePod) -> str:
        return str(self._public_net.network_address + pod.host)

    # -- serving: a running pod answers on its public ports where they are this machine's --

    def _sync_replicas(self) -> None:
        """Open the ports of pods that run, close those of pods that no longer do (caller holds the lock)."""
        for pod in self._pods.values():
            self._advance(pod)
        running = {p.id: p for p in self._pods.values() if p.status == "RUNNING" and p.ports}
        for pod_id in list(self._replicas):
            started, servers = self._replicas[pod_id]
            live = running.get(pod_id)
            if live is None or live.started != started:
                for server in servers:
                    server.stop()
                del self._replicas[pod_id]
        for pod in running.values():
            if pod.id in self._replicas:
                continue
            servers = []
            for port in pod.ports:
                if port["type"] != "tcp" or not can_listen(port["ip"]):
                    continue
                try:
                    servers.append(
                        ReplicaServer(
                            pod.id,
                            port["ip"],
                            int(port["public"]),
                            started_at=pod.started or self._clock(),
                            load_seconds=self.model_load_seconds,
                            service_seconds=self.request_seconds,
                            clock=self._clock,
                        )
                    )
                except OSError as exc:
                    log.warning("pod %s cannot serve on %s:%s: %s", pod.id, port["ip"], port["public"], exc)
            self._replicas[pod.id] = (pod.started or 0.0, servers)

    def close(self) -> None:
        """Close every pod's ports."""
        with self._lock:
            for _, servers in self._replicas.values():
                for server in servers:
                    server.stop()
            self._replicas.clear()

    def _render(self, pod: FakePod) -> dict[str, Any]:
        self._advance(pod)
        body = pod.body
        running = pod.status == "RUNNING"
        billed = pod.status not in ("EXITED", "ERROR", "TERMINATED")
        cost = round(self.price_per_gpu_hour * pod.gpu_count, 2) if billed else 0.0
        rendered: dict[str, Any] = {
            "id": pod.id,
            "name": body["name"],
            "image": body["image"],
            "args": body.get("args", ""),
            "disk": int(body.get("disk", 20)),
            "ports": self.body_ports(pod),
            "env": dict(body.get("env", {})),
            "registry": None,
            "status": pod.status,
            "actions": list(ACTIONS.get(pod.status, [])),
            "mounts": dict(body.get("mounts", {})),
            "cloud": body.get("cloud", "SECURE"),
            "dataCenterId": "US-TX-3",
            "cudaVersion": "12.8" if pod.gpu_count else None,
            "ssh": {
                "proxy": {
                    "host": "ssh.runpod.io",
                    "port": 22,
                    "username": f"{pod.id}-64411eb2",
                    "command": f"ssh {pod.id}-64411eb2@ssh.runpod.io",
                },
                "direct": None,
            },
            "template": None,
            "cost": cost,
            "locked": False,
            "globalNetworking": {"enabled": False},
            "runtime": {"uptime": int(self._clock() - (pod.started or 0)), "ports": list(pod.ports)}
            if running
            else None,
            "createdAt": _iso(pod.created),
            "startedAt": _iso(pod.started) if pod.started is not None else None,
        }
        if pod.gpu_count:
            rendered["gpu"] = {"id": pod.gpu_id, "count": pod.gpu_count}
        else:
            cpu = body["cpu"]
            flavor = CPU_FLAVORS.get(cpu["id"], {"ram": 2.0})
            memory = max(1, int(cpu["vcpuCount"] * float(flavor["ram"])))
            rendered["cpu"] = {"id": cpu["id"], "vcpuCount": cpu["vcpuCount"], "memory": memory}
        return rendered


def _count(value: object) -> bool:
    """A whole number >= 0 (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _number(value: object, key: str, *, low: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value < float("inf"):
        raise ValueError(f"{key} must be a finite number >= {low:g}, got {value!r}")
    return float(value)


class FakeRunpodServer(BackgroundServer):
    """``FakeRunpod`` over HTTP on a thread; ``base_url`` is the API base (``http://host:port/v2``)."""

    def __init__(self, api: FakeRunpod, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(api.handle, log, host, port)
        self.api = api

    def stop(self) -> None:
        super().stop()
        self.api.close()

    @property
    def base_url(self) -> str:
        return self.url + PREFIX
