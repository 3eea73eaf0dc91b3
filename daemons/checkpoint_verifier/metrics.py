"""The checkpoint verifier's Prometheus metrics, in a registry of their own (prefix
``gpucluster_checkpoint_verifier_``).

Per job (``namespace``, ``job``): ``verified_step`` and ``verified_report_timestamp_seconds`` (the newest verified
checkpoint: what ``TrainingCheckpointStale`` reads), ``last_check_ok`` (1 or 0; the ``CheckpointVerificationFailed``
alert fires on 0) with ``last_check_step``, ``state`` (1 for the job's current state). Every replica reads the
records and exports them; only the leader's counters count checks it started and verdicts it recorded.
"""

from __future__ import annotations

from contract.controllers.checkpoint_verifier import PREFIX
from daemons.toolkit.metrics import ControllerMetrics

CYCLE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
OPERATIONS = ("read-claim", "list-checks", "list-pods", "create-check", "write-record")
OUTCOMES = ("verified", "rejected")


class Metrics(ControllerMetrics):
    def __init__(self) -> None:
        super().__init__(PREFIX)
        job = ["namespace", "job"]
        self.verified_step = self.gauge("verified_step", "The step of the job's newest verified checkpoint", job)
        self.verified_report = self.gauge(
            "verified_report_timestamp_seconds",
            "When the job reported its newest verified checkpoint complete (Unix seconds): what counts for lost work",
            job,
        )
        self.last_ok = self.gauge(
            "last_check_ok", "1 when the job's last checked checkpoint passed, 0 when it was refused", job
        )
        self.last_step = self.gauge(
            "last_check_step", "The step of the job's last checked checkpoint (-1: none could be named)", job
        )
        self.state = self.gauge("state", "1 for each reported job's current state", [*job, "state"])
        self.started = self.counter("checks_started", "Check Jobs this replica created")
        self.recorded = self.counter(
            "checks_recorded", "Verdicts this replica recorded, by outcome", ["outcome"], known=OUTCOMES
        )
        self.incomplete = self.counter(
            "checks_incomplete", "Check Jobs that ended with no verdict (deadline, eviction, a lost node)"
        )
        self.record_problems = self.counter(
            "record_problems", "Reports, records or verdicts that could not be read (each is left alone)"
        )
        self.kube_errors = self.kube_errors_counter(OPERATIONS)
        self.cycles = self.counter("cycles", "Cycles run")
        self.cycle_seconds = self.histogram(
            "cycle_seconds", "How long one cycle took (reads, decisions, writes)", CYCLE_BUCKETS
        )
