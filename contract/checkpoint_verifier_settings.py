"""Settings of the checkpoint verifier: one pydantic model for the stack section ``gpucluster:checkpointVerifier``
and the daemon's settings file.

The verifier (``gpucluster-checkpoint-verifier``, daemons/checkpoint_verifier/) reads each team's ``checkpoints``
claim; for a checkpoint report (``checkpoint.gpucluster.io/<job>``) newer than what it last checked for that job, it
runs a short CPU-only Job in the team's namespace (the team's LocalQueue, its lowest research priority) that mounts
the claim read-only and checks the job's newest ``step-<N>`` directory
(``python -m daemons.checkpoint_verifier.check``); it reads the verdict from the pod's termination message and
records it beside the report (``verified.checkpoint.gpucluster.io/<job>``), in an Event and in its metrics. Pure
pydantic (no Pulumi): the daemon imports it.

Example (camelCase, as in the stack YAML)::

    enabled: true
    interval: 30s         # read the claims and the check Jobs this often
    checkDeadline: 30m    # a check that runs longer is stopped (activeDeadlineSeconds) and run again
    retryAfter: 5m        # a check that ended with no verdict is run again after this
    maxRunning: 4         # checks running at once, cluster-wide
    workers: 4            # files hashed at once by one check
    checkCpu: "4"         # its CPU request and limit
    checkMemory: 512Mi
    checkNodeSelector: {}  # where the check pods run (CPU nodes)
    checkTolerations: []
    restoreDrill:         # a drill restores each job's verified checkpoint whole, on a schedule
      enabled: true
      every: 24h          # per job: the claim annotation restore-drill.checkpoint.gpucluster.io/<job>: 6h
      staleAfter: 48h     # CheckpointRestoreDrillStale fires when a job's last good drill is older
      deadline: 2h        # a drill that runs longer is stopped and run again after retryAfter
      maxRunning: 1       # drills running at once, cluster-wide (each reads a whole checkpoint)
      maxReadMBps: 500    # a drill reads no faster than this on average (null: as fast as it can)
      cpu: "1"
      memory: 256Mi
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, ClassVar

from pydantic import AfterValidator, Field

from contract.constants import TRAINING_NAMESPACE
from contract.images_settings import DEFAULT_DAEMONS_IMAGE
from contract.issues import SettingsError
from contract.model import (
    ByteQuantity,
    ConfigModel,
    ControllerReplicas,
    ControllerSettings,
    DnsLabel,
    DnsSubdomain,
    Image,
    PollInterval,
    PositiveDuration,
    Problem,
    Quantity,
    Seconds,
    Toleration,
    check_labels,
    each_once,
)

#: Its section of the stack (``gpucluster:checkpointVerifier``), and its spec's ``stack_key``.
STACK_KEY = "checkpointVerifier"
FIELD_MANAGER = "gpucluster-checkpoint-verifier"

#: The fields the stack fills (camelCase key: where from); a stack section that sets one is refused.
FILLED = {
    "teams": "gpucluster:teams (each team's namespace and LocalQueue) and gpucluster:priorities (its lowest research "
    "priority)",
}

_SHORTER = {
    "requestTimeout": ("interval", "a cycle would outlast the next one"),
    "interval": ("checkDeadline", "a check could end before the verifier ever looked at it"),
}


class TeamQueue(ConfigModel):
    """Where a team's check Jobs queue: its namespace, the LocalQueue of CPU-only work there (``kueue.cpuQueue``)
    and the research priority they name (the lowest the team may name: a check never goes before the team's other
    CPU-only work)."""

    namespace: DnsLabel
    local_queue: DnsLabel
    priority: DnsSubdomain


_DRILL_SHORTER = {
    "every": ("staleAfter", "the stale-drill alert would fire between two drills on schedule"),
    "deadline": ("every", "a drill could still run when the next is due"),
}


class RestoreDrillSettings(ConfigModel):
    """Restore drills: on a schedule, a CPU-only Job of the verifier reads each job's latest verified checkpoint
    whole, as a restart would (``python -m daemons.checkpoint_verifier.drill``), and the verifier records what it
    found beside the check (the record's ``drill``)."""

    enabled: bool = True
    #: How often each job's verified checkpoint is drilled; a job may set its own on the claim
    #: (``restore-drill.checkpoint.gpucluster.io/<job>``: a duration no longer than staleAfter).
    every: PositiveDuration = "24h"
    #: A job whose last good drill is older fires CheckpointRestoreDrillStale. Jobs that have not reported a
    #: checkpoint for this long are done: they are not drilled and their drills are not exported.
    stale_after: PositiveDuration = "48h"
    #: The longest one drill may run (its Job's activeDeadlineSeconds).
    deadline: PositiveDuration = "2h"
    #: Drills running at once, cluster-wide: each reads a whole checkpoint from the filesystem training writes to.
    max_running: Annotated[int, Field(ge=1, le=64)] = 1
    #: A drill reads no faster than this many MB/s on average, so it leaves the filesystem's bandwidth to training
    #: (1 TB at 500 MB/s: 2000 s); None: as fast as it can.
    max_read_mbps: Annotated[int, Field(ge=1, le=1_000_000)] | None = 500
    #: A drill's CPU and memory request and limit (it streams each record a block at a time).
    cpu: Quantity = "1"
    memory: ByteQuantity = "256Mi"

    def rule_problems(self) -> Iterator[Problem]:
        yield from self.shorter_problems(_DRILL_SHORTER)

    every_seconds: ClassVar[Seconds] = Seconds("every")
    stale_after_seconds: ClassVar[Seconds] = Seconds("stale_after")
    deadline_seconds: ClassVar[Seconds] = Seconds("deadline")


class CheckpointVerifierSettings(ControllerSettings):
    """Everything the checkpoint verifier needs; see the module docstring."""

    enabled: bool = True
    #: Where the Deployment and its Lease live.
    namespace: DnsLabel = TRAINING_NAMESPACE
    #: The controller's image and its check Jobs' (the daemons' image has both); unset in a stack: from
    #: ``gpucluster:images``.
    image: Image = DEFAULT_DAEMONS_IMAGE
    replicas: ControllerReplicas = 2
    lease_name: DnsSubdomain = "gpucluster-checkpoint-verifier"
    #: How often the claims and the check Jobs are read (at least a second).
    interval: PollInterval = "30s"
    #: The longest one check may run (the Job's activeDeadlineSeconds); it is then run again after retryAfter.
    check_deadline: PositiveDuration = "30m"
    #: A check that ended with no verdict (deadline, eviction, a node lost) is run again after this.
    retry_after: PositiveDuration = "5m"
    #: How long a finished check Job stays for an operator to read (its ttlSecondsAfterFinished).
    keep_finished: PositiveDuration = "1h"
    #: Checks running at once, cluster-wide: a burst of reports never floods the CPU nodes or the filesystem.
    max_running: Annotated[int, Field(ge=1, le=256)] = 4
    #: Files a check hashes at once (one core each at most).
    workers: Annotated[int, Field(ge=1, le=64)] = 4
    #: A check's CPU request and limit (hashing is CPU-bound: as many cores as workers to hash at full speed).
    check_cpu: Quantity = "4"
    #: A check's memory request and limit (it streams files; DCP's metadata of a 512-GPU job is a few MB).
    check_memory: ByteQuantity = "512Mi"
    #: Where the check pods run: CPU nodes (they need the claim's filesystem, never a GPU).
    check_node_selector: Annotated[dict[str, str], Field(max_length=64), AfterValidator(check_labels)] = {}
    check_tolerations: Annotated[list[Toleration], Field(max_length=64)] = []
    #: Restore drills of each job's verified checkpoint.
    restore_drill: RestoreDrillSettings = RestoreDrillSettings()
    #: How long one API call may take.
    request_timeout: PositiveDuration = "5s"
    lease_duration: PositiveDuration = "15s"
    renew_deadline: PositiveDuration = "10s"
    #: How often the leader renews and the others try to take the Lease (at least a second).
    retry_period: PollInterval = "2s"
    #: Decide and log, write nothing (as ``--dry-run``).
    dry_run: bool = False

    # Filled by the stack (FILLED).
    #: The team namespaces it verifies in, with the queue and priority of their check Jobs.
    teams: Annotated[
        list[TeamQueue], Field(max_length=256), each_once("team namespaces", key=lambda t: t.namespace)
    ] = []

    def rule_problems(self) -> Iterator[Problem]:
        yield from self.shorter_problems(_SHORTER)
        yield from super().rule_problems()

    @property
    def workload_namespaces(self) -> list[str]:
        return [t.namespace for t in self.teams]

    # Seconds, for the daemon.

    check_deadline_seconds: ClassVar[Seconds] = Seconds("check_deadline")
    retry_after_seconds: ClassVar[Seconds] = Seconds("retry_after")
    keep_finished_seconds: ClassVar[Seconds] = Seconds("keep_finished")
    request_timeout_seconds: ClassVar[Seconds] = Seconds("request_timeout")


#: Validate already-parsed settings, or read a settings file: SettingsError lists every problem with its key path.
parse_settings = CheckpointVerifierSettings.parse
load_settings = CheckpointVerifierSettings.load


__all__ = [
    "FIELD_MANAGER",
    "FILLED",
    "STACK_KEY",
    "CheckpointVerifierSettings",
    "RestoreDrillSettings",
    "SettingsError",
    "TeamQueue",
    "load_settings",
    "parse_settings",
]
