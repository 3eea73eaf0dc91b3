"""Graceful shutdown: a signal sets the stop event once, and the drain is bounded."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

import pytest

from daemons.toolkit.shutdown import StopSignal, drain

log = logging.getLogger("shutdown-test")


def test_sigterm_sets_stop_and_logs_once(caplog: pytest.LogCaptureFixture) -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        stop = StopSignal(log, "stopping").install()
        with caplog.at_level(logging.INFO, logger="shutdown-test"):
            os.kill(os.getpid(), signal.SIGTERM)
            assert stop.wait(5)
            os.kill(os.getpid(), signal.SIGINT)
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
    lines = [(r.getMessage(), getattr(r, "signal", None)) for r in caplog.records]
    assert lines == [("stopping", "SIGTERM")]


def test_drain_runs_every_step_in_order_and_survives_a_failing_one(caplog: pytest.LogCaptureFixture) -> None:
    ran: list[str] = []

    def fail() -> None:
        ran.append("b")
        raise RuntimeError("lease gone")

    with caplog.at_level(logging.WARNING, logger="shutdown-test"):
        steps = [("a", lambda: ran.append("a")), ("b", fail), ("c", lambda: ran.append("c"))]
        done = drain(steps, timeout_s=5, log=log)
    assert done
    assert ran == ["a", "b", "c"]
    (record,) = caplog.records
    assert record.getMessage() == "shutdown step failed"
    assert record.step == "b"  # type: ignore[attr-defined]


def test_drain_gives_up_on_a_hung_step_within_its_deadline(caplog: pytest.LogCaptureFixture) -> None:
    release = threading.Event()
    ran: list[str] = []
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="shutdown-test"):
        done = drain([("hung", release.wait), ("after", lambda: ran.append("after"))], timeout_s=0.3, log=log)
    elapsed = time.monotonic() - started
    release.set()
    assert not done
    assert ran == []  # the steps after the hung one are skipped
    assert elapsed < 5  # bounded (generous: the machine may be busy)
    (record,) = caplog.records
    assert record.step == "hung"  # type: ignore[attr-defined]
    assert record.skipped == ["after"]  # type: ignore[attr-defined]


def test_every_runs_the_step_until_stopped_and_a_failing_step_is_logged_not_fatal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import logging  # noqa: PLC0415
    import threading  # noqa: PLC0415

    from daemons.toolkit.shutdown import every  # noqa: PLC0415

    stop = threading.Event()
    calls: list[int] = []

    def step() -> None:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("the API server went away")
        if len(calls) == 3:
            stop.set()

    every(step, 0.001, stop, logging.getLogger("t"), "cycle")
    assert len(calls) == 3
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR] == ["cycle failed"]
