"""What the fake servers share: JSON replies, a clock tests can move, a server on a thread, a CLI runner.

The HTTP side is the daemons' shared server (``daemons/toolkit/http.py``); a fake is one function from
(method, path, query, body, headers) to a :class:`Reply`.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections.abc import Callable
from typing import Any, Self

from daemons.toolkit.http import DEFAULT_MAX_BODY, HttpService, Request, Response
from daemons.toolkit.shutdown import StopSignal

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

    def __init__(
        self,
        status: int,
        body: Any = None,
        *,
        raw: bytes | None = None,
        content_type: str = "",
        headers: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self.status = status
        self.headers = headers
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


def make_app(handle: Handler, log: logging.Logger) -> Callable[[Request], Response]:
    """The toolkit app that hands (method, path, query, body, headers) to ``handle`` and returns its Reply."""

    def app(request: Request) -> Response:
        body = request.read_body()
        if body is None:
            reply = Reply(400, {"error": f"the body needs a Content-Length of at most {DEFAULT_MAX_BODY} bytes"})
        else:
            try:
                reply = handle(request.method, request.path, request.query, body, request.headers)
            except Exception as exc:  # a bug in the fake must still answer, as a real server's 500 would
                log.exception("fake server error")
                reply = Reply(500, {"error": f"internal error: {type(exc).__name__}: {str(exc)[:200]}"})
        return Response(reply.status, reply.raw, reply.content_type, reply.headers)

    return app


class BackgroundServer:
    """Runs a handler on a thread; ``url`` is ``http://host:port``. Usable as a context manager."""

    def __init__(self, handle: Handler, log: logging.Logger, host: str = "127.0.0.1", port: int = 0) -> None:
        self._service = HttpService(
            host,
            port,
            make_app(handle, log),
            log=log,
            server_version="gpucluster-fake",
            methods=("GET", "POST", "DELETE", "PATCH"),
            poll_interval=0.1,
        )

    @property
    def url(self) -> str:
        return self._service.url

    def start(self) -> None:
        self._service.start()

    def stop(self) -> None:
        self._service.stop()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve_until_signal(server: BackgroundServer, name: str, log: logging.Logger, extra: dict[str, Any]) -> int:
    """Print the ready line on stdout, serve until SIGTERM/SIGINT, stop cleanly; exit status 0."""
    stop = StopSignal(log).install()
    server.start()
    print(json.dumps({"ready": True, "server": name, "url": server.url, **extra}), flush=True)
    log.info("serving", extra={"url": server.url, **extra})
    stop.wait()
    server.stop()
    sys.stdout.flush()
    return 0
