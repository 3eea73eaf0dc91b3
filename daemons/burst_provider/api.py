"""The loopback HTTP API the virtual node calls (docs/burst-provider-api.md), plus /metrics and /healthz."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from prometheus_client.exposition import CONTENT_TYPE_LATEST

from components.burst_settings import BurstSettings, node_capacity
from daemons.burst_provider.pods import PodTranslationError
from daemons.burst_provider.service import BurstService

log = logging.getLogger("burst_provider.api")

MAX_BODY = 8 * 1024 * 1024  # a pod is a few KiB; refuse anything absurd before reading it


class ApiServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def make_handler(
    service: BurstService, settings: BurstSettings, ready: Callable[[], bool]
) -> type[BaseHTTPRequestHandler]:
    """Routes of the provider API; every answer is JSON except logs, /healthz and /metrics."""

    class Handler(BaseHTTPRequestHandler):
        server_version = "gpucluster-burst-provider"
        protocol_version = "HTTP/1.1"
        timeout = 60
        disable_nagle_algorithm = True

        def _send(self, code: int, content_type: str, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _json(self, code: int, value: Any) -> None:
            self._send(code, "application/json", json.dumps(value).encode() + b"\n")

        def _error(self, code: int, message: str) -> None:
            self._json(code, {"error": message})

        def _parts(self) -> tuple[list[str], dict[str, list[str]]]:
            url = urlsplit(self.path)
            parts = [unquote(p) for p in url.path.split("/") if p]
            return parts, parse_qs(url.query)

        def do_GET(self) -> None:
            parts, query = self._parts()
            if parts == ["healthz"]:
                if ready():
                    self._send(200, "text/plain", b"ok\n")
                else:
                    self._send(503, "text/plain", b"rebuilding state from the providers' listings\n")
            elif parts == ["metrics"]:
                self._send(200, CONTENT_TYPE_LATEST, service.metrics.render())
            elif parts == ["v1", "capacity"]:
                self._json(200, node_capacity(settings))
            elif parts == ["v1", "pods"]:
                self._json(200, {"pods": service.list_pods()})
            elif len(parts) == 4 and parts[:2] == ["v1", "pods"]:
                status = service.get_pod(parts[2], parts[3])
                if status is None:
                    self._error(404, f"pod {parts[2]}/{parts[3]} is unknown")
                else:
                    self._json(200, status)
            elif len(parts) == 5 and parts[:2] == ["v1", "pods"] and parts[4] == "logs":
                self._logs(parts[2], parts[3], query)
            else:
                self._error(404, f"no route GET {urlsplit(self.path).path}")

        def _logs(self, namespace: str, name: str, query: dict[str, list[str]]) -> None:
            tail: int | None = None
            if query.get("tail"):
                try:
                    tail = int(query["tail"][0])
                except ValueError:
                    self._error(400, f"tail must be a whole number, got {query['tail'][0]!r}")
                    return
            text = service.logs(namespace, name, (query.get("container") or [""])[0], tail)
            if text is None:
                self._error(404, f"pod {namespace}/{name} is unknown")
            else:
                self._send(200, "text/plain; charset=utf-8", text.encode())

        def do_POST(self) -> None:
            parts, _ = self._parts()
            if parts != ["v1", "pods"]:
                self._error(404, f"no route POST {urlsplit(self.path).path}")
                return
            if not ready():  # a pod created before the rebuild could get a second instance
                self._error(503, "rebuilding state from the providers' listings; retry shortly")
                return
            length = int(self.headers.get("Content-Length") or 0)
            if length <= 0 or length > MAX_BODY:
                self._error(400, f"body must be a JSON object of 1..{MAX_BODY} bytes")
                return
            try:
                body = json.loads(self.rfile.read(length))
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                self._error(400, f"body is not JSON: {exc}")
                return
            pod = body.get("pod") if isinstance(body, dict) else None
            if not isinstance(pod, dict):
                self._error(400, 'body must be {"pod": <v1.Pod as JSON>}')
                return
            try:
                status = service.create_pod(pod)
            except PodTranslationError as exc:
                self._error(400, str(exc))
                return
            self._json(202, {"status": status})

        def do_DELETE(self) -> None:
            parts, query = self._parts()
            if len(parts) != 4 or parts[:2] != ["v1", "pods"]:
                self._error(404, f"no route DELETE {urlsplit(self.path).path}")
                return
            uid = (query.get("uid") or [""])[0] or None
            if service.delete_pod(parts[2], parts[3], uid):
                self._json(200, {"deleted": True})
            else:
                self._error(404, f"pod {parts[2]}/{parts[3]} is unknown")

        def do_HEAD(self) -> None:
            self.do_GET()

        def log_message(self, format: str, *args: Any) -> None:
            if log.isEnabledFor(logging.DEBUG):
                log.debug("http request", extra={"client": self.client_address[0], "request": format % args})

    return Handler


def serve(
    service: BurstService, settings: BurstSettings, host: str, port: int, ready: Callable[[], bool]
) -> tuple[ApiServer, threading.Thread]:
    """Start the API on a background thread; returns the server (its port, when 0 was asked) and the thread."""
    server = ApiServer((host, port), make_handler(service, settings, ready))
    thread = threading.Thread(target=server.serve_forever, name="api", daemon=True)
    thread.start()
    return server, thread
