"""Run a controller daemon that stands by behind a Lease until SIGTERM or SIGINT.

It serves ``/metrics`` and ``/healthz``, takes (or learns it cannot take) the Lease before the first cycle, keeps
the election going on its own thread, runs the control loop, then drains: the election ends, the Lease is released
(a standby takes over at once) and the HTTP server stops, all within one election round (retryPeriod) plus
:data:`DRAIN_EXTRA_SECONDS`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from daemons.toolkit.http import HttpService, Routes
from daemons.toolkit.lease import LeaderElector
from daemons.toolkit.shutdown import Step, StopSignal, drain

#: SIGTERM may take one election round (retryPeriod) plus this: the cycle in flight, the Lease release, HTTP.
DRAIN_EXTRA_SECONDS = 15.0


def serve_behind_lease(
    *,
    host: str,
    port: int,
    routes: Routes,
    loop: Callable[[threading.Event], object],
    elector: LeaderElector | None,
    retry_period_s: float,
    running: Callable[[str], dict[str, object]],
    log: logging.Logger,
    server_version: str,
) -> int:
    """Serve ``routes``, run ``loop`` until stopped and drain; the exit status (1: cannot listen).

    ``elector`` None (a dry run) runs without a Lease. ``running`` gives the fields of the ``running`` log line
    from the address served (``host:port``).
    """
    try:
        service = HttpService(host, port, routes, log=log, server_version=server_version)
    except OSError as exc:
        log.error("cannot listen", extra={"address": host, "port": port, "error": str(exc)})
        return 1
    stop = StopSignal(log).install()
    if elector is not None:
        elector.try_acquire_or_renew()  # so the first cycle already knows whether it leads
    service.start()
    election: threading.Thread | None = None
    if elector is not None:
        election = threading.Thread(target=elector.run, args=(stop.stop, retry_period_s), name="election", daemon=True)
        election.start()
    log.info("running", extra=running(f"{host}:{service.port}"))
    try:
        loop(stop.stop)
    finally:
        stop.stop.set()
        steps: list[Step] = []
        if election is not None:
            steps.append(("election", election.join))
        if elector is not None:
            steps.append(("release-lease", elector.release))  # a standby takes over at once
        steps.append(("http", service.stop))
        drain(steps, timeout_s=retry_period_s + DRAIN_EXTRA_SECONDS, log=log)
    log.info("stopped")
    return 0
