"""``gpucluster-checkpoint-verifier``: a checkpoint counts only once an independent check has read it.

The kit's command line (``daemons.toolkit.runner``: flags, settings, Lease, ``/metrics`` and ``/healthz``,
``--once``, graceful stop) on this controller's spec (``contract/controllers/checkpoint_verifier.py``); here, what
is its own.
"""

from __future__ import annotations

import sys

from contract.checkpoint_verifier_settings import CheckpointVerifierSettings
from contract.controllers.checkpoint_verifier import SPEC
from daemons.checkpoint_verifier.controller import Controller, summary
from daemons.checkpoint_verifier.kube import KubeApi
from daemons.checkpoint_verifier.metrics import Metrics
from daemons.toolkit import runner

__all__ = ["main"]


RUNTIME: runner.Runtime[CheckpointVerifierSettings, Metrics, Controller] = runner.Runtime(
    metrics=Metrics,
    controller=runner.on_the_api(Controller, KubeApi),
    summary=summary,
    running=lambda s: {"namespaces": s.workload_namespaces, "maxRunning": s.max_running},
    dry_run=runner.flag_or_settings_dry_run,
)
main = runner.main_for(SPEC, RUNTIME)


if __name__ == "__main__":
    sys.exit(main(None))
