"""The checkpoint verifier's Prometheus metrics, in a registry of their own (prefix
``gpucluster_checkpoint_verifier_``).

Per job (``namespace``, ``job``): ``verified_step`` and ``verified_report_timestamp_seconds`` (the newest verified
checkpoint: what ``TrainingCheckpointStale`` reads), ``last_check_ok`` (1 or 0; the ``CheckpointVerificationFailed``
alert fires on 0) with ``last_check_step``, ``state`` (1 for the job's current state). Restore drills, per job still
checkpointing: ``restore_drill_last_good_timestamp_seconds`` (``CheckpointRestoreDrillStale`` ages it),
``restore_drill_last_ok`` (``CheckpointRestoreDrillFailed`` fires on 0), the last drill's ``_seconds``, ``_bytes``
and ``_step``, and ``drill_state``. Every replica reads the records and exports them; only the leader's counters
count checks and drills it started and verdicts it recorded.
"""

from __future__ import annotations

from contract.controllers.checkpoint_verifier import PREFIX
from daemons.toolkit.metrics import ControllerMetrics

CYCLE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
OPERATIONS = (
    "read-claim",
    "list-checks",
    "list-pods",
    "read-resume",
    "create-check",
    "create-drill",
    "delete-job",
    "write-record",
    "write-resume",
)
OUTCOMES = ("verified", "rejected")
DRILL_OUTCOMES = ("restored", "failed")


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
        self.drill_last_good = self.gauge(
            "restore_drill_last_good_timestamp_seconds",
            "When the job's last restore drill that read its checkpoint whole was recorded (Unix seconds); until one "
            "has, when its verified checkpoint was checked",
            job,
        )
        self.drill_last_ok = self.gauge(
            "restore_drill_last_ok", "1 when the job's last restore drill read its checkpoint whole, 0 when not", job
        )
        self.drill_seconds = self.gauge("restore_drill_seconds", "How long the job's last restore drill took", job)
        self.drill_bytes = self.gauge("restore_drill_bytes", "Bytes the job's last restore drill read", job)
        self.drill_step = self.gauge(
            "restore_drill_step", "The step of the checkpoint the job's last restore drill read (-1: none named)", job
        )
        self.drill_state = self.gauge("drill_state", "1 for each verified job's current drill state", [*job, "state"])
        self.drills_started = self.counter("drills_started", "Restore drill Jobs this replica created")
        self.drills_recorded = self.counter(
            "drills_recorded", "Restore drills this replica recorded, by outcome", ["outcome"], known=DRILL_OUTCOMES
        )
        self.given_up = self.counter(
            "jobs_given_up",
            "Check or drill Jobs this replica deleted because Kueue did not admit them within their deadline",
            ["kind"],
            known=("check", "drill"),
        )
        self.resume_writes = self.counter(
            "resume_writes", "Writes of the jobs' entries in a team's checkpoint-resume ConfigMap by this replica"
        )
        self.kube_errors = self.kube_errors_counter(OPERATIONS)
        self.cycles = self.counter("cycles", "Cycles run")
        self.cycle_seconds = self.histogram(
            "cycle_seconds", "How long one cycle took (reads, decisions, writes)", CYCLE_BUCKETS
        )
