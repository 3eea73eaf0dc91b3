"""The cause of one interruption, decided in one place (the contract of issue 15).

* ``node``: a pod of the gang had the condition ``DisruptionTarget`` (drained, evicted, its node tainted
  NoExecute), or the node it ran on was quarantined, not Ready or gone when it failed. JobSet's failure rule
  ``NodeFault`` (``RestartJobSetAndIgnoreMaxRestarts``) restarts these without counting them toward ``maxRestarts``.
* ``program``: a container exited non-zero (``OOMKilled`` included) on a healthy node: rule ``ProgramFault``
  (``RestartJobSet``), which counts.
* ``preemption``: Kueue evicted the Workload with reason ``Preempted`` (a higher priority needed the quota).
* ``requeue``: Kueue evicted it for any other reason (``PodsReadyTimeout``, ``Deactivated``, ``NodeFailures``,
  a stopped queue...): the gang gave its nodes up and queues again.
* ``hang``: the stall detector restarted the gang in place (its record ``gpucluster.io/stall-restart`` on the JobSet
  names the attempt it ended): every GPU idle, no traffic, no progress for ``stallAfter``. It evicts one pod, so
  JobSet counts it with the node's restarts; the record tells it apart.
* ``unknown``: none of the above can be told (a pod failed with no exit code on a healthy node).

An in-place restart's cause is exact from the JobSet's own counters (:func:`restart_causes`): ``status.restarts``
counts every restart, ``status.restartsCountTowardsMax`` the program's, so the difference is the node's. A pod still
there says the same thing with detail (:func:`pod_cause`): which pod, which node, which exit code.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

#: Kueue's eviction reason for preemption (``WorkloadEvictedByPreemption``).
PREEMPTED = "Preempted"
#: Kueue's eviction reason when a node of a topology-placed gang failed and no replacement was found, or a second
#: one failed (``WorkloadEvictedDueToNodeFailures``): the node's fault, and JobSet often restarts the gang for the
#: same failure (see ``ledger.pair_node_failures``).
NODE_FAILURES = "NodeFailures"


class Cause(StrEnum):
    NODE = "node"
    PROGRAM = "program"
    PREEMPTION = "preemption"
    REQUEUE = "requeue"
    HANG = "hang"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class NodeState:
    """The node a pod ran on, as it is now (``exists`` False: deleted)."""

    exists: bool
    #: The Ready condition: True, False, or None (Unknown or missing).
    ready: bool | None = True
    quarantined: bool = False


@dataclass(frozen=True)
class PodFailure:
    """What a failed pod of the gang says about why."""

    name: str
    node: str | None
    #: The pod has condition DisruptionTarget=True.
    disruption_target: bool = False
    #: The trainer container's terminated exit code (None: it did not terminate with one).
    exit_code: int | None = None
    #: The terminated reason (``OOMKilled``, ``Error``...).
    reason: str = ""


def pod_cause(pod: PodFailure, node: NodeState | None) -> Cause:
    """The cause one failed pod shows: the node's fault first (it explains a non-zero exit too: a process killed
    by a lost node exits non-zero), then the program's."""
    if pod.disruption_target:
        return Cause.NODE
    if pod.node and (node is None or not node.exists or node.quarantined or node.ready is not True):
        return Cause.NODE
    if pod.exit_code is not None and pod.exit_code != 0:
        return Cause.PROGRAM
    return Cause.UNKNOWN


def pod_detail(pod: PodFailure, node: NodeState | None) -> str:
    """A short text of what the pod showed, for the ledger and the Event."""
    parts = [pod.name]
    if pod.node:
        if node is None or not node.exists:
            parts.append(f"node {pod.node} gone")
        elif node.quarantined:
            parts.append(f"node {pod.node} quarantined")
        elif node.ready is not True:
            parts.append(f"node {pod.node} not Ready")
    if pod.disruption_target:
        parts.append("DisruptionTarget")
    if pod.exit_code is not None:
        parts.append(f"exit {pod.exit_code}{f' {pod.reason}' if pod.reason else ''}")
    return ", ".join(parts)


def eviction_cause(reason: str) -> Cause:
    """The cause of a Kueue eviction of the given reason."""
    if reason == PREEMPTED:
        return Cause.PREEMPTION
    return Cause.NODE if reason == NODE_FAILURES else Cause.REQUEUE


def restart_causes(before: tuple[int, int], after: tuple[int, int]) -> tuple[int, int]:
    """New (node, program) restarts between two readings of (``status.restarts``, ``restartsCountTowardsMax``).

    A counter that went back (a JobSet recreated under the same name is a new uid and starts from zero before this
    is called) gives no new restarts rather than negative ones.
    """
    node_before = before[0] - before[1]
    node_after = after[0] - after[1]
    return max(0, node_after - node_before), max(0, after[1] - before[1])
