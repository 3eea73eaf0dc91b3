"""The loopback HTTP API the virtual node calls (docs/burst-provider-api.md), plus /metrics, /healthz and /livez.

The routes are mounted on the daemons' shared server (``daemons/toolkit/http.py``); ``/healthz`` (readiness) answers
503 until the service has rebuilt its state from the providers' listings, which may take its whole startup grace
while a provider's API is down; ``/livez`` (liveness) answers 200 whenever the process serves, so a provider
outage at start never has the kubelet restart the service, which would only start the wait again.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from contract.burst_settings import PROVIDER_LIVEZ_PATH, BurstSettings, node_capacity
from daemons.burst_provider.pods import PodTranslationError
from daemons.burst_provider.service import BurstService
from daemons.toolkit.http import HttpService, Request, Response, Routes

log = logging.getLogger("burst_provider.api")

MAX_BODY = 8 * 1024 * 1024  # a pod is a few KiB; refuse anything absurd before reading it
NOT_READY = "rebuilding state from the providers' listings\n"


def _alive(_: Request) -> Response:
    return Response(200, b"ok\n")


def _error(code: int, message: str) -> Response:
    return Response.json(code, {"error": message})


def make_app(service: BurstService, settings: BurstSettings, ready: Callable[[], bool]) -> Routes:
    """Routes of the provider API; every answer is JSON except logs, /healthz and /metrics."""

    def get(request: Request) -> Response:
        parts = request.parts
        if parts == ["v1", "capacity"]:
            return Response.json(200, node_capacity(settings))
        if parts == ["v1", "pods"]:
            return Response.json(200, {"pods": service.list_pods()})
        if len(parts) == 4 and parts[:2] == ["v1", "pods"]:
            status = service.get_pod(parts[2], parts[3])
            if status is None:
                return _error(404, f"pod {parts[2]}/{parts[3]} is unknown")
            return Response.json(200, status)
        if len(parts) == 5 and parts[:2] == ["v1", "pods"] and parts[4] == "logs":
            return logs(parts[2], parts[3], request.query)
        return _error(404, f"no route GET {request.path[:200]}")

    def logs(namespace: str, name: str, query: dict[str, list[str]]) -> Response:
        tail: int | None = None
        if query.get("tail"):
            try:
                tail = int(query["tail"][0])
            except ValueError:
                return _error(400, f"tail must be a whole number, got {query['tail'][0][:40]!r}")
        text = service.logs(namespace, name, (query.get("container") or [""])[0], tail)
        if text is None:
            return _error(404, f"pod {namespace}/{name} is unknown")
        return Response(200, text.encode(), "text/plain; charset=utf-8")

    def post(request: Request) -> Response:
        if request.parts != ["v1", "pods"]:
            return _error(404, f"no route POST {request.path[:200]}")
        if not ready():  # a pod created before the rebuild could get a second instance
            return _error(503, "rebuilding state from the providers' listings; retry shortly")
        raw = request.read_body(MAX_BODY)
        if not raw:
            return _error(400, f"body must be a JSON object of 1..{MAX_BODY} bytes")
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return _error(400, f"body is not JSON: {exc}")
        pod = body.get("pod") if isinstance(body, dict) else None
        if not isinstance(pod, dict):
            return _error(400, 'body must be {"pod": <v1.Pod as JSON>}')
        try:
            status = service.create_pod(pod)
        except PodTranslationError as exc:
            return _error(400, str(exc))
        return Response.json(202, {"status": status})

    def delete(request: Request) -> Response:
        parts = request.parts
        if len(parts) != 4 or parts[:2] != ["v1", "pods"]:
            return _error(404, f"no route DELETE {request.path[:200]}")
        uid = (request.query.get("uid") or [""])[0] or None
        drain = service.delete_pod(parts[2], parts[3], uid)
        if drain is None:
            return _error(404, f"pod {parts[2]}/{parts[3]} is unknown")
        return Response.json(200, {"deleted": True, "drainSeconds": drain})

    def route(request: Request) -> Response:
        if request.method == "POST":
            return post(request)
        if request.method == "DELETE":
            return delete(request)
        return get(request)

    return Routes(
        metrics=service.metrics.render,
        ready=ready,
        not_ready=NOT_READY,
        get={PROVIDER_LIVEZ_PATH: _alive},
        fallback=route,
    )


def serve_metrics(service: BurstService, host: str, port: int, ready: Callable[[], bool]) -> HttpService:
    """Start ``/metrics``, ``/healthz`` and ``/livez`` alone on a background thread: what Prometheus and the
    kubelet reach on the pod's address, while the API stays on loopback."""
    return HttpService(
        host,
        port,
        Routes(metrics=service.metrics.render, ready=ready, not_ready=NOT_READY, get={PROVIDER_LIVEZ_PATH: _alive}),
        log=log,
        server_version="gpucluster-burst-provider",
        thread_name="metrics",
    ).start()


def serve(
    service: BurstService, settings: BurstSettings, host: str, port: int, ready: Callable[[], bool]
) -> HttpService:
    """Start the API on a background thread; the returned service knows its port (when 0 was asked)."""
    return HttpService(
        host,
        port,
        make_app(service, settings, ready),
        log=log,
        server_version="gpucluster-burst-provider",
        methods=("GET", "HEAD", "POST", "DELETE"),
        max_body=MAX_BODY,
        thread_name="api",
    ).start()
