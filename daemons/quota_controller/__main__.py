"""``gpucluster-quota-controller``: every ClusterQueue's quota follows the GPUs that are really there.

The kit's command line (``daemons.toolkit.runner``: flags, settings, Lease, ``/metrics`` and ``/healthz``,
``--once``, graceful stop) on this controller's spec
(``contract/controllers/quota_controller.py``); here, what is its own.
"""

from __future__ import annotations

import sys

from contract.controllers.quota_controller import SPEC
from contract.quota_controller_settings import QuotaControllerSettings
from daemons.quota_controller.client import KubeApi
from daemons.quota_controller.controller import Controller, CycleResult
from daemons.quota_controller.metrics import Metrics
from daemons.toolkit import runner

__all__ = ["main", "summary"]


def summary(result: CycleResult) -> dict[str, object]:
    d = result.decision
    return {
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


RUNTIME: runner.Runtime[QuotaControllerSettings, Metrics, Controller] = runner.Runtime(
    metrics=Metrics,
    controller=runner.on_the_api(Controller, KubeApi),
    summary=summary,
    running=lambda s: {"queues": [q.name for q in s.cluster_queues]},
)
main = runner.main_for(SPEC, RUNTIME)


if __name__ == "__main__":
    sys.exit(main(None))
