"""The daemons' HTTP server: /metrics, /healthz with readiness, mounted routes, bounded bodies, no tracebacks."""

from __future__ import annotations

import errno
import http.client
import logging
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from daemons.toolkit.http import HttpService, Request, Response, Routes

log = logging.getLogger("http-test")


def call(svc: HttpService, method: str, path: str, body: bytes | None = None, **headers: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(svc.host if ":" not in svc.host else f"[{svc.host}]", svc.port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


@pytest.fixture
def ready() -> threading.Event:
    return threading.Event()


@pytest.fixture
def svc(ready: threading.Event) -> Iterator[HttpService]:
    def echo(request: Request) -> Response:
        if request.method == "POST":
            body = request.read_body(limit=16)
            if body is None:
                return Response.json(413, {"error": "too large or no length"})
            return Response.json(200, {"got": body.decode()})
        if request.path == "/boom":
            raise RuntimeError("secret-looking detail sk-123")
        return Response.json(404, {"error": f"no route {request.path}"})

    app = Routes(
        metrics=lambda: b"x_total 1\n",
        ready=ready.is_set,
        not_ready="warming up\n",
        get={"/": lambda _r: Response(200, b"<a href='/metrics'>", "text/html")},
        fallback=echo,
    )
    service = HttpService("127.0.0.1", 0, app, log=log, methods=("GET", "HEAD", "POST")).start()
    yield service
    assert service.stop()


def test_metrics_healthz_and_mounted_routes(svc: HttpService, ready: threading.Event) -> None:
    assert call(svc, "GET", "/metrics") == (200, b"x_total 1\n")
    assert call(svc, "GET", "/healthz") == (503, b"warming up\n")
    ready.set()
    assert call(svc, "GET", "/healthz") == (200, b"ok\n")
    assert call(svc, "GET", "/?x=1") == (200, b"<a href='/metrics'>")
    assert call(svc, "GET", "/nope")[0] == 404
    assert call(svc, "HEAD", "/metrics") == (200, b"")
    assert call(svc, "DELETE", "/metrics")[0] == 501  # a method the daemon does not serve


def test_keep_alive_serves_several_requests_on_one_connection(svc: HttpService) -> None:
    conn = http.client.HTTPConnection(svc.host, svc.port, timeout=10)
    try:
        for _ in range(3):
            conn.request("GET", "/metrics")
            resp = conn.getresponse()
            assert resp.read() == b"x_total 1\n"
            assert not resp.will_close
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("headers", "body"),
    [
        ({"Content-Length": "999999999999"}, b"x"),  # larger than allowed: never read
        ({"Content-Length": "abc"}, b"x"),  # not a number
        ({"Content-Length": "-5"}, b"x"),
        ({"Content-Length": "17"}, b"x" * 17),  # above the route's own limit
    ],
)
def test_a_bad_or_oversized_body_is_refused_without_a_traceback(
    svc: HttpService, headers: dict[str, str], body: bytes, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.create_connection((svc.host, svc.port), timeout=10) as s:
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        s.sendall(f"POST /x HTTP/1.1\r\nHost: t\r\n{head}\r\n".encode() + body)
        reply = s.recv(65536)
    assert reply.startswith(b"HTTP/1.1 413")
    assert b"Connection: close" in reply  # the unread body must not be parsed as the next request
    assert "Traceback" not in capsys.readouterr().err


def test_a_body_within_the_limit_is_read(svc: HttpService) -> None:
    assert call(svc, "POST", "/x", b"hello", **{"Content-Length": "5"}) == (200, b'{"got": "hello"}\n')


def test_a_failing_route_answers_500_and_echoes_nothing(svc: HttpService, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="http-test"):
        status, body = call(svc, "GET", "/boom")
    assert (status, body) == (500, b"internal error\n")
    assert [r.getMessage() for r in caplog.records] == ["request failed"]
    assert call(svc, "GET", "/metrics")[0] == 200  # the server goes on


def test_stop_waits_for_the_request_in_flight() -> None:
    entered, release = threading.Event(), threading.Event()

    def slow(_request: Request) -> Response:
        entered.set()
        release.wait(10)
        return Response(200, b"done\n")

    svc = HttpService("127.0.0.1", 0, Routes(get={"/slow": slow}), log=log).start()
    result: list[bytes] = []
    client = threading.Thread(target=lambda: result.append(call(svc, "GET", "/slow")[1]))
    client.start()
    assert entered.wait(10)
    stopped: list[bool] = []
    stopper = threading.Thread(target=lambda: stopped.append(svc.stop(timeout=10)))
    stopper.start()
    stopper.join(0.3)
    assert stopper.is_alive()  # still waiting for the request
    release.set()
    stopper.join(10)
    client.join(10)
    assert stopped == [True]
    assert result == [b"done\n"]


def test_stop_is_bounded_when_a_request_hangs() -> None:
    entered, release = threading.Event(), threading.Event()

    def hang(_request: Request) -> Response:
        entered.set()
        release.wait(30)
        return Response(200, b"late\n")

    svc = HttpService("127.0.0.1", 0, Routes(get={"/hang": hang}), log=log).start()
    client = threading.Thread(target=lambda: call(svc, "GET", "/hang"), daemon=True)
    client.start()
    assert entered.wait(10)
    assert svc.stop(timeout=0.3) is False
    release.set()


def test_ipv6_loopback_is_served_on_an_ipv6_socket() -> None:
    failure: OSError | None = None
    try:
        svc = HttpService("::1", 0, Routes(), log=log).start()
    except OSError as exc:
        failure = exc
    if failure is not None:
        # A kernel without IPv6 refuses the address family or the address; an IPv4 socket would instead fail to
        # resolve "::1" (socket.gaierror), which is the bug this guards against.
        assert not isinstance(failure, socket.gaierror)
        assert failure.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT), failure
        return
    try:
        assert svc.server.address_family == socket.AF_INET6
        with urllib.request.urlopen(svc.url + "/healthz", timeout=10) as resp:
            assert resp.read() == b"ok\n"
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(svc.url + "/metrics", timeout=10)  # no metrics mounted: 404
    finally:
        svc.stop()


def test_connections_over_the_bound_are_turned_away(caplog: pytest.LogCaptureFixture) -> None:
    entered, release = threading.Semaphore(0), threading.Event()

    def hold(_request: Request) -> Response:
        entered.release()
        release.wait(10)
        return Response(200, b"held\n")

    svc = HttpService("127.0.0.1", 0, Routes(get={"/hold": hold}), log=log, max_connections=2).start()
    results: list[tuple[int, bytes]] = []
    holders = [threading.Thread(target=lambda: results.append(call(svc, "GET", "/hold"))) for _ in range(2)]
    try:
        for t in holders:
            t.start()
        assert entered.acquire(timeout=10)
        assert entered.acquire(timeout=10)
        with caplog.at_level(logging.WARNING, logger=log.name):
            # both slots busy: the next connections are told so at once (served, /healthz would answer 200)
            for _ in range(5):
                assert call(svc, "GET", "/healthz") == (503, b"too many now\n")
        assert svc.server.turned_away == 5
        assert [r.getMessage() for r in caplog.records] == ["connections turned away: all connection slots are busy"]
    finally:
        release.set()
        for t in holders:
            t.join(10)
    assert results == [(200, b"held\n")] * 2
    # a slot is free again once a held connection closed (its thread ends on the client's EOF, a moment after the
    # client saw its answer; one more call right after a 200 could still find both slots taken, so none is made)
    answer = (0, b"")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        answer = call(svc, "GET", "/healthz")
        if answer[0] == 200:
            break
        threading.Event().wait(0.05)
    assert answer == (200, b"ok\n")
    assert svc.stop(timeout=5)


def test_the_connection_bound_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_connections: 0 is not a positive number"):
        HttpService("127.0.0.1", 0, Routes(), log=log, max_connections=0)
