"""``gpucluster-make-before-break``: the Kueue AdmissionCheck controller that makes room before a training gang.

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

from components.make_before_break_settings import CONTROLLER_NAME, MakeBeforeBreakSettings, load_settings
from daemons.make_before_break.client import KubeApi
from daemons.make_before_break.controller import Controller, CycleResult
from daemons.make_before_break.metrics import Metrics
from daemons.toolkit.http import Routes
from daemons.toolkit.lease import LeaderElector, elector_for, load_kube_config
from daemons.toolkit.serve import EXIT_BAD_SETTINGS, controller_parser, serve_behind_lease, start

__all__ = ["EXIT_BAD_SETTINGS", "build_parser", "main", "summary"]

log = logging.getLogger("make_before_break")

PROG = "gpucluster-make-before-break"


def build_parser() -> argparse.ArgumentParser:
    return controller_parser(
        PROG,
        (
            f"The Kueue AdmissionCheck controller for controllerName {CONTROLLER_NAME}: before a training gang is "
            "admitted, reserve the nodes it needs, roll the inference Deployments in the way off them "
            "make-before-break, and set the check Ready (with podSetUpdates for the reservation) once the GPUs are "
            "free; after maxHold, Ready anyway. Only the holder of the Lease writes. Metrics are prefixed "
            "gpucluster_make_before_break_."
        ),
        listen=":9103",
        once_help="run one cycle (taking the Lease if it is free, releasing it after), print the "
        "observation's problems, the decided actions and what was written as JSON on stdout and exit; no HTTP server",
        dry_run_help="observe, decide and log what would change, but write nothing: no patch, no apply, no "
        "Event, no Lease (the replica behaves as leader for its decisions)",
    )


def _build(
    args: argparse.Namespace, settings: MakeBeforeBreakSettings, identity: str
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
    return {
        "leader": result.leader,
        "unknown": dict(result.observed.problems),
        "active": result.active,
        "actions": [{"kind": type(a).__name__, "reason": a.reason} for a in result.decision.actions],
        "outcomes": [{"kind": o.kind, "target": o.target, "result": o.result} for o in result.outcomes],
        "workloads": [
            {"workload": r.ref, "phase": r.phase, "heldSeconds": round(r.held_s, 1), "detail": r.detail}
            for r in result.decision.workloads
        ],
        "notes": list(result.notes),
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
            "check": settings.admission_check_name,
            "lease": f"{settings.namespace}/{settings.lease_name}",
            "listen": listen,
            "dry_run": args.dry_run,
        },
        log=log,
        server_version=PROG,
    )


if __name__ == "__main__":
    sys.exit(main())
