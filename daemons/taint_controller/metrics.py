"""The controller's Prometheus metrics, in a registry of their own (no process/platform collectors mixed in).

Every name starts with ``gpucluster_taint_controller_``. The whole cluster's values have no label; the values by
GPU type are metrics of their own (``*_by_type_*{gpu_type}``), so summing one metric never counts a GPU twice.
``flaps_total`` counts transitions that reverse the previous transition within ``flapWindow`` (an add less than
flapWindow after a remove, or the other way round): the symptom of marks or hold times set too tight.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence

from prometheus_client import Gauge

from contract.controllers.taint_controller import PREFIX
from daemons.taint_controller.decide import Action
from daemons.toolkit.metrics import ControllerMetrics
from daemons.toolkit.prometheus import REASONS

#: The Kubernetes API calls the controller makes.
KUBE_OPERATIONS = ("read-node", "patch-node")


class Metrics(ControllerMetrics):
    def __init__(self, wall_clock: Callable[[], float] = time.time) -> None:
        self._wall = wall_clock
        self._last_change: float | None = None
        super().__init__(PREFIX)
        # Every label value exists from the start, so rate() works before the first event.
        self.decisions = self.counter(
            "decisions",
            "Decisions taken, by action (only the leader's add/remove change the node)",
            ["action"],
            known=[action.value for action in Action],
        )
        self.headroom = self.gauge("headroom_gpus", "Free in-cluster GPUs from the headroom query (NaN when unknown)")
        self.pending = self.gauge("pending_inference_pods", "Unbound Pending inference pods (NaN when unknown)")
        self.headroom_by_type = self.gauge(
            "headroom_by_type_gpus",
            "Free in-cluster GPUs of each configured GPU type (NaN when unknown; the whole cluster is headroom_gpus)",
            ["gpu_type"],
        )
        self.pending_by_type = self.gauge(
            "pending_inference_by_type_pods",
            "Unbound Pending inference pods asking for each configured GPU type (NaN when unknown)",
            ["gpu_type"],
        )
        self.burst = self.gauge(
            "burst_inference_pods",
            "Inference pods on the virtual node: the replicas that come home once the taint is on (NaN when unknown)",
        )
        self.burst_by_type = self.gauge(
            "burst_inference_by_type_pods",
            "Inference pods on the virtual node asking for each configured GPU type (NaN when unknown)",
            ["gpu_type"],
        )
        self.taint_present = self.gauge("taint_present", "1 when the virtual node carries the burst taint")
        self.query_errors = self.counter(
            "query_errors", "Failed or unusable Prometheus queries, by reason", ["reason"], known=REASONS
        )
        self.kube_errors = self.kube_errors_counter(KUBE_OPERATIONS)
        self.last_transition = self.gauge(
            "last_transition_timestamp_seconds", "Unix time this replica last added or removed the taint (0: never)"
        )
        self.since_change = self.gauge(
            "seconds_since_last_change", "Seconds since this replica last added or removed the taint (NaN: never)"
        )
        self.since_change.set_function(self._seconds_since_change)
        self.flaps = self.counter("flaps", "Transitions that reversed the previous one within flapWindow")
        self.headroom.set(math.nan)
        self.pending.set(math.nan)
        self.burst.set(math.nan)

    @staticmethod
    def set_by_type(gauge: Gauge, rows: Mapping[str, float] | None, gpu_types: Sequence[str]) -> None:
        """One value per configured GPU type: its row, zero when the answer has none for it, NaN when unknown.
        The label values are the configured types, so no series is left behind when a type drops out."""
        for gpu_type in gpu_types:
            gauge.labels(gpu_type).set(math.nan if rows is None else rows.get(gpu_type, 0.0))

    def mark_transition(self, timestamp: float) -> None:
        """The taint was added or removed at ``timestamp`` (Unix seconds)."""
        self._last_change = timestamp
        self.last_transition.set(timestamp)

    def _seconds_since_change(self) -> float:
        last = self._last_change
        return math.nan if last is None else max(0.0, self._wall() - last)
