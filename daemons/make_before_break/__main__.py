"""``gpucluster-make-before-break``: the Kueue AdmissionCheck controller that makes room before a training gang.

The kit's command line (``daemons.toolkit.runner``: flags, settings, Lease, ``/metrics`` and ``/healthz``,
``--once``, graceful stop) on this controller's spec
(``contract/controllers/make_before_break.py``); here, what is its own.
"""

from __future__ import annotations

import sys

from contract.controllers.make_before_break import SPEC
from contract.make_before_break_settings import MakeBeforeBreakSettings
from daemons.make_before_break.client import KubeApi
from daemons.make_before_break.controller import Controller, CycleResult
from daemons.make_before_break.metrics import Metrics
from daemons.toolkit import runner

__all__ = ["main", "summary"]


def summary(result: CycleResult) -> dict[str, object]:
    return {
        "unknown": dict(result.observed.problems),
        "active": result.active,
        "actions": [{"kind": type(a).__name__, "reason": a.reason} for a in result.decision.actions],
        "outcomes": [{"kind": o.kind, "target": o.target, "result": o.result} for o in result.outcomes],
        "workloads": [
            {"workload": r.ref, "phase": r.phase, "heldSeconds": round(r.held_s, 1), "detail": r.detail}
            for r in result.decision.workloads
        ],
        "notes": list(result.notes),
        "leftBehind": None if result.left is None else result.left.as_dict(),
    }


RUNTIME: runner.Runtime[MakeBeforeBreakSettings, Metrics, Controller] = runner.Runtime(
    metrics=Metrics,
    controller=runner.on_the_api(Controller, KubeApi),
    summary=summary,
    running=lambda s: {"check": s.admission_check_name, "draining": s.draining},
)
main = runner.main_for(SPEC, RUNTIME)


if __name__ == "__main__":
    sys.exit(main(None))
