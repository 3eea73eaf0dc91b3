"""One probe against a real socket: the model-server stand-in while loading, loaded and gone, and odd servers."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from daemons.burst_provider.prober import run_probe
from daemons.burst_provider.probes import Probe
from sim.fakes.replica import ReplicaServer, can_listen
from tests.daemons.burst_provider.support import ManualClock

HTTP = Probe("readiness", "server", "http", 0, path="/health")
TCP = Probe("readiness", "server", "tcp", 0)


@pytest.fixture
def replica() -> Iterator[tuple[ReplicaServer, ManualClock]]:
    clock = ManualClock()
    server = ReplicaServer("r", "127.0.0.1", 0, started_at=clock.now, load_seconds=20, clock=clock)
    yield server, clock
    server.stop()


def test_a_loading_replica_fails_an_http_probe_and_passes_once_loaded(
    replica: tuple[ReplicaServer, ManualClock],
) -> None:
    server, clock = replica
    assert run_probe(server.host, server.port, HTTP) == (False, "HTTP probe failed with statuscode: 503")
    clock.advance(20)
    assert run_probe(server.host, server.port, HTTP) == (True, "HTTP 200")


def test_a_tcp_probe_passes_on_a_replica_that_still_answers_503(replica: tuple[ReplicaServer, ManualClock]) -> None:
    """Why a serving Deployment declares an HTTP readiness probe: a port that is open is not a model loaded."""
    server, _ = replica
    assert run_probe(server.host, server.port, TCP)[0] is True


def test_a_replica_that_is_gone_refuses(replica: tuple[ReplicaServer, ManualClock]) -> None:
    server, clock = replica
    clock.advance(60)
    server.stop()
    ok, detail = run_probe(server.host, server.port, HTTP)
    assert not ok
    assert "connection refused" in detail
    ok, detail = run_probe(server.host, server.port, TCP)
    assert not ok
    assert "connection refused" in detail


def test_a_server_that_never_answers_fails_within_the_probes_timeout() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()  # accepts into the backlog, never reads or answers
        port = listener.getsockname()[1]
        started = time.monotonic()
        ok, detail = run_probe("127.0.0.1", port, HTTP)
        elapsed = time.monotonic() - started
    assert not ok
    assert "no answer within 1s" in detail
    assert elapsed < 5


class _Redirecting(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/health":
            self.send_response(302)
            self.send_header("Location", self.server.target)  # type: ignore[attr-defined]
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(503 if self.path == "/down" else 200)
        self.send_header("Content-Length", "0")
        self.end_headers()
        self.server.agents.append(self.headers.get("User-Agent"))  # type: ignore[attr-defined]

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.mark.parametrize(
    ("target", "passed", "detail"),
    [
        ("/down", False, "statuscode: 503"),  # same host: followed, and what it leads to counts
        ("/ok", True, "HTTP 200"),
        ("http://192.0.2.1:9/elsewhere", True, "terminated redirects"),  # elsewhere: not followed, a pass
    ],
)
def test_redirects_are_followed_on_the_same_host_only(target: str, passed: bool, detail: str) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Redirecting)
    server.target, server.agents = target, []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        ok, what = run_probe("127.0.0.1", server.server_address[1], HTTP)
    finally:
        server.shutdown()
        server.server_close()
    assert ok is passed
    assert detail in what
    if target.startswith("/"):
        assert server.agents == ["kube-probe/1.36"]  # type: ignore[attr-defined]


def test_instances_on_the_loopback_range_can_serve_and_a_documentation_address_cannot() -> None:
    assert can_listen("127.77.0.9")
    assert not can_listen("198.51.100.7")
