"""``gpucluster-quarantine``: puts the NoExecute quarantine taint on a GPU node whose quarantine alerts fire.

The kit's command line (``daemons.toolkit.runner``: flags, settings, Lease, ``/metrics`` and ``/healthz``,
``--once``, graceful stop) on this controller's spec
(``contract/controllers/quarantine.py``); here, what is its own.
"""

from __future__ import annotations

import sys

from contract.controllers.quarantine import SPEC
from contract.quarantine_settings import LEDGER_NAME, QuarantineSettings
from daemons.quarantine.controller import Controller, CycleResult
from daemons.quarantine.kube import KubeApi
from daemons.quarantine.metrics import Metrics
from daemons.toolkit import runner

__all__ = ["main", "summary"]


def summary(result: CycleResult) -> dict[str, object]:
    plan = result.plan
    return {
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


RUNTIME: runner.Runtime[QuarantineSettings, Metrics, Controller] = runner.Runtime(
    metrics=Metrics,
    controller=runner.querying(Controller, KubeApi),
    summary=summary,
    running=lambda s: {"flavors": [f.name for f in s.flavors], "ledger": f"{s.namespace}/{LEDGER_NAME}"},
    dry_run=runner.flag_or_settings_dry_run,
)
main = runner.main_for(SPEC, RUNTIME)


if __name__ == "__main__":
    sys.exit(main(None))
