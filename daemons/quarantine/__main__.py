"""``gpucluster-quarantine``: puts the NoExecute quarantine taint on a GPU node whose quarantine alerts fire.

Serves ``/metrics`` and ``/healthz``. Logs are JSON, one object per line, on stderr. SIGTERM and SIGINT stop it
gracefully: the loop ends, the Lease is released (a standby takes over at once) and the process exits 0. Bad
settings: one message naming every problem, exit status 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence

from components.quarantine_settings import LEDGER_NAME, QuarantineSettings, load_settings
from daemons.quarantine.controller import Controller, CycleResult
from daemons.quarantine.kube import KubeApi
from daemons.quarantine.metrics import Metrics
from daemons.taint_controller.prometheus import PrometheusClient
from daemons.toolkit.http import Routes
from daemons.toolkit.lease import LeaderElector, elector_for, load_kube_config
from daemons.toolkit.serve import EXIT_BAD_SETTINGS, controller_parser, serve_behind_lease, start

__all__ = ["EXIT_BAD_SETTINGS", "build_parser", "main", "summary"]

log = logging.getLogger("quarantine")

PROG = "gpucluster-quarantine"


def build_parser() -> argparse.ArgumentParser:
    return controller_parser(
        PROG,
        (
            "Quarantine GPU nodes whose quarantine alerts fire (signalQuery, by default the firing ALERTS labelled "
            "gpucluster_signal=gpu-quarantine): one patch adds the NoExecute taint gpucluster.io/quarantine=<reason>, "
            "the gpucluster.io/quarantined label and the reason and time annotations, so training leaves the node and "
            "inference stays. At most maxShare of a flavor's nodes (at least one) within breakerWindow; past it, a "
            f"Warning Event and the breaker_open metric, and nothing else. Every quarantined node is listed in the "
            f"ConfigMap {LEDGER_NAME}. Prometheus down: nothing changes. Only the holder of the Lease writes. Metrics "
            "are prefixed gpucluster_quarantine_."
        ),
        listen=":9108",
        once_help="run one cycle (taking the Lease if it is free, releasing it after), print the decisions, "
        "the breakers and what was written as JSON on stdout and exit; no HTTP server",
        dry_run_help="query, decide and log what would change, but write nothing: no node patch, no ledger, no "
        "Event, no Lease (the replica behaves as leader for its decisions); the settings' dryRun does the same",
        settings_help="settings file: JSON when it ends in .json, YAML otherwise (the QuarantineSettings model, "
        "camelCase keys; see the README)",
    )


def _build(
    args: argparse.Namespace, settings: QuarantineSettings, identity: str
) -> tuple[Controller, LeaderElector | None, Metrics]:
    api_client = load_kube_config(args.kubeconfig)
    metrics = Metrics()
    dry_run = bool(args.dry_run or settings.dry_run)
    elector: LeaderElector | None = None
    if not dry_run:
        elector = elector_for(api_client, settings, identity, metrics.is_leader)
    controller = Controller(
        settings,
        PrometheusClient(settings.prometheus_url, settings.request_timeout_seconds),
        KubeApi(api_client, settings.request_timeout_seconds),
        metrics,
        is_leader=elector.is_leader if elector else (lambda: True),
        identity=identity,
        dry_run=dry_run,
    )
    return controller, elector, metrics


def summary(result: CycleResult) -> dict[str, object]:
    plan = result.plan
    return {
        "leader": result.leader,
        "unknown": dict(result.unknown),
        "signals": None if result.signals is None else len(result.signals),
        "decisions": [
            {"node": d.node, "outcome": d.outcome.value, "flavor": d.flavor, "reason": d.reason, "detail": d.detail}
            for d in (plan.decisions if plan else ())
        ],
        "breakers": [
            {"flavor": b.flavor, "nodes": b.nodes, "limit": b.limit, "used": b.used, "open": b.open}
            for b in (plan.breakers if plan else ())
        ],
        "quarantined": list(result.quarantined),
        "ledgerWritten": result.ledger_written,
    }


def main(argv: Sequence[str] | None = None) -> int:
    started = start(build_parser(), argv, load=load_settings, build=_build, prog=PROG, log=log)
    if isinstance(started, int):
        return started
    args, settings, identity = started.args, started.settings, started.identity
    controller, elector, metrics = started.built
    if args.once:
        if elector is not None:
            elector.try_acquire_or_renew()
        try:
            result = controller.cycle()
        finally:
            if elector is not None:
                elector.release()
        print(json.dumps(summary(result)))
        return 0
    return serve_behind_lease(
        host=started.host,
        port=started.port,
        routes=Routes(metrics=metrics.render),
        loop=controller.run,
        elector=elector,
        retry_period_s=settings.retry_period_seconds,
        running=lambda listen: {
            "identity": identity,
            "flavors": [f.name for f in settings.flavors],
            "lease": f"{settings.namespace}/{settings.lease_name}",
            "ledger": f"{settings.namespace}/{LEDGER_NAME}",
            "listen": listen,
            "dry_run": controller.dry_run,
        },
        log=log,
        server_version=PROG,
    )


if __name__ == "__main__":
    sys.exit(main())
