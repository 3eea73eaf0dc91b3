"""serve_behind_lease: the exit status when it cannot listen, and the running/stopped lines around the loop."""

from __future__ import annotations

import logging
import signal
import socket
import threading
from typing import Any

import pytest

from daemons.toolkit.http import Routes
from daemons.toolkit.serve import serve_behind_lease


def _serve(port: int, loop: Any) -> int:
    return serve_behind_lease(
        host="127.0.0.1",
        port=port,
        routes=Routes(metrics=lambda: b""),
        loop=loop,
        elector=None,
        retry_period_s=1.0,
        running=lambda listen: {"listen": listen, "dry_run": True},
        log=logging.getLogger("serve-test"),
        server_version="serve-test",
    )


def test_a_taken_port_exits_1_naming_it(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with caplog.at_level(logging.ERROR, logger="serve-test"):
            assert _serve(port, lambda stop: None) == 1
    (record,) = caplog.records
    assert record.getMessage() == "cannot listen"
    assert getattr(record, "port", None) == port


def test_runs_the_loop_then_stops_and_drains(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(signal, "signal", lambda signum, handler: None)
    seen: list[threading.Event] = []
    with caplog.at_level(logging.INFO, logger="serve-test"):
        assert _serve(0, seen.append) == 0
    assert len(seen) == 1
    assert seen[0].is_set()
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0] == "running"
    assert messages[-1] == "stopped"
    assert str(getattr(caplog.records[0], "listen", "")).startswith("127.0.0.1:")
