"""What the daemon sees of one training job, as plain values: no I/O, no Kubernetes client types.

``translate.py`` builds these from API objects; ``ledger.py``, ``ettr.py`` and ``bound.py`` work on them only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from contract.constants import INTERRUPTIONS_LEDGER_ANNOTATION
from daemons.interruptions.classify import NodeState, PodFailure

JOBSET_API = "jobset.x-k8s.io/v1alpha2"
#: The daemon's own record on the JobSet (compact JSON, bounded; written by the leader only).
LEDGER_ANNOTATION = INTERRUPTIONS_LEDGER_ANNOTATION
#: JobSet's Event reasons for its two restart actions (pkg/constants of JobSet v0.11.1 and v0.12.0).
PROGRAM_RESTART_REASON = "RestartJobSetFailurePolicyAction"
NODE_RESTART_REASON = "RestartJobSetAndIgnoreMaxRestartsFailurePolicyAction"
#: Ours, on the JobSet, when the restart bound stops it.
BOUND_REASON = "RestartBoundReached"


@dataclass(frozen=True)
class WorkloadView:
    """The Kueue Workload a JobSet owns."""

    namespace: str
    name: str
    #: ``spec.active`` (absent means true).
    active: bool
    #: The QuotaReserved/Admitted condition is True now.
    admitted: bool
    #: When it was first admitted as far as the objects tell (the Admitted condition's transition time if it
    #: never left; else the Workload's creation).
    admitted_at: float | None
    #: ``status.schedulingStats.evictions``: count per reason (exact, Kueue's own counter).
    evictions: Mapping[str, int] = field(default_factory=dict)
    #: The Evicted condition's reason and transition time, when it is there.
    evicted_reason: str = ""
    evicted_at: float | None = None


@dataclass(frozen=True)
class JobView:
    namespace: str
    name: str
    uid: str
    team: str
    created_at: float
    #: ``status.restarts`` and ``status.restartsCountTowardsMax``.
    restarts: int
    restarts_towards_max: int
    #: The JobSet's annotations (``None`` when absent or not a number).
    max_restarts_per_hour: int | None
    checkpoint_interval_s: float | None
    nodes: int
    #: The ledger annotation as it is on the object (empty: none).
    record_text: str = ""
    #: Pods of the gang now: how many are Running, and since when the last of them has been (None: not all).
    pods_running: int = 0
    all_running_since: float | None = None
    #: Pods that failed, with their nodes, as seen now (a Recreate deletes them soon).
    failures: tuple[tuple[PodFailure, NodeState | None], ...] = ()
    workload: WorkloadView | None = None
    #: JobSet restart Events still kept by the API server: (reason, time), oldest first.
    restart_events: tuple[tuple[str, float], ...] = ()
    #: The time of the last complete checkpoint the job reported on its team's ``checkpoints`` claim.
    checkpoint_at: float | None = None
    #: The JobSet is suspended (queued or stopped).
    suspended: bool = False
    #: Seconds one checkpoint write stalls it (its annotation); None: the daemon's default.
    checkpoint_write_s: float | None = None
    #: The stall detector's last restart of the job: (the attempt it ended, when); None: never.
    stall_restart: tuple[int, float] | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"
