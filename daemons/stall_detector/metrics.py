"""The stall detector's Prometheus metrics, in a registry of their own (prefix ``gpucluster_stall_detector_``).

Per gang (``namespace``, ``job``): ``verdict`` (1 for the gang's current verdict); per node: ``suspect`` (1 while
a running gang names it, with its reasons) and ``repeat_offender`` (1 for a node named ``repeatCount`` times within
``repeatWindow``: the quarantine alert reads it). Every replica judges and exports; only the leader's
``restarts_total`` counts restarts it made.
"""

from __future__ import annotations

import itertools

from contract.controllers.stall_detector import PREFIX
from daemons.stall_detector.decide import Verdict
from daemons.toolkit.metrics import ControllerMetrics
from daemons.toolkit.prometheus import REASONS

QUERIES = ("tensor-max", "tensor-mean", "fabric", "transport-errors", "link-errors")
CYCLE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
OPERATIONS = ("list-jobsets", "list-pods", "read-claim", "write-record", "evict", "read-suspects", "write-suspects")


class Metrics(ControllerMetrics):
    def __init__(self) -> None:
        super().__init__(PREFIX)
        self.verdict = self.gauge(
            "verdict", "1 for each running gang's current verdict", ["namespace", "job", "verdict"]
        )
        self.gangs = self.gauge(
            "gangs",
            "Running gangs judged in the last cycle, by verdict",
            ["verdict"],
            known=[verdict.value for verdict in Verdict],
        )
        self.restarts = self.counter(
            "restarts", "Stalled gangs restarted in place by this replica", ["namespace", "job"]
        )
        self.held = self.counter("restarts_held", "Stalled gangs left alone because maxRestartsPerCycle was reached")
        self.suspect = self.gauge(
            "suspect", "1 while a judged gang names the node, with its reasons", ["node", "reasons"]
        )
        self.repeat_offender = self.gauge(
            "repeat_offender",
            "1 for a node named repeatCount times within repeatWindow (quarantine reads it)",
            ["node", "reasons"],
        )
        self.query_errors = self.counter(
            "query_errors",
            "Failed Prometheus queries, by query and reason",
            ["query", "reason"],
            known=itertools.product(QUERIES, REASONS),
        )
        self.kube_errors = self.kube_errors_counter(OPERATIONS)
        self.report_problems = self.counter(
            "report_problems", "Progress reports or restart records that could not be read"
        )
        self.cycles = self.counter("cycles", "Cycles run")
        self.cycle_seconds = self.histogram(
            "cycle_seconds", "How long one cycle took (reads, queries, decisions, writes)", CYCLE_BUCKETS
        )
