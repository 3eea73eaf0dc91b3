"""Graceful shutdown: SIGTERM and SIGINT set one stop event, then a bounded drain runs the daemon's stop steps.

``StopSignal(log).install()`` makes the first SIGTERM or SIGINT log one line (``message``, with the signal's name)
and set ``stop``; the daemon's loops watch ``stop``. ``drain(steps, timeout_s=...)`` then runs the stop steps in
order within one deadline: a step that raises is logged and the next one runs; a step still running at the deadline
is left behind (its thread is a daemon thread, so it cannot keep the process alive) and the remaining steps are
skipped, so a hung dependency can delay the exit by at most ``timeout_s``.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Self

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopSignal:
    """One stop event for the whole process, set by SIGTERM or SIGINT (or by the daemon itself)."""

    def __init__(self, log: logging.Logger, message: str = "shutting down") -> None:
        self.log = log
        self.message = message
        self.stop = threading.Event()

    def install(self) -> Self:
        """Handle SIGTERM and SIGINT from now on (call from the main thread)."""
        for signum in SIGNALS:
            signal.signal(signum, self._on_signal)
        return self

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if not self.stop.is_set():
            self.log.info(self.message, extra={"signal": signal.Signals(signum).name})
        self.stop.set()

    def is_set(self) -> bool:
        return self.stop.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self.stop.wait(timeout)


Step = tuple[str, Callable[[], object]]


def drain(steps: Sequence[Step], *, timeout_s: float, log: logging.Logger) -> bool:
    """Run ``steps`` (name, function) in order within ``timeout_s`` seconds; True when all finished in time."""
    deadline = time.monotonic() + timeout_s
    for index, (name, step) in enumerate(steps):
        failure: list[BaseException] = []

        def run(step: Callable[[], object] = step, failure: list[BaseException] = failure) -> None:
            try:
                step()
            except Exception as exc:
                failure.append(exc)

        worker = threading.Thread(target=run, name=f"stop-{name}", daemon=True)
        worker.start()
        worker.join(timeout=max(0.0, deadline - time.monotonic()))
        if worker.is_alive():
            log.warning(
                "shutdown step did not finish in time; exiting without it",
                extra={"step": name, "timeout_s": timeout_s, "skipped": [n for n, _ in steps[index + 1 :]]},
            )
            return False
        if failure:
            error = failure[0]
            log.warning(
                "shutdown step failed",
                extra={"step": name, "error_type": type(error).__name__, "error": str(error)[:300]},
            )
    return True


def every(
    step: Callable[[], object], interval_s: float, stop: threading.Event, log: logging.Logger, what: str = "cycle"
) -> None:
    """A controller's loop: ``step`` every ``interval_s`` until ``stop`` is set; an unexpected error is logged
    (``<what> failed``, with its traceback) and the loop goes on."""
    while not stop.is_set():
        try:
            step()
        except Exception:
            log.exception(f"{what} failed")
        stop.wait(interval_s)
