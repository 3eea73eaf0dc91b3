"""``gpucluster-interruptions``: interruption accounting for training JobSets, and their restart bound.

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

from components.interruptions_settings import InterruptionsSettings, load_settings
from daemons.interruptions.client import KubeApi
from daemons.interruptions.controller import Controller, CycleResult
from daemons.interruptions.metrics import PREFIX, TRAINING, Metrics
from daemons.toolkit.http import Routes
from daemons.toolkit.lease import LeaderElector, elector_for, load_kube_config
from daemons.toolkit.serve import EXIT_BAD_SETTINGS, controller_parser, serve_behind_lease, start

__all__ = ["EXIT_BAD_SETTINGS", "build_parser", "main", "summary"]

log = logging.getLogger("interruptions")

PROG = "gpucluster-interruptions"


def build_parser() -> argparse.ArgumentParser:
    return controller_parser(
        PROG,
        (
            "Account for every interruption of the training JobSets (label gpucluster.io/training-job): its cause "
            "(node, program, preemption, requeue, unknown), the time to running again and the work lost since the "
            "last checkpoint, rebuilt from the API server's objects and kept in the annotation "
            "gpucluster.io/interruptions; export per-job and cluster ETTR; stop a job restarting more often than "
            "gpucluster.io/max-restarts-per-hour (its Kueue Workload deactivated, a RestartBoundReached Event on the "
            "JobSet); write the measured reliability ConfigMap. Only the holder of the Lease writes. Metrics are "
            f"prefixed {TRAINING}_ and {PREFIX}_."
        ),
        listen=":9112",
        once_help="run one cycle (taking the Lease if it is free, releasing it after), print each job's counts, "
        "ETTR and what was written as JSON on stdout and exit; no HTTP server",
        dry_run_help="read, account and log, but write nothing: no annotation, no Workload change, no Event, no "
        "ConfigMap, no Lease",
    )


def _build(
    args: argparse.Namespace, settings: InterruptionsSettings, identity: str
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
    f = result.figures
    return {
        "leader": result.leader,
        "failStatic": result.fail_static,
        "problems": dict(result.problems),
        "jobs": [
            {
                "job": f"{j.namespace}/{j.job}",
                "team": j.team,
                "interruptions": {c.value: n for c, n in j.counts.items()},
                "restartsLastHour": j.restarts_last_hour,
                "workLostSeconds": round(j.work_lost_s, 1),
                "ettr": None if j.ettr is None else round(j.ettr, 4),
            }
            for j in (f.jobs if f else [])
        ],
        "clusterEttr": None if f is None or f.cluster_ettr is None else round(f.cluster_ettr, 4),
        "nodeMtbiSeconds": None if f is None or f.node_mtbi_s is None else round(f.node_mtbi_s, 1),
        "stopped": list(result.stopped),
        "written": list(result.written),
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
            "lease": f"{settings.namespace}/{settings.lease_name}",
            "listen": listen,
            "dry_run": args.dry_run,
        },
        log=log,
        server_version=PROG,
    )


if __name__ == "__main__":
    sys.exit(main())
