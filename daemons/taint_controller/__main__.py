"""``gpucluster-taint-controller``: puts the NoSchedule burst taint on the virtual node while in-cluster GPUs are free.

The kit's command line (``daemons.toolkit.runner``: flags, settings, Lease, ``/metrics`` and ``/healthz``,
``--once``, graceful stop) on this controller's spec
(``contract/controllers/taint_controller.py``); here, what is its own.
"""

from __future__ import annotations

import sys

from contract.controllers.taint_controller import SPEC
from contract.taint_controller_settings import TaintControllerSettings
from daemons.taint_controller.controller import Controller, TickResult
from daemons.taint_controller.kube import KubeEventSink, KubeNodeApi
from daemons.taint_controller.metrics import Metrics
from daemons.toolkit import runner
from daemons.toolkit.prometheus import PrometheusClient

__all__ = ["main", "summary"]


def _controller(w: runner.Wiring[TaintControllerSettings, Metrics]) -> Controller:
    querier = PrometheusClient(w.settings.prometheus_url, w.settings.query_timeout_seconds)
    return w.build(Controller, querier, KubeNodeApi(w.api_client), KubeEventSink(w.api_client, w.identity))


def summary(result: TickResult) -> dict[str, object]:
    return {
        "headroom": result.headroom,
        "pending": result.pending,
        "headroomByType": result.headroom_by_type,
        "pendingByType": result.pending_by_type,
        "burst": result.burst,
        "taintPresent": result.taint_present,
        "action": result.decision.action.value,
        "reason": result.decision.reason,
        "detail": result.decision.detail,
        "gpuType": result.decision.gpu_type,
        "changed": result.changed,
    }


RUNTIME: runner.Runtime[TaintControllerSettings, Metrics, Controller] = runner.Runtime(
    metrics=Metrics,
    controller=_controller,
    summary=summary,
    running=lambda s: {"node": s.node_name, "taint_key": s.taint_key},
)
main = runner.main_for(SPEC, RUNTIME)


if __name__ == "__main__":
    sys.exit(main(None))
