"""``gpucluster-quota-controller``: every ClusterQueue's quota follows the GPUs that are really there.

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

from components.quota_controller_settings import QuotaControllerSettings, load_settings
from daemons.quota_controller.client import KubeApi
from daemons.quota_controller.controller import Controller, CycleResult
from daemons.quota_controller.metrics import PREFIX, Metrics
from daemons.toolkit.http import Routes
from daemons.toolkit.lease import LeaderElector, elector_for, load_kube_config
from daemons.toolkit.serve import EXIT_BAD_SETTINGS, controller_parser, serve_behind_lease, start

__all__ = ["EXIT_BAD_SETTINGS", "build_parser", "main", "summary"]

log = logging.getLogger("quota_controller")

PROG = "gpucluster-quota-controller"


def build_parser() -> argparse.ArgumentParser:
    return controller_parser(
        PROG,
        (
            "Keep every ClusterQueue's nominalQuota and borrowingLimit in step with the GPUs that are really there: "
            "per flavor, the GPUs of nodes that are Ready, schedulable, accepted and not quarantined, shared among "
            "the queues in the stack's proportions. It owns each queue's spec.resourceGroups (server-side apply). "
            f"Only the holder of the Lease writes. Metrics are prefixed {PREFIX}_."
        ),
        listen=":9106",
        once_help="run one cycle (taking the Lease if it is free, releasing it after), print the capacity, the quotas "
        "and what was written as JSON on stdout and exit; no HTTP server",
        dry_run_help="read, decide and log what would change, but write nothing: no apply, no Event, no Lease",
    )


def _build(
    args: argparse.Namespace, settings: QuotaControllerSettings, identity: str
) -> tuple[Controller, LeaderElector | None, Metrics]:
    api_client = load_kube_config(args.kubeconfig)
    metrics = Metrics()
    elector: LeaderElector | None = None
    if not args.dry_run:
        elector = elector_for(api_client, settings, identity, metrics.is_leader)
    controller = Controller(
        settings,
        KubeApi(api_client, settings.request_timeout_seconds),
        metrics,
        is_leader=elector.is_leader if elector else (lambda: True),
        identity=identity,
        dry_run=args.dry_run,
    )
    return controller, elector, metrics


def summary(result: CycleResult) -> dict[str, object]:
    d = result.decision
    return {
        "leader": result.leader,
        "unknown": dict(result.observed.problems),
        "reason": d.reason,
        "capacity": {
            f: {
                "declared": c.declared,
                "healthy": c.healthy,
                "nodes": c.nodes,
                "out": {n: w.value for n, w in c.out.items()},
            }
            for f, c in d.counts.items()
        },
        "quotas": {
            q: {f: {"nominalQuota": v.nominal, "borrowingLimit": v.borrowing_limit} for f, v in quotas.items()}
            for q, quotas in d.wanted.items()
        },
        "updates": [{"queue": o.queue, "result": o.result, "detail": o.detail} for o in result.outcomes],
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
            "queues": [q.name for q in settings.cluster_queues],
            "lease": f"{settings.namespace}/{settings.lease_name}",
            "listen": listen,
            "dry_run": args.dry_run,
        },
        log=log,
        server_version=PROG,
    )


if __name__ == "__main__":
    sys.exit(main())
