"""One cycle of the quota controller, and the loop that runs cycles every ``interval``.

A cycle: list the Nodes, read the stack's ClusterQueues, let the :class:`~daemons.quota_controller.decide.Decider`
decide, and, only on the leader, only when not a dry run and only after checking leadership once more, apply each
queue whose resource groups must change, with an Event on it saying why. Every replica reads and decides (so a
standby that takes over already knows which nodes are returning) and exports metrics; only the leader writes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from contract.constants import ACCEPTANCE_FAILED_TAINT_KEY, CLUSTER_EVENTS_NAMESPACE, KUEUE_API
from contract.quota_controller_settings import FIELD_MANAGER, QuotaControllerSettings
from daemons.quota_controller.capacity import FlavorRule, Rules
from daemons.quota_controller.client import KubeApi
from daemons.quota_controller.decide import Decider, Decision, QueueShares, QueueUpdate
from daemons.quota_controller.metrics import Metrics
from daemons.quota_controller.model import NodeView, Observation, Out, QueueView
from daemons.quota_controller.translate import node_view, queue_view
from daemons.toolkit.controller import OnTheApi
from daemons.toolkit.kube import ConflictError, KubeError

log = logging.getLogger("quota_controller")

# Event reasons (``kubectl describe clusterqueue <name>`` shows them).
REASON_FOLLOWED = "QuotaFollowsCapacity"
REASON_BELOW_ADMITTED = "QuotaBelowAdmitted"
REASON_UPDATE_FAILED = "QuotaUpdateFailed"
REASON_SHRINK_LIMITED = "QuotaShrinkLimited"
#: Warnings of one kind about one queue at most this often.
WARNING_INTERVAL_S = 300.0


@dataclass(frozen=True)
class Outcome:
    queue: str
    result: str
    detail: str = ""


@dataclass(frozen=True)
class CycleResult:
    leader: bool
    observed: Observation
    decision: Decision
    outcomes: tuple[Outcome, ...] = field(default=())


def decider_of(settings: QuotaControllerSettings) -> Decider:
    """The decision rules and the stack's numbers, from the settings file."""
    out = dict.fromkeys(settings.out_taint_keys, Out.QUARANTINED)
    if ACCEPTANCE_FAILED_TAINT_KEY in out:
        out[ACCEPTANCE_FAILED_TAINT_KEY] = Out.NOT_ACCEPTED
    rules = Rules(
        not_ready_grace_s=settings.not_ready_grace_seconds,
        return_after_s=settings.return_after_seconds,
        out_taints=out,
        accepted_label=settings.accepted_label,
        accepted_value=settings.accepted_value,
    )
    flavors = [
        FlavorRule(f.name, dict(f.node_labels), f.gpu_resource, f.declared_gpus, f.require_acceptance)
        for f in settings.flavors
    ]
    queues = [QueueShares(q.name, dict(q.quota), dict(q.borrowing_limit)) for q in settings.cluster_queues]
    return Decider(flavors, queues, rules, min_share=settings.min_share, max_shrink_share=settings.max_shrink_share)


class Controller(OnTheApi[QuotaControllerSettings, KubeApi, Metrics]):
    logger = log

    def __post_init__(self) -> None:
        self.decider = decider_of(self.settings)
        self.events = self.recorder(
            self.api.create_event, FIELD_MANAGER, clock=self.clock, warn_every=WARNING_INTERVAL_S
        )

    # ---------------------------------------------------------------- reads

    def observe(self) -> Observation:
        problems: dict[str, str] = {}
        nodes: tuple[NodeView, ...] | None = None
        try:
            raw = self.api.list_nodes()
        except KubeError as exc:
            problems["nodes"] = str(exc)
            self.metrics.read_errors.labels("nodes").inc()
        else:
            views: list[NodeView] = []
            for obj in raw:
                try:
                    views.append(node_view(obj))
                except ValueError as exc:
                    # Left out: it counts as no capacity, which is what an unreadable node is.
                    log.warning("cannot read a node; it does not count", extra={"error": str(exc)})
            nodes = tuple(views)
        queues: dict[str, QueueView] = {}
        for q in self.settings.cluster_queues:
            try:
                found = self.api.get_cluster_queue(q.name)
                if found is not None:
                    queues[q.name] = queue_view(found)
            except (KubeError, ValueError) as exc:
                problems["clusterqueues"] = str(exc)
                self.metrics.read_errors.labels("clusterqueues").inc()
                return Observation(nodes, None, problems)
        return Observation(nodes, queues, problems)

    # ---------------------------------------------------------------- writes

    def _event(self, queue: str, event_type: str, reason: str, message: str) -> None:
        involved = {"apiVersion": KUEUE_API, "kind": "ClusterQueue", "name": queue}
        self.events.record(involved, CLUSTER_EVENTS_NAMESPACE, event_type, reason, message)

    def _apply(self, update: QueueUpdate, decision: Decision) -> Outcome:
        if self.dry_run:
            log.info("dry run: would update the quota", extra={"queue": update.queue, "changes": update.changes})
            return Outcome(update.queue, "skipped", "dry run")
        if not self.is_leader():  # leadership may have lapsed while this cycle was reading
            return Outcome(update.queue, "skipped", "not the leader any more")
        try:
            self.api.apply_resource_groups(update.queue, update.resource_groups)
        except ConflictError as exc:
            return Outcome(update.queue, "conflict", str(exc))
        except KubeError as exc:
            self._event(update.queue, "Warning", REASON_UPDATE_FAILED, f"cannot update the quota: {exc}")
            return Outcome(update.queue, "error", str(exc))
        capacity = "; ".join(
            f"{c.flavor}: {c.usable} of {c.declared} GPUs healthy ({c.out_text()})" for c in decision.counts.values()
        )
        self._event(
            update.queue, "Normal", REASON_FOLLOWED, f"nominalQuota {', '.join(update.changes)}. Capacity: {capacity}"
        )
        if update.limited:
            self._event(
                update.queue,
                "Warning",
                REASON_SHRINK_LIMITED,
                f"{'; '.join(update.limited)}: a loss that large is taken a step at a time, and never below the "
                "floor (quotaController.minShare, maxShrinkShare); check the nodes if it is real",
            )
        if update.below_admitted:
            self.metrics.below_admitted.labels(update.queue).inc()
            self._event(
                update.queue,
                "Warning",
                REASON_BELOW_ADMITTED,
                f"{'; '.join(update.below_admitted)}: Kueue keeps the admitted workloads running and admits nothing "
                "more here until they fit",
            )
        return Outcome(update.queue, "applied", ", ".join(update.changes))

    # ---------------------------------------------------------------- the cycle

    def cycle(self) -> CycleResult:
        started = self.timer()
        observed = self.observe()
        deciding = self.timer()
        decision = self.decider.decide(self.clock(), observed)
        decide_seconds = self.timer() - deciding
        self.metrics.decide_seconds.observe(decide_seconds)
        leader = self.is_leader()
        self.metrics.is_leader.set(1 if leader else 0)
        self.metrics.cycles.inc()
        if decision.counts:
            self.metrics.set_capacity(decision.counts, decision.wanted)
        if decision.reason != "follow":
            self.metrics.unchanged.labels(decision.reason).inc()
            log.warning("changing no quota", extra={"reason": decision.reason, "detail": decision.detail})
        outcomes: list[Outcome] = []
        if leader or self.dry_run:
            for update in decision.updates:
                outcome = self._apply(update, decision)
                self.metrics.updates.labels(outcome.result).inc()
                outcomes.append(outcome)
        cycle_seconds = self.timer() - started
        self.metrics.cycle_seconds.observe(cycle_seconds)
        log.log(
            logging.INFO if outcomes else logging.DEBUG,
            "cycle",
            extra={
                "leader": leader,
                "reason": decision.reason,
                "capacity": decision.detail,
                "updates": [f"{o.queue}: {o.result} {o.detail}" for o in outcomes],
                "decide_seconds": round(decide_seconds, 6),
                "cycle_seconds": round(cycle_seconds, 6),
            },
        )
        return CycleResult(leader, observed, decision, tuple(outcomes))
