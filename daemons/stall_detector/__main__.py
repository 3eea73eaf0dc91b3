"""``gpucluster-stall-detector``: restarts a hung training gang in place and names the node to blame.

The kit's command line (``daemons.toolkit.runner``: flags, settings, Lease, ``/metrics`` and ``/healthz``,
``--once``, graceful stop) on this controller's spec
(``contract/controllers/stall_detector.py``); here, what is its own.
"""

from __future__ import annotations

import sys

from contract.controllers.stall_detector import SPEC
from contract.stall_detector_settings import StallDetectorSettings
from daemons.stall_detector.controller import Controller, summary
from daemons.stall_detector.kube import KubeApi
from daemons.stall_detector.metrics import Metrics
from daemons.toolkit import runner

__all__ = ["main"]


RUNTIME: runner.Runtime[StallDetectorSettings, Metrics, Controller] = runner.Runtime(
    metrics=Metrics,
    controller=runner.querying(Controller, KubeApi),
    summary=summary,
    running=lambda s: {"namespaces": list(s.workload_namespaces), "stallAfter": s.stall_after},
    dry_run=runner.flag_or_settings_dry_run,
)
main = runner.main_for(SPEC, RUNTIME)


if __name__ == "__main__":
    sys.exit(main(None))
