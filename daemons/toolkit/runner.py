"""The one runner of our Lease-electing controllers: a spec (``contract/controllers/<name>.py``) and its runtime hooks
in, a command line out.

``main_for(SPEC, Runtime(...))`` is a controller's whole ``main``: the flags (``controller_parser``, the port from
the spec), the settings (exit 2 naming every problem, 0 when disabled), the Kubernetes client and the Lease
(none in a dry run), then either ``--once`` (one cycle, its summary as JSON on stdout) or serving ``/metrics`` and
``/healthz`` behind the Lease until SIGTERM (``serve_behind_lease``). What differs between controllers is in the
:class:`Runtime`: how to make its metrics and its controller (:func:`on_the_api`, :func:`querying`, or its own hook
on :meth:`Wiring.build`), what a cycle's summary says and what its ``running`` log line adds.

What every controller's command does: serves ``/metrics`` and ``/healthz``; logs JSON, one object per line, on
stderr; SIGTERM and SIGINT stop it gracefully (the loop ends, the Lease is released so a standby takes over at once,
the process exits 0); bad settings print one message naming every problem and exit 2; settings that disable it
exit 0.
"""

from __future__ import annotations

import argparse
import json
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from contract.spec import ControllerSettingsLike, ControllerSpec
from daemons.toolkit.http import Routes
from daemons.toolkit.kube import load_kube_config
from daemons.toolkit.lease import LeaderElector, elector_for
from daemons.toolkit.prometheus import PrometheusClient
from daemons.toolkit.serve import SETTINGS_HELP, Started, controller_parser, serve_behind_lease, start


class ControllerMetrics(Protocol):
    #: 1 while this replica holds the Lease.
    is_leader: Any

    def render(self) -> bytes: ...


class CycleOutcome(Protocol):
    """What a cycle says whatever the controller: whether this replica led it (only the leader writes)."""

    @property
    def leader(self) -> bool: ...


class Cycling(Protocol):
    """A controller (:class:`~daemons.toolkit.controller.Replica`): one cycle for ``--once``, the loop to serve."""

    def cycle(self) -> CycleOutcome: ...

    def run(self, stop: threading.Event) -> None: ...


S = TypeVar("S", bound=ControllerSettingsLike)
M = TypeVar("M", bound=ControllerMetrics)
C = TypeVar("C", bound=Cycling)


@dataclass(frozen=True)
class Wiring(Generic[S, M]):
    """What the runner made for a controller: the runtime's ``controller`` hook builds the controller on it."""

    settings: S
    #: The official client's ApiClient (kubeconfig, else the pod's service account).
    api_client: Any
    metrics: M
    identity: str
    dry_run: bool
    #: Whether this replica leads now (always True in a dry run, which takes no Lease).
    is_leader: Callable[[], bool]

    def build(self, controller: Callable[..., C], *inputs: Any) -> C:
        """``controller(settings, *inputs, metrics, is_leader=..., identity=..., dry_run=...)``: every controller's
        constructor (:class:`~daemons.toolkit.controller.Replica`), on what it reads and writes through."""
        return controller(
            self.settings, *inputs, self.metrics, is_leader=self.is_leader, identity=self.identity, dry_run=self.dry_run
        )


def _flag_dry_run(args: argparse.Namespace, _settings: Any) -> bool:
    return bool(args.dry_run)


def flag_or_settings_dry_run(args: argparse.Namespace, settings: Any) -> bool:
    """A ``dry_run`` hook: the settings' own ``dryRun`` makes a dry run too, as the flag does."""
    return bool(args.dry_run or settings.dry_run)


def _no_fields(_settings: Any) -> dict[str, object]:
    return {}


@dataclass(frozen=True)
class Runtime(Generic[S, M, C]):
    metrics: Callable[[], M]
    controller: Callable[[Wiring[S, M]], C]
    #: One cycle's result as the JSON ``--once`` prints, after whether this replica led it (``leader``).
    summary: Callable[[Any], dict[str, object]]
    #: Fields of the ``running`` log line beyond identity, Lease, listen address and dry run.
    running: Callable[[S], dict[str, object]] = field(default=_no_fields)
    #: Whether this run writes nothing (the flag; a controller may also read its settings).
    dry_run: Callable[[argparse.Namespace, S], bool] = field(default=_flag_dry_run)


def routes(metrics: ControllerMetrics) -> Routes:
    """``/metrics`` (Prometheus text) and ``/healthz``; 404 elsewhere."""
    return Routes(metrics=metrics.render)


def build_parser(spec: ControllerSpec[Any]) -> argparse.ArgumentParser:
    return controller_parser(
        spec.app,
        spec.description,
        listen=f":{spec.metrics_port}",
        once_help=spec.once_help,
        dry_run_help=spec.dry_run_help,
        settings_help=spec.settings_help or SETTINGS_HELP,
    )


def run(spec: ControllerSpec[S], runtime: Runtime[S, M, C], argv: Sequence[str] | None = None) -> int:
    log = logging.getLogger(spec.module.removeprefix("daemons."))

    def build(args: argparse.Namespace, settings: S, identity: str) -> tuple[C, LeaderElector | None, M]:
        api_client = load_kube_config(args.kubeconfig)
        metrics = runtime.metrics()
        dry_run = runtime.dry_run(args, settings)
        elector = None if dry_run else elector_for(api_client, settings, identity, metrics.is_leader)
        wiring = Wiring(
            settings=settings,
            api_client=api_client,
            metrics=metrics,
            identity=identity,
            dry_run=dry_run,
            is_leader=elector.is_leader if elector else (lambda: True),
        )
        return runtime.controller(wiring), elector, metrics

    started = start(
        build_parser(spec),
        argv,
        load=spec.settings_model.load,
        build=build,
        prog=spec.app,
        log=log,
        bad_settings=spec.settings_error,
    )
    if isinstance(started, int):
        return started
    return _once(started, runtime) if started.args.once else _serve(spec, started, runtime, log)


def _once(started: Started[S, tuple[C, LeaderElector | None, M]], runtime: Runtime[S, M, C]) -> int:
    controller, elector, _metrics = started.built
    if elector is not None:
        elector.try_acquire_or_renew()
    try:
        result = controller.cycle()
    finally:
        if elector is not None:
            elector.release()
    print(json.dumps({"leader": result.leader, **runtime.summary(result)}))
    return 0


def _serve(
    spec: ControllerSpec[S],
    started: Started[S, tuple[C, LeaderElector | None, M]],
    runtime: Runtime[S, M, C],
    log: logging.Logger,
) -> int:
    settings, identity = started.settings, started.identity
    controller, elector, metrics = started.built
    return serve_behind_lease(
        host=started.host,
        port=started.port,
        routes=routes(metrics),
        loop=controller.run,
        elector=elector,
        retry_period_s=settings.retry_period_seconds,
        running=lambda listen: {
            "identity": identity,
            **runtime.running(settings),
            "lease": f"{settings.namespace}/{settings.lease_name}",
            "listen": listen,
            "dry_run": elector is None,
        },
        log=log,
        server_version=spec.app,
    )


class TimedSettings(ControllerSettingsLike, Protocol):
    """Settings that bound each API call (``requestTimeout``)."""

    @property
    def request_timeout_seconds(self) -> float: ...


T = TypeVar("T", bound=TimedSettings)


def on_the_api(controller: Callable[..., C], kube_api: Callable[[Any, float], Any]) -> Callable[[Wiring[T, M]], C]:
    """The ``controller`` hook of a controller that reads and writes through the API only
    (:class:`~daemons.toolkit.controller.OnTheApi`): built on its client (the replica's connection, each call bounded
    by ``requestTimeout``)."""

    def build(w: Wiring[T, M]) -> C:
        return w.build(controller, kube_api(w.api_client, w.settings.request_timeout_seconds))

    return build


class QueryingSettings(TimedSettings, Protocol):
    """Settings that also name the Prometheus to query."""

    @property
    def prometheus_url(self) -> str: ...


Q = TypeVar("Q", bound=QueryingSettings)


def querying(controller: Callable[..., C], kube_api: Callable[[Any, float], Any]) -> Callable[[Wiring[Q, M]], C]:
    """The ``controller`` hook of a controller that queries Prometheus and acts on the API
    (:class:`~daemons.toolkit.controller.Querying`): built on a client of ``prometheusUrl`` and one of the API, each
    call of either bounded by ``requestTimeout``."""

    def build(w: Wiring[Q, M]) -> C:
        timeout = w.settings.request_timeout_seconds
        return w.build(
            controller, PrometheusClient(w.settings.prometheus_url, timeout), kube_api(w.api_client, timeout)
        )

    return build


def main_for(spec: ControllerSpec[S], runtime: Runtime[S, M, C]) -> Callable[[Sequence[str] | None], int]:
    """A controller's ``main(argv=None)``."""

    def main(argv: Sequence[str] | None = None) -> int:
        return run(spec, runtime, argv)

    return main
