"""A fake of RunPod's REST API v1 that follows the real protocol, to test the RunPod adapter without an account.

Same paths under ``/v1`` (``POST/GET /pods``, ``GET/DELETE /pods/{podId}``, ``POST /pods/{podId}/stop`` and
``/start``), same field names, same status codes (201 create, 200 read, 204 delete, 400 invalid input, 401 without
the right bearer key, 404 unknown pod), errors as ``{"error": "<what>", "status": <code>}``. The facts it follows
are listed in ``daemons/burst_provider/providers/runpod.py``. A test double only: it lives with the tests, not in
what the daemon image installs.

Behaviour: a created pod has ``desiredStatus: RUNNING`` at once but gets its ``publicIp`` (TEST-NET-3,
203.0.113.x) and ``portMappings`` only ``boot_seconds`` later, as a real pod does once its machine has pulled the
image. Stop → ``EXITED``; delete → gone (404). Knobs for tests: ``boot_seconds``, ``capacity`` per GPU type id
(exhausted → 400 like RunPod's "no instances available"), and ``inject()`` to make the next replies a given
status/raw body/delay.

CLI: ``python -m tests.support.fake_runpod --listen 127.0.0.1:18081 --boot-seconds 2`` (the key it
accepts is read from the environment variable named by ``--api-key-env``, never from a flag).
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import re
import string
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from daemons.burst_provider.fakes._http import BackgroundServer, Clock, Reply, serve_until_signal
from daemons.toolkit.listen import ListenError, parse_listen
from daemons.toolkit.logs import LEVELS, setup_logging

log = logging.getLogger("fakes.runpod")

PREFIX = "/v1"
_PORT_RE = re.compile(r"^(\d{1,5})/(http|tcp)$")
# PodCreateInput's documented fields; anything else is refused, so a misspelt field fails loudly in tests.
CREATE_FIELDS = frozenset(
    {
        "allowedCudaVersions", "cloudType", "computeType", "containerDiskInGb", "containerRegistryAuthId",
        "countryCodes", "cpuFlavorIds", "cpuFlavorPriority", "dataCenterIds", "dataCenterPriority",
        "dockerEntrypoint", "dockerStartCmd", "env", "globalNetworking", "gpuCount", "gpuTypeIds",
        "gpuTypePriority", "imageName", "interruptible", "locked", "minDiskBandwidthMBps", "minDownloadMbps",
        "minRAMPerGPU", "minUploadMbps", "minVCPUPerGPU", "name", "networkVolumeId", "ports", "supportPublicIp",
        "templateId", "vcpuCount", "volumeInGb", "volumeMountPath",
    }
)  # fmt: skip
LIST_FILTERS = ("id", "name", "desiredStatus", "computeType", "imageName", "gpuTypeId")


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
    status: str = "RUNNING"
    started: float | None = None
    mappings: dict[str, int] = field(default_factory=dict)


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _error(status: int, message: str) -> Reply:
    return Reply(status, {"error": message, "status": status})


class FakeRunpod:
    """The API's state and rules, independent of HTTP (so tests can also drive it directly)."""

    def __init__(
        self,
        api_key: str,
        *,
        boot_seconds: float = 0.0,
        price_per_gpu_hour: float = 2.99,
        capacity: dict[str, int] | None = None,
        clock: Clock = time.time,
    ) -> None:
        self._key = api_key
        self.boot_seconds = boot_seconds
        self.price_per_gpu_hour = price_per_gpu_hour
        self.capacity = dict(capacity or {})
        self._clock = clock
        self._pods: dict[str, FakePod] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._injections: list[_Injection] = []
        self.requests: list[tuple[str, str]] = []  # (method, path) seen, for tests

    # -- test knobs --

    def inject(self, status: int, raw: bytes | str = b"", *, times: int = 1, delay: float = 0.0) -> None:
        """Answer the next ``times`` requests with ``status`` and the raw body (after ``delay`` seconds)."""
        data = raw.encode() if isinstance(raw, str) else raw
        with self._lock:
            self._injections.append(_Injection(status, data, delay, times))

    def set_status(self, pod_id: str, status: str) -> None:
        with self._lock:
            self._pods[pod_id].status = status

    def pod_count(self) -> int:
        with self._lock:
            return len(self._pods)

    # -- HTTP entry --

    def handle(
        self, method: str, path: str, query: dict[str, list[str]], body: bytes, headers: dict[str, str]
    ) -> Reply:
        with self._lock:
            self.requests.append((method, path))
            injection = self._take_injection()
        if injection is not None:
            if injection.delay:
                time.sleep(injection.delay)
            return Reply(injection.status, raw=injection.raw, content_type="application/json")
        if headers.get("authorization") != f"Bearer {self._key}":
            return _error(401, "Unauthorized.")
        if not path.startswith(PREFIX + "/pods"):
            return _error(404, f"no route {method} {path}")
        rest = path[len(PREFIX + "/pods") :].strip("/")
        with self._lock:
            return self._route(method, rest, query, body)

    def _take_injection(self) -> _Injection | None:
        if not self._injections:
            return None
        first = self._injections[0]
        first.remaining -= 1
        if first.remaining <= 0:
            self._injections.pop(0)
        return first

    def _route(self, method: str, rest: str, query: dict[str, list[str]], body: bytes) -> Reply:
        parts = rest.split("/") if rest else []
        if not parts:
            if method == "POST":
                return self._create(body)
            if method == "GET":
                return self._list(query)
            return _error(405, f"method {method} not allowed on /pods")
        pod = self._pods.get(parts[0])
        if pod is None:
            return _error(404, f"pod {parts[0]} not found")
        if len(parts) == 1 and method == "GET":
            return Reply(200, self._render(pod))
        if len(parts) == 1 and method == "DELETE":
            del self._pods[pod.id]
            return Reply(204)
        if len(parts) == 2 and method == "POST" and parts[1] in ("stop", "start"):
            pod.status = "EXITED" if parts[1] == "stop" else "RUNNING"
            if parts[1] == "start":
                pod.created, pod.started, pod.mappings = self._clock(), None, {}
            return Reply(200, self._render(pod))
        return _error(404, f"no route {method} /pods/{rest}")

    # -- operations --

    def _create(self, raw: bytes) -> Reply:
        try:
            body = json.loads(raw or b"null")
        except json.JSONDecodeError as exc:
            return _error(400, f"invalid JSON body: {exc}")
        problem = validate_create(body)
        if problem:
            return _error(400, problem)
        if body.get("computeType", "GPU") == "GPU":
            gpu_id = body["gpuTypeIds"][0]
            cap = self.capacity.get(gpu_id)
            if cap is not None and self._gpus_in_use(gpu_id) + int(body.get("gpuCount", 1)) > cap:
                return _error(400, "There are no longer any instances available with the requested specifications.")
        n = next(self._ids)
        pod_id = "".join(string.ascii_lowercase[(n * 7 + i * 3) % 26] for i in range(6)) + f"{n:08d}"
        pod = FakePod(id=pod_id, body=body, created=self._clock(), host=n % 253 + 1)
        self._pods[pod_id] = pod
        return Reply(201, self._render(pod))

    def _gpus_in_use(self, gpu_id: str) -> int:
        return sum(
            int(p.body.get("gpuCount", 1))
            for p in self._pods.values()
            if p.status == "RUNNING" and p.body.get("computeType", "GPU") == "GPU" and p.body["gpuTypeIds"][0] == gpu_id
        )

    def _list(self, query: dict[str, list[str]]) -> Reply:
        out = []
        for pod in self._pods.values():
            rendered = self._render(pod)
            if all(self._matches(rendered, key, query[key][0]) for key in LIST_FILTERS if key in query):
                out.append(rendered)
        return Reply(200, out)

    @staticmethod
    def _matches(pod: dict[str, Any], key: str, value: str) -> bool:
        if key == "gpuTypeId":
            return bool(pod.get("gpu")) and pod["gpu"]["id"] == value
        if key == "imageName":
            return bool(pod.get("image") == value)
        return str(pod.get(key)) == value

    def _boot(self, pod: FakePod) -> None:
        """Once booted, a running pod has a start time and a public port for each exposed TCP port."""
        if pod.status != "RUNNING" or pod.started is not None:
            return
        if self._clock() - pod.created < self.boot_seconds:
            return
        pod.started = pod.created + self.boot_seconds
        for i, port in enumerate(pod.body.get("ports", [])):
            number, proto = port.split("/")
            if proto == "tcp":
                pod.mappings[number] = 10000 + pod.host * 10 + i

    def _render(self, pod: FakePod) -> dict[str, Any]:
        self._boot(pod)
        body = pod.body
        gpu_count = int(body.get("gpuCount", 1)) if body.get("computeType", "GPU") == "GPU" else 0
        booted = pod.status == "RUNNING" and pod.started is not None
        cost = self.price_per_gpu_hour * gpu_count
        return {
            "id": pod.id,
            "name": body.get("name", ""),
            "image": body["imageName"],
            "desiredStatus": pod.status,
            "costPerHr": f"{cost:.2f}",
            "adjustedCostPerHr": round(cost, 2),
            "consumerUserId": "user_fake",
            "machineId": f"machine{pod.host:03d}",
            "containerDiskInGb": int(body.get("containerDiskInGb", 50)),
            "dockerEntrypoint": list(body.get("dockerEntrypoint", [])),
            "dockerStartCmd": list(body.get("dockerStartCmd", [])),
            "env": dict(body.get("env", {})),
            "ports": list(body.get("ports", [])),
            "portMappings": dict(pod.mappings) if booted else None,
            "publicIp": f"203.0.113.{pod.host}" if booted else None,
            "gpuCount": gpu_count,
            "gpu": {"id": body["gpuTypeIds"][0], "count": gpu_count, "displayName": body["gpuTypeIds"][0]}
            if gpu_count
            else None,
            "interruptible": bool(body.get("interruptible", False)),
            "locked": bool(body.get("locked", False)),
            "lastStartedAt": _iso(pod.started) if pod.started is not None else None,
            "lastStatusChange": f"Rented by User: {_iso(pod.created)}",
        }


def validate_create(body: object) -> str:
    """What is wrong with a PodCreateInput body, or "" when it is acceptable."""
    if not isinstance(body, dict):
        return "request body must be a JSON object"
    unknown = sorted(set(body) - CREATE_FIELDS)
    if unknown:
        return f"unknown fields: {', '.join(unknown)}"
    checks: list[tuple[str, bool]] = [
        ("imageName must be a non-empty string", isinstance(body.get("imageName"), str) and bool(body["imageName"])),
        ("name must be a string", isinstance(body.get("name", ""), str)),
        ("cloudType must be SECURE or COMMUNITY", body.get("cloudType", "SECURE") in ("SECURE", "COMMUNITY")),
        ("computeType must be GPU or CPU", body.get("computeType", "GPU") in ("GPU", "CPU")),
        ("containerDiskInGb must be a non-negative integer", _nonneg_int(body.get("containerDiskInGb", 50))),
        (
            "env must be an object of strings",
            isinstance(body.get("env", {}), dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in body.get("env", {}).items()),
        ),
        (
            'ports must be a list like ["8888/http", "22/tcp"]',
            isinstance(body.get("ports", []), list)
            and all(isinstance(p, str) and _PORT_RE.match(p) for p in body.get("ports", [])),
        ),
    ]
    for key in ("dockerEntrypoint", "dockerStartCmd"):
        value = body.get(key, [])
        checks.append(
            (f"{key} must be a list of strings", isinstance(value, list) and all(isinstance(v, str) for v in value))
        )
    if body.get("computeType", "GPU") == "GPU":
        ids = body.get("gpuTypeIds")
        checks.append(
            (
                "gpuTypeIds must be a non-empty list of GPU type ids",
                isinstance(ids, list) and bool(ids) and all(isinstance(i, str) for i in ids),
            )
        )
        count = body.get("gpuCount", 1)
        checks.append(("gpuCount must be an integer >= 1", _nonneg_int(count) and count >= 1))
    for message, ok in checks:
        if not ok:
            return message
    return ""


def _nonneg_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class FakeRunpodServer(BackgroundServer):
    """``FakeRunpod`` over HTTP on a thread; ``url`` is the API base (``http://host:port/v1``)."""

    def __init__(self, api: FakeRunpod, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(api.handle, log, host, port)
        self.api = api

    @property
    def base_url(self) -> str:
        return self.url + PREFIX


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m tests.support.fake_runpod",
        description="Serve a fake of RunPod's REST API v1 (pods only) under /v1, for tests.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--listen", default="127.0.0.1:18081", help="host:port to serve on (port 0: pick a free one)")
    p.add_argument(
        "--api-key-env",
        default="RUNPOD_API_KEY",
        help="name of the environment variable holding the bearer key the server accepts",
    )
    p.add_argument("--boot-seconds", type=float, default=2.0, help="seconds before a pod gets its public IP and ports")
    p.add_argument("--price", type=float, default=2.99, help="price per GPU-hour reported in costPerHr")
    p.add_argument(
        "--capacity",
        action="append",
        default=[],
        metavar="GPU_TYPE_ID=N",
        help="GPUs of a type (RunPod id) that may run at once; repeatable; unlimited when not given",
    )
    p.add_argument("--log-level", default="info", choices=LEVELS, help="log level")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    setup_logging(args.log_level, style="plain")
    try:
        host, port = parse_listen(args.listen)
    except ListenError as exc:
        parser.error(str(exc))
    key = os.environ.get(args.api_key_env, "")
    if not key:
        parser.error(f"--api-key-env: environment variable {args.api_key_env} is empty or unset")
    capacity: dict[str, int] = {}
    for item in args.capacity:
        name, _, count = item.rpartition("=")
        if not name or not count.isdigit():
            parser.error(f"--capacity: {item!r} is not GPU_TYPE_ID=N")
        capacity[name] = int(count)
    api = FakeRunpod(key, boot_seconds=args.boot_seconds, price_per_gpu_hour=args.price, capacity=capacity)
    try:
        server = FakeRunpodServer(api, host, port)
    except OSError as exc:
        parser.error(f"--listen: cannot listen on {args.listen}: {exc}")
    return serve_until_signal(server, "runpod", log, {"baseUrl": server.base_url})


if __name__ == "__main__":
    raise SystemExit(main())
