"""The controller's Prometheus metrics, in a registry of their own.

Most names start with ``gpucluster_quarantine_``; the per-node series an operator and the hardware provider read
are ``gpucluster_quarantine_node_info{node,flavor,reason}`` (1 per quarantined node) and
``gpucluster_quarantined_since_seconds{node}`` (the Unix time it was quarantined). Every replica exports what it
observed; only the leader's ``decisions_total`` counts writes.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import Gauge

from contract.controllers.quarantine import PREFIX
from daemons.quarantine.decide import Breaker, LedgerEntry, Outcome
from daemons.toolkit.metrics import ControllerMetrics
from daemons.toolkit.prometheus import REASONS

#: Why a sample of the signal query was not used.
SIGNAL_PROBLEMS = ("no-node", "no-alertname")
OPERATIONS = ("list-nodes", "patch-node", "read-ledger", "apply-ledger")


class Metrics(ControllerMetrics):
    def __init__(self) -> None:
        super().__init__(PREFIX)
        self.decisions = self.counter(
            "decisions",
            "Per-node decisions of the signals that fire, by outcome",
            ["outcome"],
            known=[outcome.value for outcome in Outcome],
        )
        self.quarantines = self.counter(
            "quarantines", "Nodes this replica quarantined, by flavor and reason", ["flavor", "reason"]
        )
        self.breaker_open = self.gauge(
            "breaker_open",
            "1 while the flavor's circuit breaker refuses a quarantine (maxShare within breakerWindow reached)",
            ["flavor"],
        )
        self.breaker_used = self.gauge(
            "breaker_used_nodes", "Nodes of the flavor quarantined within breakerWindow", ["flavor"]
        )
        self.breaker_limit = self.gauge(
            "breaker_limit_nodes", "Most nodes of the flavor quarantined within breakerWindow", ["flavor"]
        )
        self.quarantined = self.gauge("quarantined_nodes", "Quarantined nodes, by flavor", ["flavor"])
        self.node_info = self.gauge(
            "node_info", "1 for each quarantined node, with its flavor and reason", ["node", "flavor", "reason"]
        )
        # Outside the prefix: the name the operator and the hardware provider read.
        self.since = Gauge(
            "gpucluster_quarantined_since_seconds",
            "Unix time each quarantined node was quarantined",
            ["node"],
            registry=self.registry,
        )
        self.signals = self.gauge("signals_firing", "Samples of the signal query in the last answer")
        self.signal_problems = self.counter(
            "signal_problems", "Signal samples left unused, by why", ["problem"], known=SIGNAL_PROBLEMS
        )
        self.query_errors = self.counter(
            "query_errors", "Failed or unusable signal queries, by reason", ["reason"], known=REASONS
        )
        self.kube_errors = self.kube_errors_counter(OPERATIONS)
        self.ledger_problems = self.counter("ledger_problems", "Ledger entries that could not be read (left out)")
        self.cycles = self.counter("cycles", "Cycles run")

    def set_breakers(self, breakers: Iterable[Breaker]) -> None:
        for b in breakers:
            self.breaker_open.labels(b.flavor).set(1 if b.open else 0)
            self.breaker_used.labels(b.flavor).set(b.used + b.quarantining)
            self.breaker_limit.labels(b.flavor).set(b.limit)

    def set_ledger(self, entries: Iterable[LedgerEntry], flavors: Iterable[str]) -> None:
        """Replace the per-node series with the quarantined nodes of the ledger (a released node loses its own)."""
        self.node_info.clear()
        self.since.clear()
        counts = dict.fromkeys(flavors, 0)
        for e in entries:
            if not e.active:
                continue
            self.node_info.labels(e.node, e.flavor, e.reason).set(1)
            self.since.labels(e.node).set(e.since)
            counts[e.flavor] = counts.get(e.flavor, 0) + 1
        for flavor, count in counts.items():
            self.quarantined.labels(flavor).set(count)
