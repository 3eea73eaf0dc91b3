"""A stand-in for one model-serving replica: it answers HTTP the way a model server does while it loads and after.

What it models:

- **Loading.** The port is open from the moment the container runs, and every request (health paths included)
  gets ``503 {"status": "loading"}`` until ``load_seconds`` after that: the window in which a replica is up but
  cannot serve. Model servers that open their port only once the weights are in (connection refused while loading)
  look the same to an HTTP probe; a TCP probe passes on this stand-in while it still answers 503, as it would on a
  real server that listens early, which is why a serving Deployment should declare an HTTP readiness probe.
- **Serving.** Once loaded, every request gets ``200`` after ``service_seconds`` (the time one request takes:
  a real diffusion model takes seconds per image; requests are served concurrently, one thread each).
- **Gone.** :meth:`ReplicaServer.stop` closes the socket: new connections are refused, as from a replica whose
  container or instance ended. A request in flight at that moment, or sent later on a kept-alive connection, ends
  without an answer (the connection is closed).

What it does not model: GPU memory, batching and queueing inside the server (service time does not grow with
load), slow-loris clients, TLS.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

log = logging.getLogger("fakes.replica")

Clock = Callable[[], float]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    replica: ReplicaServer


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        replica = self.server.replica
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(min(length, 1 << 20))
        replica.requests += 1
        if replica.gone:
            self.close_connection = True  # the replica is gone: no answer, the connection just ends
            return
        if not replica.loaded():
            self._send(503, {"status": "loading", "replica": replica.name})
            return
        if replica.service_seconds > 0:
            time.sleep(replica.service_seconds)
        if replica.gone:
            self.close_connection = True
            return
        self._send(200, {"status": "ok", "replica": replica.name})

    def _send(self, code: int, body: dict[str, str]) -> None:
        raw = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def do_HEAD(self) -> None:
        self.send_response(503 if not self.server.replica.loaded() else 200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        log.debug("%s %s", self.address_string(), format % args)


class ReplicaServer:
    """One replica's HTTP port: 503 until ``started_at + load_seconds``, 200 after, refused once stopped."""

    def __init__(
        self,
        name: str,
        host: str,
        port: int,
        *,
        started_at: float,
        load_seconds: float,
        service_seconds: float = 0.0,
        clock: Clock = time.time,
        is_loaded: Callable[[], bool] | None = None,
    ) -> None:
        self.name = name
        self.started_at = started_at
        self.load_seconds = load_seconds
        self.service_seconds = service_seconds
        self.requests = 0
        self.gone = False
        self._clock = clock
        self._is_loaded = is_loaded
        self._server = _Server((host, port), _Handler, bind_and_activate=True)
        self._server.replica = self
        self.host, self.port = self._server.server_address[0], int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name=f"replica-{name}", daemon=True
        )
        self._thread.start()

    def loaded(self) -> bool:
        """Loaded after ``load_seconds``, or when ``is_loaded`` says so (a replica whose readiness is known
        elsewhere: the simulated cluster's in-cluster pods, Ready once kwok has played their readiness probe)."""
        if self._is_loaded is not None:
            return self._is_loaded()
        return self._clock() >= self.started_at + self.load_seconds

    def stop(self) -> None:
        """Close the port: every later connection is refused, and requests still open end without an answer."""
        self.gone = True
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def can_listen(host: str) -> bool:
    """Whether ``host`` is an address of this machine that a replica can listen on (127.0.0.0/8 always is)."""
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.bind((host, 0))
        return True
    except OSError:
        return False
