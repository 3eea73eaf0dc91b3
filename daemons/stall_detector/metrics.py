"""The stall detector's Prometheus metrics, in a registry of their own (prefix ``gpucluster_stall_detector_``).

Per gang (``namespace``, ``job``): ``verdict`` (1 for the gang's current verdict); per node: ``suspect`` (1 while
a running gang names it, with its reasons) and ``repeat_offender`` (1 for a node named ``repeatCount`` times within
``repeatWindow``: the quarantine alert reads it). Every replica judges and exports; only the leader's
``restarts_total`` counts restarts it made.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from contract.controllers.stall_detector import PREFIX
from daemons.stall_detector.decide import Verdict
from daemons.toolkit.metrics import ControllerMetrics
from daemons.toolkit.prometheus import REASONS

QUERIES = ("tensor-max", "tensor-mean", "fabric", "transport-errors", "link-errors")
OPERATIONS = ("list-jobsets", "list-pods", "read-claim", "write-record", "evict", "read-suspects", "write-suspects")


class Metrics(ControllerMetrics):
    def __init__(self) -> None:
        super().__init__(PREFIX)
        r = self.registry
        self.verdict = Gauge(
            f"{PREFIX}_verdict",
            "1 for each running gang's current verdict",
            ["namespace", "job", "verdict"],
            registry=r,
        )
        self.gangs = Gauge(
            f"{PREFIX}_gangs", "Running gangs judged in the last cycle, by verdict", ["verdict"], registry=r
        )
        self.restarts = Counter(
            f"{PREFIX}_restarts", "Stalled gangs restarted in place by this replica", ["namespace", "job"], registry=r
        )
        self.held = Counter(
            f"{PREFIX}_restarts_held",
            "Stalled gangs left alone because maxRestartsPerCycle was reached",
            registry=r,
        )
        self.suspect = Gauge(
            f"{PREFIX}_suspect",
            "1 while a judged gang names the node, with its reasons",
            ["node", "reasons"],
            registry=r,
        )
        self.repeat_offender = Gauge(
            f"{PREFIX}_repeat_offender",
            "1 for a node named repeatCount times within repeatWindow (quarantine reads it)",
            ["node", "reasons"],
            registry=r,
        )
        self.query_errors = Counter(
            f"{PREFIX}_query_errors", "Failed Prometheus queries, by query and reason", ["query", "reason"], registry=r
        )
        self.kube_errors = Counter(
            f"{PREFIX}_kube_errors", "Failed Kubernetes API calls, by operation", ["operation"], registry=r
        )
        self.report_problems = Counter(
            f"{PREFIX}_report_problems", "Progress reports or restart records that could not be read", registry=r
        )
        self.cycles = Counter(f"{PREFIX}_cycles", "Cycles run", registry=r)
        self.cycle_seconds = Histogram(
            f"{PREFIX}_cycle_seconds",
            "How long one cycle took (reads, queries, decisions, writes)",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
        for query in QUERIES:
            for reason in REASONS:
                self.query_errors.labels(query, reason)
        for op in OPERATIONS:
            self.kube_errors.labels(op)
        for verdict in Verdict:
            self.gangs.labels(verdict.value)
