"""The daemons' HTTP server: ``/metrics``, ``/healthz`` (gated on readiness where a daemon has one), extra routes.

A daemon describes what it serves as an *app*, a function from :class:`Request` to :class:`Response`; most build
it with :class:`Routes` (``/metrics`` and ``/healthz`` plus exact-path GET routes and a fallback for everything
else, such as the burst provider's API), and run it with :class:`HttpService` on a background thread.

What every daemon gets the same way: HTTP/1.1 keep-alive (as Prometheus scrapes), an idle connection closed after
a minute, replies sent without Nagle's delay and buffered so a small reply is one segment, HEAD answered like GET
without the body, request lines logged at debug level only, a body read only up to a limit (a missing, malformed
or oversized ``Content-Length`` is the app's to refuse, never a traceback), an app that raises answered with a 500
that echoes nothing, an IPv6 host (``::1``) served on an IPv6 socket, and a bound on connections served at once (a
thread each): one more is answered 503 and closed at once, so a flood of connections costs no more threads or
memory than the bound. :meth:`HttpService.stop` lets requests in flight finish within a bound.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import parse_qs, unquote, urlsplit

from prometheus_client.exposition import CONTENT_TYPE_LATEST

#: Requests bodies above this are not read (the daemons' APIs take pods of a few KiB).
DEFAULT_MAX_BODY = 8 * 1024 * 1024
#: Connections served at once (Prometheus keeps one or two, a probe opens one for a moment; the burst provider's
#: callers a few more).
DEFAULT_MAX_CONNECTIONS = 32
#: What a connection over the bound is told before it is closed.
_TURNED_AWAY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n"
    b"Retry-After: 1\r\nConnection: close\r\n\r\ntoo many now\n"
)
#: At most one warning about turned-away connections this often (seconds).
_TURNED_AWAY_WARN_EVERY = 60.0


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes = b""
    content_type: str = "text/plain"
    #: Further headers (name, value), such as ``Retry-After``; never Content-Type or Content-Length.
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def text(cls, status: int, text: str, content_type: str = "text/plain") -> Response:
        return cls(status, text.encode(), content_type)

    @classmethod
    def json(cls, status: int, value: Any) -> Response:
        return cls(status, json.dumps(value).encode() + b"\n", "application/json")


class Request:
    """One request as an app sees it: method, path (without the query), query, lower-case headers, the body."""

    def __init__(self, handler: BaseHTTPRequestHandler, max_body: int) -> None:
        url = urlsplit(handler.path)
        self.method = handler.command
        self.path = url.path
        self.query: dict[str, list[str]] = parse_qs(url.query)
        self.headers: dict[str, str] = {k.lower(): v for k, v in handler.headers.items()}
        self.max_body = max_body
        self._rfile = handler.rfile
        self._body: bytes | None = None
        # a body this server did not read would be taken for the next request on the connection
        self.body_unread = "transfer-encoding" in self.headers or (
            "content-length" in self.headers and self.content_length() != 0
        )

    @property
    def parts(self) -> list[str]:
        """The path's non-empty segments, percent-decoded."""
        return [unquote(p) for p in self.path.split("/") if p]

    def content_length(self) -> int | None:
        """The declared body length; None when absent or not a non-negative number."""
        raw = self.headers.get("content-length")
        if raw is None:
            return None
        raw = raw.strip()
        if not raw.isascii() or not raw.isdigit() or len(raw) > 18:
            return None
        return int(raw)

    def read_body(self, limit: int | None = None) -> bytes | None:
        """The body (``b""`` when there is none); None when its length is malformed or above ``limit``."""
        if self._body is not None:
            return self._body
        limit = self.max_body if limit is None else min(limit, self.max_body)
        length = self.content_length()
        if "content-length" not in self.headers:
            self._body = b""
            return self._body
        if length is None or length > limit:
            return None
        self._body = self._rfile.read(length) if length else b""
        self.body_unread = False
        return self._body


App = Callable[[Request], Response]


def not_found(_request: Request) -> Response:
    return Response(404, b"not found\n")


class Routes:
    """``/metrics``, ``/healthz``, exact-path GET routes, then ``fallback`` (404 ``not found`` without one).

    ``/healthz`` answers ``ok`` with 200 while ``ready()`` holds (always, without ``ready``), else 503 with
    ``not_ready``. ``/metrics`` is served only when ``metrics`` is given.
    """

    def __init__(
        self,
        *,
        metrics: Callable[[], bytes] | None = None,
        ready: Callable[[], bool] | None = None,
        not_ready: str = "not ready\n",
        get: Mapping[str, App] | None = None,
        fallback: App = not_found,
    ) -> None:
        self.metrics = metrics
        self.ready = ready
        self.not_ready = not_ready
        self.get = dict(get or {})
        self.fallback = fallback

    def __call__(self, request: Request) -> Response:
        if request.method in ("GET", "HEAD"):
            if request.path == "/metrics" and self.metrics is not None:
                return Response(200, self.metrics(), CONTENT_TYPE_LATEST)
            if request.path == "/healthz":
                if self.ready is None or self.ready():
                    return Response(200, b"ok\n")
                return Response.text(503, self.not_ready)
            route = self.get.get(request.path)
            if route is not None:
                return route(request)
        return self.fallback(request)


class DaemonHttpServer(ThreadingHTTPServer):
    """A thread per connection, at most ``max_connections`` of them; counts the requests in flight so a shutdown
    can wait for them. A connection over the bound is answered 503 (``Retry-After: 1``) and closed without a
    thread; :attr:`turned_away` counts them and a warning says so at most once a minute."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        *,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        log: logging.Logger | None = None,
    ) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections: {max_connections} is not a positive number")
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self._in_flight = 0
        self._idle = threading.Condition()
        self._slots = threading.BoundedSemaphore(max_connections)
        self.max_connections = max_connections
        self.turned_away = 0
        self._warned_at: float | None = None
        self._log = log
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self._turn_away(request)
            return
        try:
            super().process_request(request, client_address)  # starts the connection's thread
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def _turn_away(self, request: socket.socket) -> None:
        self.turned_away += 1
        try:
            request.settimeout(1.0)
            request.sendall(_TURNED_AWAY)
        except OSError:
            pass
        self.shutdown_request(request)
        now = time.monotonic()
        if self._log is not None and (self._warned_at is None or now - self._warned_at >= _TURNED_AWAY_WARN_EVERY):
            self._warned_at = now
            self._log.warning(
                "connections turned away: all connection slots are busy",
                extra={"max_connections": self.max_connections, "turned_away_total": self.turned_away},
            )

    def request_started(self) -> None:
        with self._idle:
            self._in_flight += 1

    def request_done(self) -> None:
        with self._idle:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.notify_all()

    @property
    def in_flight(self) -> int:
        with self._idle:
            return self._in_flight

    def wait_idle(self, timeout: float) -> bool:
        """True once no request is in flight; False when ``timeout`` seconds passed first."""
        with self._idle:
            return self._idle.wait_for(lambda: self._in_flight == 0, timeout=timeout)


def make_handler(
    app: App,
    *,
    log: logging.Logger,
    server_version: str = "gpucluster",
    methods: Iterable[str] = ("GET", "HEAD"),
    max_body: int = DEFAULT_MAX_BODY,
) -> type[BaseHTTPRequestHandler]:
    """A request handler that serves ``app`` for ``methods`` (others: 501, as the standard library answers)."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as Prometheus scrapes: no new connection and thread per scrape
        timeout = 60  # an idle kept-alive connection is closed after a minute
        # Headers and body go out without waiting for the client's delayed ACK (Nagle would hold the second
        # write up to 40 ms on a kept-alive connection); buffered so small replies are one segment.
        disable_nagle_algorithm = True
        wbufsize = -1

        def _serve(self) -> None:
            server = self.server if isinstance(self.server, DaemonHttpServer) else None
            if server is not None:
                server.request_started()
            try:
                request = Request(self, max_body)
                try:
                    response = app(request)
                except Exception as exc:  # an app's bug answers 500 and is logged; the server goes on
                    log.error(
                        "request failed",
                        extra={"method": self.command, "path": request.path[:200], "error_type": type(exc).__name__},
                        exc_info=True,
                    )
                    response = Response(500, b"internal error\n")
                if request.body_unread:
                    self.close_connection = True
                self.send_response(response.status)
                self.send_header("Content-Type", response.content_type)
                self.send_header("Content-Length", str(len(response.body)))
                for name, value in response.headers:
                    self.send_header(name, value)
                if self.close_connection:
                    self.send_header("Connection", "close")
                self.end_headers()
                if self.command != "HEAD" and response.body:
                    self.wfile.write(response.body)
            finally:
                if server is not None:
                    server.request_done()

        def log_message(self, format: str, *args: Any) -> None:
            if log.isEnabledFor(logging.DEBUG):
                log.debug("http request", extra={"client": self.client_address[0], "request": format % args})

    Handler.server_version = server_version
    for method in methods:
        setattr(Handler, f"do_{method.upper()}", Handler._serve)
    return Handler


class HttpService:
    """``app`` served on ``host:port`` from a background thread. Binding happens at construction (OSError)."""

    def __init__(
        self,
        host: str,
        port: int,
        app: App,
        *,
        log: logging.Logger,
        server_version: str = "gpucluster",
        methods: Iterable[str] = ("GET", "HEAD"),
        max_body: int = DEFAULT_MAX_BODY,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        poll_interval: float = 0.1,
        thread_name: str = "http",
    ) -> None:
        handler = make_handler(app, log=log, server_version=server_version, methods=methods, max_body=max_body)
        self.server = DaemonHttpServer((host, port), handler, max_connections=max_connections, log=log)
        self._poll = poll_interval
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": poll_interval}, name=thread_name, daemon=True
        )
        self._stopped = False

    @property
    def host(self) -> str:
        return str(self.server.server_address[0])

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> bool:
        """Stop accepting, let requests in flight finish (at most ``timeout`` seconds), close the socket.

        True when everything finished in time. Idle kept-alive connections are not waited for.
        """
        if self._stopped:
            return True
        self._stopped = True
        deadline = time.monotonic() + timeout
        if self._thread.is_alive():
            self.server.shutdown()  # returns within one poll interval
            self._thread.join(timeout=max(0.0, deadline - time.monotonic()))
        drained = self.server.wait_idle(max(0.0, deadline - time.monotonic()))
        self.server.server_close()
        return drained and not self._thread.is_alive()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
