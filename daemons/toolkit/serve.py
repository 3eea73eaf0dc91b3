"""Start a controller daemon that stands by behind a Lease (:func:`start`) and run it until SIGTERM or SIGINT.

It serves ``/metrics`` and ``/healthz``, takes (or learns it cannot take) the Lease before the first cycle, keeps
the election going on its own thread, runs the control loop, then drains: the election ends, the Lease is released
(a standby takes over at once) and the HTTP server stops, all within one election round (retryPeriod) plus
:data:`DRAIN_EXTRA_SECONDS`.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from daemons.toolkit.cli import add_log_level, daemon_parser
from daemons.toolkit.http import HttpService, Routes
from daemons.toolkit.lease import LeaderElector
from daemons.toolkit.listen import ListenError, parse_listen
from daemons.toolkit.logs import setup_logging
from daemons.toolkit.shutdown import Step, StopSignal, drain

#: SIGTERM may take one election round (retryPeriod) plus this: the cycle in flight, the Lease release, HTTP.
DRAIN_EXTRA_SECONDS = 15.0


SETTINGS_HELP = "settings file: JSON when it ends in .json, YAML otherwise (camelCase keys; see the README)"


def controller_parser(
    prog: str,
    description: str,
    *,
    listen: str,
    once_help: str,
    dry_run_help: str,
    settings_help: str = SETTINGS_HELP,
) -> argparse.ArgumentParser:
    """The command line every Lease-electing controller of ours takes: ``--settings``, ``--kubeconfig``,
    ``--listen``, ``--identity``, ``--once``, ``--dry-run``, ``--log-level``; what a cycle and a dry run do is the
    controller's own text."""
    p = daemon_parser(prog, description)
    p.add_argument("--settings", required=True, metavar="FILE", help=settings_help)
    p.add_argument(
        "--kubeconfig",
        default=None,
        metavar="FILE",
        help="kubeconfig to use (default: the in-cluster service account, else ~/.kube/config)",
    )
    p.add_argument(
        "--listen", default=listen, metavar="[HOST]:PORT", help="where to serve /metrics and /healthz (port 0: any)"
    )
    p.add_argument(
        "--identity", default=None, help="leader election identity (default: $POD_NAME or the hostname, then _<pid>)"
    )
    p.add_argument("--once", action="store_true", help=once_help)
    p.add_argument("--dry-run", action="store_true", help=dry_run_help)
    return add_log_level(p)


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


EXIT_BAD_SETTINGS = 2


class _Switchable(Protocol):
    @property
    def enabled(self) -> bool: ...


S = TypeVar("S", bound=_Switchable)
B = TypeVar("B")


@dataclass(frozen=True)
class Started(Generic[S, B]):
    args: argparse.Namespace
    host: str
    port: int
    settings: S
    identity: str
    #: What ``build`` made of the settings (the controller, its elector, its metrics).
    built: B


def default_identity() -> str:
    """The pod name (downward API ``POD_NAME``) or the hostname, plus the PID: unique per process."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{os.getpid()}"


def start(
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    *,
    load: Callable[[str], S],
    build: Callable[[argparse.Namespace, S, str], B],
    prog: str,
    log: logging.Logger,
    bad_settings: type[Exception],
) -> Started[S, B] | int:
    """Parse the flags (``--listen``, ``--log-level``, ``--settings``, ``--identity``), load the settings and
    build the daemon; an exit status when it cannot: 2 (:data:`EXIT_BAD_SETTINGS`) with one message naming every
    problem (``load`` raises ``bad_settings``), 0 when the settings disable it, 1 without a Kubernetes client. A bad
    ``--listen`` is a usage error."""
    args = parser.parse_args(argv)
    try:
        host, port = parse_listen(args.listen, default_host="0.0.0.0")
    except ListenError as exc:
        parser.error(str(exc))
    setup_logging(args.log_level)
    try:
        settings = load(args.settings)
    except bad_settings as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return EXIT_BAD_SETTINGS
    if not settings.enabled:
        log.info("disabled in the settings (enabled: false); nothing to do")
        return 0
    identity = args.identity or default_identity()
    try:
        built = build(args, settings, identity)
    except Exception as exc:  # no kubeconfig, no service account
        log.error("cannot configure the Kubernetes client", extra={"error": str(exc)})
        return 1
    return Started(args, host, port, settings, identity, built)
