"""What both fake servers share: a threaded HTTP server, JSON replies, a clock tests can move, a CLI runner."""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

Clock = Callable[[], float]


class ManualClock:
    """Unix seconds that move only when told: lets tests check boot delays and deaths without sleeping."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds


class Reply:
    """One HTTP answer."""

    def __init__(self, status: int, body: Any = None, *, raw: bytes | None = None, content_type: str = "") -> None:
        self.status = status
        if raw is not None:
            self.raw = raw
            self.content_type = content_type or "application/octet-stream"
        elif body is None:
            self.raw = b""
            self.content_type = content_type or "application/json"
        else:
            self.raw = json.dumps(body).encode()
            self.content_type = content_type or "application/json"


Handler = Callable[[str, str, dict[str, list[str]], bytes, dict[str, str]], Reply]


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def make_handler(handle: Handler, log: logging.Logger) -> type[BaseHTTPRequestHandler]:
    """A request handler that hands (method, path, query, body, headers) to ``handle`` and writes its Reply."""

    class _Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self) -> None:
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            try:
                reply = handle(self.command, parts.path, parse_qs(parts.query), body, headers)
            except Exception as exc:  # a bug in the fake must still answer, as a real server's 500 would
                log.exception("fake server error")
                reply = Reply(500, {"error": f"internal error: {exc}"})
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(reply.raw)))
            self.end_headers()
            if reply.raw and self.command != "HEAD":
                self.wfile.write(reply.raw)

        def do_GET(self) -> None:
            self._serve()

        def do_POST(self) -> None:
            self._serve()

        def do_DELETE(self) -> None:
            self._serve()

        def do_PATCH(self) -> None:
            self._serve()

        def log_message(self, format: str, *args: Any) -> None:
            if log.isEnabledFor(logging.DEBUG):
                log.debug("http request", extra={"client": self.client_address[0], "request": format % args})

    return _Handler


class BackgroundServer:
    """Runs a handler on a thread; ``url`` is ``http://host:port``. Usable as a context manager."""

    def __init__(self, handle: Handler, log: logging.Logger, host: str = "127.0.0.1", port: int = 0) -> None:
        self._server = QuietServer((host, port), make_handler(handle, log))
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def parse_listen(value: str) -> tuple[str, int]:
    """``host:port`` → (host, port); raises ValueError with what is wrong."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{value!r} is not host:port (port 0-65535)")
    return host, int(port)


def serve_until_signal(server: BackgroundServer, name: str, log: logging.Logger, extra: dict[str, Any]) -> int:
    """Print the ready line on stdout, serve until SIGTERM/SIGINT, stop cleanly; exit status 0."""
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("shutting down", extra={"signal": signal.Signals(signum).name})
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    server.start()
    print(json.dumps({"ready": True, "server": name, "url": server.url, **extra}), flush=True)
    log.info("serving", extra={"url": server.url, **extra})
    while not stop.wait(0.2):
        pass
    server.stop()
    sys.stdout.flush()
    return 0
