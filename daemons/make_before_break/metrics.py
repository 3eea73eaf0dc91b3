"""The controller's Prometheus metrics, in a registry of their own. Every name starts with
``gpucluster_make_before_break_``."""

from __future__ import annotations

import itertools

from contract.controllers.make_before_break import PREFIX
from daemons.make_before_break.actions import Fallback
from daemons.toolkit.metrics import ControllerMetrics

#: Action kinds, as label values.
KINDS = ("reserve-node", "release-node", "set-deletion-cost", "set-placement", "check-pending", "check-ready")
#: What happened to an action: written, conflict (retried next cycle), error, skipped (dry run, not leader).
RESULTS = ("applied", "conflict", "error", "skipped")
#: The lists an observation is built from.
LISTS = ("nodes", "pods", "deployments", "workloads", "resourceflavors")
#: Bucket bounds (seconds) of the decision and cycle durations: a few nodes decide in well under a millisecond,
#: hundreds of nodes in tens of milliseconds; a cycle adds the lists and the writes.
DECIDE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
CYCLE_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Metrics(ControllerMetrics):
    def __init__(self) -> None:
        super().__init__(PREFIX)
        self.decisions = self.counter("decisions", "Actions decided, by kind", ["kind"], known=KINDS)
        self.actions = self.counter(
            "actions",
            "Actions applied or not, by kind and result",
            ["kind", "result"],
            known=itertools.product(KINDS, RESULTS),
        )
        self.fallbacks = self.counter(
            "fallbacks",
            "Checks set Ready before the room was made, by reason",
            ["reason"],
            known=[reason.value for reason in Fallback],
        )
        self.hold_seconds = self.gauge(
            "hold_seconds", "Seconds since QuotaReserved of each workload with our check", ["workload"]
        )
        self.reserved_nodes = self.gauge("reserved_nodes", "Nodes carrying the reservation taint")
        self.left_behind = self.gauge(
            "left_behind",
            "What of make-before-break is on the cluster, by kind (nodes reserved, Deployments moved, pods marked); "
            "all 0 while draining: enabled false leaves nothing behind",
            ["kind"],
        )
        self.draining = self.gauge("draining", "1 while draining: no new room is made")
        self.observe_errors = self.counter(
            "observe_errors", "Lists that failed or held an unreadable object, by list", ["list"], known=LISTS
        )
        self.cycles = self.counter("cycles", "Cycles run (observe, decide, apply)")
        self.decide_seconds = self.histogram(
            "decide_seconds", "Seconds one decision took (the pure decide() call, no I/O)", DECIDE_BUCKETS
        )
        self.cycle_seconds = self.histogram(
            "cycle_seconds",
            "Seconds one cycle took: the lists, the decision and, on the leader, the writes",
            CYCLE_BUCKETS,
        )

    def set_holds(self, holds: dict[str, float]) -> None:
        """Replace the per-workload hold gauges (a workload that is gone loses its series)."""
        self.hold_seconds.clear()
        for ref, seconds in holds.items():
            self.hold_seconds.labels(ref).set(seconds)
