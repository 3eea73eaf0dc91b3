"""A fake GPU rental cloud with knobs, run as its own process so its instances outlive a killed provider service.

API (JSON; errors ``{"error": "<what>"}``):

- ``POST /instances`` ``{"tags": {node, namespace, pod, uid}, "gpuType", "gpuCount", "containers": [...]}`` →
  ``201 {"id", "state", ...}``; ``503`` when the injected create failure hits, ``409`` when capacity is exhausted,
  ``400`` for an invalid body.
- ``GET /instances?node=<n>`` → ``{"instances": [...]}``; ``GET /instances/{id}`` → the instance or ``404``;
  ``DELETE /instances/{id}`` → ``200`` (unknown: ``404``); ``GET /instances/{id}/logs?container=&tail=`` → text.
- ``GET /offers`` → ``{"offers": [{"gpuType", "pricePerGpuHour", "availableGpus"}]}``.
- ``GET /admin/knobs``, ``POST /admin/knobs`` (partial update), ``POST /admin/instances/{id}/kill``
  (``{"exitCode": 137}`` by default), ``GET /admin/stats``, ``GET /healthz``.

Instance lifecycle: ``creating`` → ``running`` after ``bootSeconds`` (address from ``addressPool``, a documentation
range by default, ports as the containers declare them) → ``failed`` with exit code 137 when it dies, or
``terminated`` when deleted; terminated and failed instances leave listings ``terminatedTtlSeconds`` after they end.

Serving: an instance whose address is one of this machine's (the sim sets ``addressPool`` to 198.18.0.0/16, made
local by a route) answers on every TCP port its containers declare, as a model server would (``fakes/replica.py``):
503 for ``modelLoadSeconds`` after it runs, then 200 after ``requestSeconds`` per request, and connection refused
once it ended. With the default documentation range nothing listens, so a probe of such an instance never passes. The
replicas live in this process: while it is down they refuse connections, and a restart from ``--state-file`` opens
them again with their original start times.

Knobs: ``addressForm`` (``dotted``, or ``decimal``, ``short``, ``octal``: how a hostile account reports an
address); ``bootSeconds``;
``modelLoadSeconds`` and ``requestSeconds`` (above);
``createFailureRate`` (probability that a create is refused); ``deathRate`` (expected deaths
per running instance per **minute**: each instance's lifetime is drawn, when it starts running, from an exponential
distribution with that rate; changing the knob redraws the lifetimes of live instances); ``pricePerGpuHour`` and
``capacity`` (GPUs per type; creating, running instances hold them); ``seed``. Every random draw comes from one
generator seeded with ``seed`` (setting ``seed`` reseeds it), so the same seed and the same sequence of calls give the
same failures and deaths. Stats count GPU-seconds from accept to end (what a cloud bills).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import logging
import math
import os
import random
import re
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from daemons.toolkit.listen import parse_listen
from daemons.toolkit.logs import LEVELS, setup_logging
from sim.fakes._http import BackgroundServer, Clock, Reply, serve_until_signal
from sim.fakes.replica import ReplicaServer, can_listen

log = logging.getLogger("fakes.cloud")

LIVE = ("creating", "running")
_TAG_KEYS = ("node", "namespace", "pod", "uid")
_KNOB_KEYS = (
    "bootSeconds",
    "createFailureRate",
    "deathRate",
    "pricePerGpuHour",
    "capacity",
    "seed",
    "terminatedTtlSeconds",
    "addressPool",
    "modelLoadSeconds",
    "requestSeconds",
    "addressForm",
)
#: How an instance's address is reported: as it is, or (a compromised or careless provider account) in a form a
#: resolver still reads as IPv4 (for 127.0.0.1: decimal ``2130706433``, short ``127.1``, octal ``0177.0.0.01``).
ADDRESS_FORMS = ("dotted", "decimal", "short", "octal")


def reported(address: str, form: str) -> str:
    """``address`` written in ``form`` (one of ADDRESS_FORMS; the forms other than ``dotted`` are IPv4's)."""
    if form == "dotted":
        return address
    octets = ipaddress.IPv4Address(address).packed
    if form == "decimal":
        return str(int.from_bytes(octets, "big"))
    if form == "short":
        return f"{octets[0]}.{int.from_bytes(octets[1:], 'big')}"
    if form == "octal":
        return ".".join(f"0{o:o}" for o in octets)
    raise ValueError(f"addressForm must be one of {list(ADDRESS_FORMS)}")


@dataclass
class Knobs:
    boot_seconds: float = 2.0
    create_failure_rate: float = 0.0
    death_rate: float = 0.0  # per running instance per minute
    price_per_gpu_hour: dict[str, float] = field(default_factory=lambda: {"H100": 2.5})
    capacity: dict[str, int] = field(default_factory=lambda: {"H100": 64})
    seed: int = 1
    terminated_ttl_seconds: float = 30.0
    address_pool: str = "198.51.100.0/24"
    #: A replica's model load (503 until then) and one request's service time, where the instance serves.
    model_load_seconds: float = 20.0
    request_seconds: float = 0.05
    address_form: str = "dotted"

    def to_json(self) -> dict[str, Any]:
        return {
            "bootSeconds": self.boot_seconds,
            "createFailureRate": self.create_failure_rate,
            "deathRate": self.death_rate,
            "pricePerGpuHour": dict(self.price_per_gpu_hour),
            "capacity": dict(self.capacity),
            "seed": self.seed,
            "terminatedTtlSeconds": self.terminated_ttl_seconds,
            "addressPool": self.address_pool,
            "modelLoadSeconds": self.model_load_seconds,
            "requestSeconds": self.request_seconds,
            "addressForm": self.address_form,
        }


def parse_knobs(update: object, base: Knobs) -> Knobs:
    """``base`` with the camelCase fields of ``update`` applied; raises ValueError naming the bad field."""
    if not isinstance(update, dict):
        raise ValueError("knobs must be a JSON object")
    unknown = sorted(set(update) - set(_KNOB_KEYS))
    if unknown:
        raise ValueError(f"unknown knobs {unknown}; known: {list(_KNOB_KEYS)}")
    k = Knobs(**{**asdict(base)})
    if "bootSeconds" in update:
        k.boot_seconds = _number(update, "bootSeconds", 0, math.inf)
    if "createFailureRate" in update:
        k.create_failure_rate = _number(update, "createFailureRate", 0, 1)
    if "deathRate" in update:
        k.death_rate = _number(update, "deathRate", 0, math.inf)
    if "modelLoadSeconds" in update:
        k.model_load_seconds = _number(update, "modelLoadSeconds", 0, math.inf)
    if "requestSeconds" in update:
        k.request_seconds = _number(update, "requestSeconds", 0, 600)
    if "terminatedTtlSeconds" in update:
        k.terminated_ttl_seconds = _number(update, "terminatedTtlSeconds", 0, math.inf)
    if "pricePerGpuHour" in update:
        k.price_per_gpu_hour = {t: float(v) for t, v in _mapping(update, "pricePerGpuHour", float).items()}
    if "capacity" in update:
        k.capacity = {t: int(v) for t, v in _mapping(update, "capacity", int).items()}
    if "seed" in update:
        seed = update["seed"]
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise ValueError("seed must be an integer")
        k.seed = seed
    if "addressForm" in update:
        if update["addressForm"] not in ADDRESS_FORMS:
            raise ValueError(f"addressForm must be one of {list(ADDRESS_FORMS)}")
        k.address_form = str(update["addressForm"])
    if "addressPool" in update:
        try:
            ipaddress.ip_network(str(update["addressPool"]))
        except ValueError as exc:
            raise ValueError(f"addressPool: {exc}") from None
        k.address_pool = str(update["addressPool"])
    return k


def _number(d: dict[str, Any], key: str, low: float, high: float) -> float:
    value = d[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise ValueError(f"{key} must be a number in [{low}, {high}], got {value!r}")
    return float(value)


def _mapping(d: dict[str, Any], key: str, kind: type) -> dict[str, Any]:
    value = d[key]
    if not isinstance(value, dict) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) and v >= 0 and (kind is float or isinstance(v, int))
        for v in value.values()
    ):
        raise ValueError(f"{key} must be an object of GPU type -> non-negative {kind.__name__}")
    return value


@dataclass
class CloudInstance:
    id: str
    tags: dict[str, str]
    gpu_type: str
    gpu_count: int
    containers: list[dict[str, Any]]
    state: str
    created_at: float
    boot_at: float
    address: str = ""
    started_at: float | None = None
    finished_at: float | None = None
    exit_code: int | None = None
    message: str = ""
    death_at: float | None = None

    def public(self) -> dict[str, Any]:
        ports = [p for c in self.containers for p in c.get("ports", [])]
        running = self.state == "running"
        return {
            "id": self.id,
            "tags": dict(self.tags),
            "gpuType": self.gpu_type,
            "gpuCount": self.gpu_count,
            "state": self.state,
            "address": self.address if running else "",
            "ports": ports if running else [],
            "createdAt": self.created_at,
            "startedAt": self.started_at,
            "finishedAt": self.finished_at,
            "exitCode": self.exit_code,
            "message": self.message,
            "containers": [c.get("name", "") for c in self.containers],
        }


def _error(status: int, message: str) -> Reply:
    return Reply(status, {"error": message})


class FakeCloud:
    """The cloud's state and rules. Thread-safe; time comes from ``clock`` (unix seconds)."""

    def __init__(self, knobs: Knobs | None = None, *, clock: Clock = time.time, state_file: Path | None = None) -> None:
        self.knobs = knobs or Knobs()
        self._clock = clock
        self._state_file = state_file
        self._rng = random.Random(self.knobs.seed)
        self._lock = threading.Lock()
        self._instances: dict[str, CloudInstance] = {}
        self._next_id = 1
        self._next_host = 0
        self._stats = {"creates": 0, "createFailures": 0, "deaths": 0, "deletes": 0}
        self._gpu_seconds_closed = 0.0
        self._replicas: dict[str, list[ReplicaServer]] = {}
        if state_file is not None and state_file.exists():
            self._load(state_file)
            for inst in self._instances.values():
                if inst.state == "running":
                    self._serve(inst)

    def close(self) -> None:
        """Stop every replica's port (the cloud's own server is stopped by its owner)."""
        with self._lock:
            for iid in list(self._replicas):
                self._unserve(iid)

    # -- operations (each advances time first) --

    def create(self, body: object) -> Reply:
        problem = _validate_create(body)
        if problem:
            return _error(400, problem)
        assert isinstance(body, dict)
        with self._lock:
            now = self._advance()
            gpu_type, gpu_count = str(body.get("gpuType", "")), int(body.get("gpuCount", 0))
            if self._rng.random() < self.knobs.create_failure_rate:
                self._stats["createFailures"] += 1
                self._save()
                return _error(503, "create refused by the cloud (injected failure)")
            if gpu_count > 0:
                free = self._free(gpu_type)
                if gpu_count > free:
                    self._stats["createFailures"] += 1
                    self._save()
                    return _error(409, f"insufficient capacity: {gpu_count} {gpu_type} wanted, {free} free")
            inst = CloudInstance(
                id=f"i-{self._next_id:06d}",
                tags={k: str(body["tags"][k]) for k in _TAG_KEYS},
                gpu_type=gpu_type,
                gpu_count=gpu_count,
                containers=list(body.get("containers", [])),
                state="creating",
                created_at=now,
                boot_at=now + self.knobs.boot_seconds,
            )
            self._next_id += 1
            self._instances[inst.id] = inst
            self._stats["creates"] += 1
            self._advance()
            self._save()
            return Reply(201, self._public(inst))

    def get(self, instance_id: str) -> Reply:
        with self._lock:
            self._advance()
            inst = self._instances.get(instance_id)
            return Reply(200, self._public(inst)) if inst else _error(404, f"instance {instance_id} not found")

    def list_instances(self, node: str | None) -> Reply:
        with self._lock:
            self._advance()
            items = [self._public(i) for i in self._instances.values() if node is None or i.tags.get("node") == node]
            return Reply(200, {"instances": items})

    def delete(self, instance_id: str) -> Reply:
        return self._end_live(instance_id, "terminated", None, "deleted", "deletes")

    def kill(self, instance_id: str, exit_code: int = 137) -> Reply:
        return self._end_live(instance_id, "failed", exit_code, "the instance died (killed by admin)", "deaths")

    def _end_live(self, instance_id: str, state: str, exit_code: int | None, message: str, stat: str) -> Reply:
        """Ends the instance as ``state`` if it is still live (counted under ``stat``); an ended one is left as it
        is. Either way the reply is the instance as it now stands; 404 if it is unknown."""
        with self._lock:
            now = self._advance()
            inst = self._instances.get(instance_id)
            if inst is None:
                return _error(404, f"instance {instance_id} not found")
            if inst.state in LIVE:
                self._end(inst, now, state, exit_code, message)
                self._stats[stat] += 1
                self._save()
            return Reply(200, self._public(inst))

    def logs(self, instance_id: str, container: str, tail: int | None) -> Reply:
        with self._lock:
            self._advance()
            inst = self._instances.get(instance_id)
            if inst is None:
                return _error(404, f"instance {instance_id} not found")
            lines = [f"instance {inst.id} accepted ({inst.gpu_count} x {inst.gpu_type})"]
            if inst.started_at is not None:
                lines.append(f"container {container or '*'} started at {inst.address}")
            if inst.finished_at is not None:
                lines.append(f"instance {inst.state}: {inst.message} (exit code {inst.exit_code})")
            if tail is not None:
                lines = lines[-tail:] if tail > 0 else []
            return Reply(200, raw=("\n".join(lines) + "\n").encode(), content_type="text/plain; charset=utf-8")

    def offers(self) -> Reply:
        with self._lock:
            self._advance()
            types = sorted(set(self.knobs.price_per_gpu_hour) | set(self.knobs.capacity))
            offers = [
                {
                    "gpuType": t,
                    "pricePerGpuHour": self.knobs.price_per_gpu_hour.get(t, 0.0),
                    "availableGpus": self._free(t),
                }
                for t in types
                if t in self.knobs.price_per_gpu_hour
            ]
            return Reply(200, {"offers": offers})

    def set_knobs(self, update: object) -> Reply:
        with self._lock:
            now = self._advance()
            try:
                knobs = parse_knobs(update, self.knobs)
            except ValueError as exc:
                return _error(400, str(exc))
            reseed = isinstance(update, dict) and "seed" in update
            redraw = knobs.death_rate != self.knobs.death_rate or reseed
            self.knobs = knobs
            if reseed:
                self._rng = random.Random(knobs.seed)
            if redraw:
                for inst in self._instances.values():
                    if inst.state == "running":
                        inst.death_at = self._draw_death(now)
            self._save()
            return Reply(200, self.knobs.to_json())

    def stats(self) -> dict[str, Any]:
        with self._lock:
            now = self._advance()
            open_seconds = sum(i.gpu_count * (now - i.created_at) for i in self._instances.values() if i.state in LIVE)
            return {
                **self._stats,
                "liveInstances": sum(1 for i in self._instances.values() if i.state in LIVE),
                "gpuSecondsUsed": round(self._gpu_seconds_closed + open_seconds, 3),
            }

    # -- time --

    def _advance(self) -> float:
        """Apply every boot, death and listing expiry due by now, in time order. Returns now."""
        now = self._clock()
        for inst in sorted(self._instances.values(), key=lambda i: i.id):
            if inst.state == "creating" and now >= inst.boot_at:
                inst.state = "running"
                inst.started_at = inst.boot_at
                inst.address = self._address()
                inst.death_at = self._draw_death(inst.boot_at)
                self._serve(inst)
            if inst.state == "running" and inst.death_at is not None and now >= inst.death_at:
                self._end(inst, inst.death_at, "failed", 137, "the instance died")
                self._stats["deaths"] += 1
        ttl = self.knobs.terminated_ttl_seconds
        for inst in list(self._instances.values()):
            if inst.finished_at is not None and now - inst.finished_at >= ttl:
                del self._instances[inst.id]
        return now

    def _draw_death(self, start: float) -> float | None:
        if self.knobs.death_rate <= 0:
            return None
        return start + self._rng.expovariate(self.knobs.death_rate / 60.0)

    def _end(self, inst: CloudInstance, at: float, state: str, exit_code: int | None, message: str) -> None:
        inst.state, inst.finished_at, inst.exit_code, inst.message = state, at, exit_code, message
        inst.death_at = None
        self._gpu_seconds_closed += inst.gpu_count * max(0.0, at - inst.created_at)
        self._unserve(inst.id)

    # -- serving: a running instance on a local address answers on its containers' ports --

    def _serve(self, inst: CloudInstance) -> None:
        if not inst.address or not can_listen(inst.address):
            return
        servers = []
        for c in inst.containers:
            for p in c.get("ports", []):
                if str(p.get("protocol") or "TCP").upper() != "TCP":
                    continue
                try:
                    servers.append(
                        ReplicaServer(
                            f"{inst.id}/{c.get('name', '')}",
                            inst.address,
                            int(p["port"]),
                            started_at=inst.started_at or self._clock(),
                            load_seconds=self.knobs.model_load_seconds,
                            service_seconds=self.knobs.request_seconds,
                            clock=self._clock,
                        )
                    )
                except (OSError, KeyError, TypeError, ValueError) as exc:
                    log.warning("instance %s cannot serve on %s:%s: %s", inst.id, inst.address, p.get("port"), exc)
        self._replicas[inst.id] = servers

    def _unserve(self, instance_id: str) -> None:
        for server in self._replicas.pop(instance_id, []):
            server.stop()

    def _public(self, inst: CloudInstance) -> dict[str, Any]:
        """What the API says of ``inst``, its address in the reported form (``addressForm``)."""
        out = inst.public()
        if out["address"]:
            out["address"] = reported(out["address"], self.knobs.address_form)
        return out

    def _free(self, gpu_type: str) -> int:
        used = sum(i.gpu_count for i in self._instances.values() if i.state in LIVE and i.gpu_type == gpu_type)
        return max(0, self.knobs.capacity.get(gpu_type, 0) - used)

    def _address(self) -> str:
        net = ipaddress.ip_network(self.knobs.address_pool, strict=False)
        hosts = net.num_addresses - 2 if net.num_addresses > 2 else net.num_addresses
        offset = 1 if net.num_addresses > 2 else 0
        addr = net.network_address + offset + (self._next_host % max(hosts, 1))
        self._next_host += 1
        return str(addr)

    # -- persistence (optional): instances survive a restart of the fake cloud itself; knobs come from the flags --

    def _save(self) -> None:
        if self._state_file is None:
            return
        state = {
            "knobs": self.knobs.to_json(),
            "instances": [asdict(i) for i in self._instances.values()],
            "nextId": self._next_id,
            "nextHost": self._next_host,
            "stats": self._stats,
            "gpuSecondsClosed": self._gpu_seconds_closed,
            "rng": _rng_to_json(self._rng),
        }
        fd, tmp = tempfile.mkstemp(dir=self._state_file.parent, prefix=".cloud-state-")
        with os.fdopen(fd, "w") as f:
            json.dump(state, f)
        os.replace(tmp, self._state_file)

    def _load(self, path: Path) -> None:
        try:
            state = json.loads(path.read_text())
            self._instances = {i["id"]: CloudInstance(**i) for i in state["instances"]}
            self._next_id = int(state["nextId"])
            self._next_host = int(state["nextHost"])
            self._stats = {k: int(v) for k, v in state["stats"].items()}
            self._gpu_seconds_closed = float(state["gpuSecondsClosed"])
            self._rng.setstate(_rng_from_json(state["rng"]))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"state file {path}: cannot be read back: {exc}") from None

    # -- HTTP entry --

    def handle(
        self, method: str, path: str, query: dict[str, list[str]], body: bytes, headers: dict[str, str]
    ) -> Reply:
        parts = [p for p in path.split("/") if p]
        route = (method, *parts)
        parsed: object = None
        if method == "POST":
            try:
                parsed = json.loads(body) if body.strip() else {}
            except json.JSONDecodeError as exc:
                return _error(400, f"invalid JSON body: {exc}")
        match route:
            case ("GET", "healthz"):
                return Reply(200, raw=b"ok\n", content_type="text/plain")
            case ("POST", "instances"):
                return self.create(parsed)
            case ("GET", "instances"):
                return self.list_instances(query["node"][0] if "node" in query else None)
            case ("GET", "instances", iid):
                return self.get(iid)
            case ("DELETE", "instances", iid):
                return self.delete(iid)
            case ("GET", "instances", iid, "logs"):
                tail = query.get("tail", [""])[0]
                if tail and not re.fullmatch(r"\d+", tail):
                    return _error(400, f"tail must be a non-negative integer, got {tail!r}")
                return self.logs(iid, query.get("container", [""])[0], int(tail) if tail else None)
            case ("GET", "offers"):
                return self.offers()
            case ("GET", "admin", "knobs"):
                with self._lock:
                    return Reply(200, self.knobs.to_json())
            case ("POST", "admin", "knobs"):
                return self.set_knobs(parsed)
            case ("POST", "admin", "instances", iid, "kill"):
                code = parsed.get("exitCode", 137) if isinstance(parsed, dict) else 137
                if not isinstance(code, int) or isinstance(code, bool):
                    return _error(400, f"exitCode must be an integer, got {code!r}")
                return self.kill(iid, code)
            case ("GET", "admin", "stats"):
                return Reply(200, self.stats())
        return _error(404, f"no route {method} {path}")


def _validate_create(body: object) -> str:
    if not isinstance(body, dict):
        return "body must be a JSON object"
    tags = body.get("tags")
    if not isinstance(tags, dict) or not all(isinstance(tags.get(k), str) and tags.get(k) for k in _TAG_KEYS):
        return f"tags must be an object with non-empty strings {list(_TAG_KEYS)}"
    count = body.get("gpuCount", 0)
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        return "gpuCount must be a non-negative integer"
    if count > 0 and not (isinstance(body.get("gpuType"), str) and body["gpuType"]):
        return "gpuType must be a non-empty string when gpuCount > 0"
    containers = body.get("containers", [])
    if not isinstance(containers, list) or not containers or not all(isinstance(c, dict) for c in containers):
        return "containers must be a non-empty list of objects"
    return ""


def _rng_to_json(rng: random.Random) -> list[Any]:
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]


def _rng_from_json(value: list[Any]) -> tuple[Any, ...]:
    return (int(value[0]), tuple(int(x) for x in value[1]), value[2])


class FakeCloudServer(BackgroundServer):
    """``FakeCloud`` over HTTP on a thread."""

    def __init__(self, cloud: FakeCloud, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(cloud.handle, log, host, port)
        self.cloud = cloud

    def stop(self) -> None:
        super().stop()
        self.cloud.close()


def _pairs(items: list[str], flag: str, kind: type) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        name, _, value = item.rpartition("=")
        try:
            out[name] = kind(value)
        except ValueError:
            name = ""
        if not name:
            raise ValueError(f"{flag}: {item!r} is not TYPE={kind.__name__.upper()}")
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m sim.fakes.cloud_server",
        description=(
            "Serve a fake GPU rental cloud (instances that boot, run, die and are deleted; prices and capacity per "
            "GPU type; admin knobs at /admin/knobs). Prints one JSON ready line on stdout; SIGTERM stops it."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--listen", default="127.0.0.1:18080", help="host:port to serve on (port 0: pick a free one)")
    p.add_argument("--boot-seconds", type=float, default=2.0, help="seconds from accept to running")
    p.add_argument(
        "--model-load-seconds",
        type=float,
        default=20.0,
        help="seconds a running instance answers 503 before it serves (where its address is local)",
    )
    p.add_argument("--request-seconds", type=float, default=0.05, help="seconds one request takes once it serves")
    p.add_argument("--create-failure-rate", type=float, default=0.0, help="probability (0-1) that a create fails")
    p.add_argument(
        "--death-rate", type=float, default=0.0, help="expected deaths per running instance per minute (0: never)"
    )
    p.add_argument(
        "--capacity", action="append", default=[], metavar="TYPE=GPUS", help="GPUs of a type; repeatable (H100=64)"
    )
    p.add_argument(
        "--price", action="append", default=[], metavar="TYPE=USD", help="price per GPU-hour; repeatable (H100=2.5)"
    )
    p.add_argument("--seed", type=int, default=1, help="seed of every random draw (failures, deaths)")
    p.add_argument(
        "--terminated-ttl-seconds", type=float, default=30.0, help="how long ended instances stay in listings"
    )
    p.add_argument("--address-pool", default="198.51.100.0/24", help="CIDR that running instances get addresses from")
    p.add_argument(
        "--state-file", type=Path, default=None, help="JSON file keeping instances across restarts of this server"
    )
    p.add_argument("--log-level", default="info", choices=LEVELS, help="log level")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    setup_logging(args.log_level, style="plain")
    try:
        host, port = parse_listen(args.listen)
        update: dict[str, Any] = {
            "bootSeconds": args.boot_seconds,
            "modelLoadSeconds": args.model_load_seconds,
            "requestSeconds": args.request_seconds,
            "createFailureRate": args.create_failure_rate,
            "deathRate": args.death_rate,
            "seed": args.seed,
            "terminatedTtlSeconds": args.terminated_ttl_seconds,
            "addressPool": args.address_pool,
        }
        if args.capacity:
            update["capacity"] = _pairs(args.capacity, "--capacity", int)
        if args.price:
            update["pricePerGpuHour"] = _pairs(args.price, "--price", float)
        knobs = parse_knobs(update, Knobs())
        cloud = FakeCloud(knobs, state_file=args.state_file)
        server = FakeCloudServer(cloud, host, port)
    except (ValueError, OSError) as exc:
        parser.error(str(exc))
    return serve_until_signal(server, "cloud", log, {"knobs": cloud.knobs.to_json()})


if __name__ == "__main__":
    raise SystemExit(main())
