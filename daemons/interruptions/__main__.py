"""``gpucluster-interruptions``: interruption accounting for training JobSets, and their restart bound.

The kit's command line (``daemons.toolkit.runner``: flags, settings, Lease, ``/metrics`` and ``/healthz``,
``--once``, graceful stop) on this controller's spec
(``contract/controllers/interruptions.py``); here, what is its own.
"""

from __future__ import annotations

import sys

from contract.controllers.interruptions import SPEC
from contract.interruptions_settings import InterruptionsSettings
from daemons.interruptions.client import KubeApi
from daemons.interruptions.controller import Controller, CycleResult
from daemons.interruptions.metrics import Metrics
from daemons.toolkit import runner

__all__ = ["main", "summary"]


def summary(result: CycleResult) -> dict[str, object]:
    f = result.figures
    return {
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


RUNTIME: runner.Runtime[InterruptionsSettings, Metrics, Controller] = runner.Runtime(
    metrics=Metrics, controller=runner.on_the_api(Controller, KubeApi), summary=summary
)
main = runner.main_for(SPEC, RUNTIME)


if __name__ == "__main__":
    sys.exit(main(None))
