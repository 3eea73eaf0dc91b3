"""``gpucluster-taint-controller``: puts the NoSchedule burst taint on the virtual node while in-cluster GPUs are free.

Serves ``/metrics`` and ``/healthz``. Logs are JSON, one object per line, on stderr. SIGTERM and SIGINT stop it
gracefully: the loop ends, the Lease is released (holderIdentity emptied, so a standby takes over at once) and the
process exits 0. Bad settings: one message naming every problem, exit status 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence

from components.taint_controller_settings import TaintControllerSettings, load_settings
from daemons.taint_controller.controller import Controller
from daemons.taint_controller.kube import (
    KubeEventSink,
    KubeNodeApi,
    LeaderElector,
    load_kube_config,
)
from daemons.taint_controller.metrics import Metrics
from daemons.taint_controller.prometheus import PrometheusClient
from daemons.toolkit.http import Routes
from daemons.toolkit.lease import elector_for
from daemons.toolkit.logs import LEVELS
from daemons.toolkit.serve import EXIT_BAD_SETTINGS, serve_behind_lease, start

__all__ = ["EXIT_BAD_SETTINGS", "build_parser", "http_app", "main"]

log = logging.getLogger("taint_controller")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gpucluster-taint-controller",
        description=(
            "Add the NoSchedule burst taint to the virtual node while in-cluster GPU headroom stays at or above "
            "highMark for holdAdd where the burst replicas would come home; remove it while the headroom of some GPU "
            "type (or of the whole cluster) stays below lowMark with inference pods of that type Pending for "
            "holdRemove; otherwise change nothing. Only the holder of the Lease acts. Metrics are prefixed "
            "gpucluster_taint_controller_."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--settings",
        required=True,
        metavar="FILE",
        help="JSON settings file (the TaintControllerSettings model, camelCase keys; see the README)",
    )
    p.add_argument(
        "--kubeconfig",
        default=None,
        metavar="FILE",
        help="kubeconfig to use (default: the in-cluster service account, else ~/.kube/config)",
    )
    p.add_argument(
        "--listen", default=":9102", metavar="[HOST]:PORT", help="where to serve /metrics and /healthz (port 0: any)"
    )
    p.add_argument(
        "--identity",
        default=None,
        help="leader election identity (default: $POD_NAME or the hostname, then _<pid>)",
    )
    p.add_argument(
        "--once",
        action="store_true",
        help="run one tick (acquiring the Lease if it is free, releasing it after), print the inputs and the decision "
        "as JSON on stdout and exit; no HTTP server. A hold time cannot pass within one tick, so this never adds or "
        "removes the taint; it does repair a hand-edited one",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="query, decide and log what would change, but write nothing to the API server: no taint, no Event, "
        "no Lease (the replica behaves as leader for its decisions)",
    )
    p.add_argument(
        "--log-level",
        default="info",
        choices=LEVELS,
        help="minimum level of the JSON log lines written to stderr",
    )
    return p


def http_app(metrics: Metrics) -> Routes:
    """``/metrics`` (Prometheus text) and ``/healthz``; 404 elsewhere."""
    return Routes(metrics=metrics.render)


def _build(
    args: argparse.Namespace, settings: TaintControllerSettings, identity: str
) -> tuple[Controller, LeaderElector | None, Metrics]:
    api_client = load_kube_config(args.kubeconfig)
    metrics = Metrics()
    elector: LeaderElector | None = None
    if not args.dry_run:
        elector = elector_for(api_client, settings, identity, metrics.is_leader)
    controller = Controller(
        settings,
        PrometheusClient(settings.prometheus_url, settings.query_timeout_seconds),
        KubeNodeApi(api_client),
        KubeEventSink(api_client, identity),
        metrics,
        is_leader=elector.is_leader if elector else (lambda: True),
        dry_run=args.dry_run,
    )
    return controller, elector, metrics


def _run_once(controller: Controller, elector: LeaderElector | None) -> int:
    if elector is not None:
        elector.try_acquire_or_renew()
    try:
        result = controller.tick()
    finally:
        if elector is not None:
            elector.release()
    print(
        json.dumps(
            {
                "leader": result.leader,
                "headroom": result.headroom,
                "pending": result.pending,
                "headroomByType": result.headroom_by_type,
                "pendingByType": result.pending_by_type,
                "burst": result.burst,
                "taintPresent": result.taint_present,
                "action": result.decision.action.value,
                "reason": result.decision.reason,
                "detail": result.decision.detail,
                "gpuType": result.decision.gpu_type,
                "changed": result.changed,
            }
        )
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    started = start(build_parser(), argv, load=load_settings, build=_build, prog="gpucluster-taint-controller", log=log)
    if isinstance(started, int):
        return started
    args, settings, identity = started.args, started.settings, started.identity
    controller, elector, metrics = started.built
    if args.once:
        return _run_once(controller, elector)

    return serve_behind_lease(
        host=started.host,
        port=started.port,
        routes=http_app(metrics),
        loop=controller.run,
        elector=elector,
        retry_period_s=settings.retry_period_seconds,
        running=lambda listen: {
            "identity": identity,
            "node": settings.node_name,
            "taint_key": settings.taint_key,
            "lease": f"{settings.namespace}/{settings.lease_name}",
            "listen": listen,
            "dry_run": args.dry_run,
        },
        log=log,
        server_version="gpucluster-taint-controller",
    )


if __name__ == "__main__":
    sys.exit(main())
