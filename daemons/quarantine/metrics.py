"""The controller's Prometheus metrics, in a registry of their own.

Most names start with ``gpucluster_quarantine_``; the per-node series an operator and the hardware provider read
are ``gpucluster_quarantine_node_info{node,flavor,reason}`` (1 per quarantined node) and
``gpucluster_quarantined_since_seconds{node}`` (the Unix time it was quarantined). Every replica exports what it
observed; only the leader's ``decisions_total`` counts writes.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import Counter, Gauge

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
        r = self.registry
        self.decisions = Counter(
            f"{PREFIX}_decisions", "Per-node decisions of the signals that fire, by outcome", ["outcome"], registry=r
        )
        self.quarantines = Counter(
            f"{PREFIX}_quarantines",
            "Nodes this replica quarantined, by flavor and reason",
            ["flavor", "reason"],
            registry=r,
        )
        self.breaker_open = Gauge(
            f"{PREFIX}_breaker_open",
            "1 while the flavor's circuit breaker refuses a quarantine (maxShare within breakerWindow reached)",
            ["flavor"],
            registry=r,
        )
        self.breaker_used = Gauge(
            f"{PREFIX}_breaker_used_nodes",
            "Nodes of the flavor quarantined within breakerWindow",
            ["flavor"],
            registry=r,
        )
        self.breaker_limit = Gauge(
            f"{PREFIX}_breaker_limit_nodes",
            "Most nodes of the flavor quarantined within breakerWindow",
            ["flavor"],
            registry=r,
        )
        self.quarantined = Gauge(f"{PREFIX}_quarantined_nodes", "Quarantined nodes, by flavor", ["flavor"], registry=r)
        self.node_info = Gauge(
            f"{PREFIX}_node_info",
            "1 for each quarantined node, with its flavor and reason",
            ["node", "flavor", "reason"],
            registry=r,
        )
        self.since = Gauge(
            "gpucluster_quarantined_since_seconds",
            "Unix time each quarantined node was quarantined",
            ["node"],
            registry=r,
        )
        self.signals = Gauge(f"{PREFIX}_signals_firing", "Samples of the signal query in the last answer", registry=r)
        self.signal_problems = Counter(
            f"{PREFIX}_signal_problems", "Signal samples left unused, by why", ["problem"], registry=r
        )
        self.query_errors = Counter(
            f"{PREFIX}_query_errors", "Failed or unusable signal queries, by reason", ["reason"], registry=r
        )
        self.kube_errors = Counter(
            f"{PREFIX}_kube_errors", "Failed Kubernetes API calls, by operation", ["operation"], registry=r
        )
        self.ledger_problems = Counter(
            f"{PREFIX}_ledger_problems", "Ledger entries that could not be read (left out)", registry=r
        )
        self.cycles = Counter(f"{PREFIX}_cycles", "Cycles run", registry=r)
        for outcome in Outcome:
            self.decisions.labels(outcome.value)
        for reason in REASONS:
            self.query_errors.labels(reason)
        for problem in SIGNAL_PROBLEMS:
            self.signal_problems.labels(problem)
        for op in OPERATIONS:
            self.kube_errors.labels(op)

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
