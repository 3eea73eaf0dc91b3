"""One tick of the taint controller, and the loop that runs ticks every ``interval``.

A tick: query headroom and pending inference (for the whole cluster and, with ``gpuTypes`` set, by GPU type),
reserved nodes and the inference pods already on the virtual node, read the virtual node, let the :class:`Decider`
decide, and — only on the leader, only when not a dry run, and only after checking leadership once more — change
the node.

Every replica queries, decides (so a standby that takes over already knows how long a condition has held) and
exports metrics; only the leader writes (taints, Events). ``decisions_total`` counts the leader's decisions.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass

from contract.taint_controller_settings import TAINT_EFFECT, TAINT_VALUE, TaintControllerSettings
from daemons.taint_controller.decide import ALL, Action, Decider, Decision, Thresholds
from daemons.taint_controller.kube import (
    EventSink,
    NodeApi,
    NodeState,
    add_taint_ops,
    remove_taint_ops,
    replace_taint_ops,
)
from daemons.taint_controller.metrics import Metrics
from daemons.toolkit.controller import Replica, Throttle
from daemons.toolkit.kube import ConflictError, KubeError
from daemons.toolkit.prometheus import Querier, QueryError
from daemons.toolkit.taint import Taint

log = logging.getLogger("taint_controller")

# Event reasons (``kubectl describe node <virtual node>`` shows them).
REASON_ADDED = "BurstTaintAdded"
REASON_REMOVED = "BurstTaintRemoved"
REASON_REPLACED = "BurstTaintEffectReplaced"
REASON_QUERY_FAILED = "HeadroomQueryFailed"
REASON_KUBE_FAILED = "BurstTaintUpdateFailed"


@dataclass(frozen=True)
class TickResult:
    leader: bool
    headroom: float | None
    pending: float | None
    taint_present: bool | None
    decision: Decision
    #: What was written to the node this tick: "add", "remove", "replace" (effect repaired), or None.
    changed: str | None = None
    #: Headroom and pending by GPU type (without the whole cluster's row); None when unknown or not asked.
    headroom_by_type: dict[str, float] | None = None
    pending_by_type: dict[str, float] | None = None
    #: Inference pods on the virtual node: the whole cluster's row (``""``) and one per GPU type; None: unknown.
    burst: dict[str, float] | None = None


@dataclass(eq=False, repr=False)
class Controller(Replica[TaintControllerSettings]):
    logger = log
    step = "tick"
    querier: Querier
    nodes: NodeApi
    events: EventSink
    metrics: Metrics
    _: KW_ONLY
    #: Its Events carry the identity of the sink they go through.
    identity: str = ""
    #: Monotonic seconds: how long a condition has held, how long since a Warning of the same kind.
    clock: Callable[[], float] = time.monotonic
    #: Unix seconds: when the taint changed (the flap window, the transition metric).
    wall_clock: Callable[[], float] = time.time

    def __post_init__(self) -> None:
        settings = self.settings
        self.decider = Decider(
            Thresholds(
                high_mark=settings.high_mark,
                low_mark=settings.low_mark,
                hold_add_s=settings.hold_add_seconds,
                hold_remove_s=settings.hold_remove_seconds,
            )
        )
        self.wanted_taint = Taint(key=settings.taint_key, effect=TAINT_EFFECT, value=TAINT_VALUE)
        self._headroom_query = settings.render_query(settings.headroom_query)
        self._pending_query = settings.render_query(settings.pending_query)
        self._reserved_query = settings.render_query(settings.reserved_query)
        #: Asked only with GPU types to tell apart. Without them the whole cluster is the only row, as it always
        #: was, and the burst pods could not change a decision (they would come home to that one row).
        self._by_type_queries: tuple[str, str, str] | None = (
            (
                settings.render_query(settings.headroom_by_type_query),
                settings.render_query(settings.pending_by_type_query),
                settings.render_query(settings.burst_query),
            )
            if settings.gpu_types
            else None
        )
        self._warnings = Throttle(settings.warning_event_interval_seconds)
        self._last_transition: tuple[str, float] | None = None
        self._last_taint_present: bool | None = None

    # --- inputs ---------------------------------------------------------------------------------------------

    def _query(self, what: str, promql: str) -> tuple[float | None, str | None]:
        """(value, None) or (None, problem); counts and logs the problem."""
        try:
            return self.querier.query(promql).single_value(), None
        except QueryError as exc:
            self.metrics.query_errors.labels(exc.reason).inc()
            log.warning(
                "query failed; changing nothing",
                extra={"query": what, "reason": exc.reason, "error": str(exc)},
            )
            return None, f"{what} query failed ({exc.reason}): {exc}"

    def _query_rows(self, what: str, promql: str, *, may_be_empty: bool) -> tuple[dict[str, float] | None, str | None]:
        """(rows by ``gpu_type``, None) or (None, problem); an empty answer is no rows where ``may_be_empty``."""
        try:
            result = self.querier.query(promql)
            if not result.samples and not may_be_empty:
                raise QueryError("empty", "the query returned no sample")
            return result.by_label("gpu_type"), None
        except QueryError as exc:
            self.metrics.query_errors.labels(exc.reason).inc()
            log.warning(
                "query failed; changing nothing",
                extra={"query": what, "reason": exc.reason, "error": str(exc)},
            )
            return None, f"{what} query failed ({exc.reason}): {exc}"

    def _by_type(self) -> tuple[dict[str, float] | None, dict[str, float] | None, list[str]]:
        """Headroom and pending by GPU type, and the problems; (None, None, []) without GPU types."""
        if self._by_type_queries is None:
            return None, None, []
        headroom_q, pending_q, _ = self._by_type_queries
        # A type with no node (or nothing pending) has no series: an empty answer is no rows, and the whole
        # cluster's query, asked beside it, is what tells "kube-state-metrics is down" apart.
        by_type_h, h_problem = self._query_rows("headroom by type", headroom_q, may_be_empty=True)
        by_type_p, p_problem = self._query_rows("pending by type", pending_q, may_be_empty=True)
        # The whole cluster's row is the whole cluster's queries'; a custom query's untyped sample is ignored.
        if by_type_h is not None:
            by_type_h.pop(ALL, None)
        if by_type_p is not None:
            by_type_p.pop(ALL, None)
        return by_type_h, by_type_p, [p for p in (h_problem, p_problem) if p]

    def _read_node(self) -> NodeState | None:
        try:
            return self.nodes.get_node(self.settings.node_name)
        except KubeError as exc:
            self.metrics.kube_errors.labels("read-node").inc()
            log.warning("cannot read the virtual node", extra={"node": self.settings.node_name, "error": str(exc)})
            return None

    # --- outputs --------------------------------------------------------------------------------------------

    def _warn(self, node: NodeState | None, key: str, reason: str, message: str) -> None:
        """A Warning Event, at most once per warningEventInterval for each kind of problem."""
        if self._warnings.due(key, self.clock()) and not self.dry_run:
            self.events.emit(node, self.settings.node_name, "Warning", reason, message)

    def _patch(self, node: NodeState, ops: list[dict[str, object]], what: str) -> NodeState | None:
        if not self.is_leader():  # leadership may have lapsed while this tick was querying
            log.info("lost leadership before writing; not changing the node", extra={"change": what})
            return None
        try:
            return self.nodes.patch_node(node.name, ops)
        except ConflictError as exc:
            log.info("the node changed while deciding; trying again next tick", extra={"error": str(exc)})
            return None
        except KubeError as exc:
            self.metrics.kube_errors.labels("patch-node").inc()
            log.error("cannot change the burst taint", extra={"change": what, "error": str(exc)})
            self._warn(node, "kube", REASON_KUBE_FAILED, f"cannot {what} the burst taint: {exc}")
            return None

    def _repair(self, node: NodeState) -> bool:
        """Hand-edited burst taint (wrong effect or value, duplicates) -> exactly ours; True if it was changed."""
        ops = replace_taint_ops(node, self.settings.taint_key, self.wanted_taint)
        if not ops:
            return False
        found = [t for _, t in node.with_key(self.settings.taint_key)]
        text = ", ".join(f"{t.key}={t.value or ''}:{t.effect}" for t in found)
        if self.dry_run:
            log.info("dry run: would replace the burst taint", extra={"found": text})
            return False
        if self._patch(node, ops, "replace") is None:
            return False
        log.warning("replaced a hand-edited burst taint with NoSchedule", extra={"found": text})
        self.events.emit(
            node,
            node.name,
            "Warning",
            REASON_REPLACED,
            f"found {text}; replaced with {self.settings.taint_key}={TAINT_VALUE}:{TAINT_EFFECT} "
            "(the burst taint is never NoExecute)",
        )
        return True

    def _transition(self, node: NodeState, decision: Decision) -> bool:
        action = decision.action.value
        if decision.action is Action.ADD:
            ops = add_taint_ops(node, self.wanted_taint)
        else:
            ops = remove_taint_ops(node, self.settings.taint_key)
        if self.dry_run:
            log.info(f"dry run: would {action} the burst taint", extra={"detail": decision.detail})
            return False
        if self._patch(node, ops, action) is None:
            return False
        wall = self.wall_clock()
        if self._last_transition is not None:
            previous, at = self._last_transition
            if previous != action and wall - at < self.settings.flap_window_seconds:
                self.metrics.flaps.inc()
                log.warning(
                    "the taint flapped: this reverses the previous change within flapWindow",
                    extra={"previous": previous, "seconds_ago": round(wall - at, 1)},
                )
        self._last_transition = (action, wall)
        self.metrics.mark_transition(wall)
        reason = REASON_ADDED if decision.action is Action.ADD else REASON_REMOVED
        self.events.emit(node, node.name, "Normal", reason, decision.detail)
        log.info("changed the burst taint", extra={"change": action, "detail": decision.detail, "node": node.name})
        return True

    # --- the tick -------------------------------------------------------------------------------------------

    def tick(self) -> TickResult:
        leader = self.is_leader()
        self.metrics.is_leader.set(1 if leader else 0)
        headroom, headroom_problem = self._query("headroom", self._headroom_query)
        pending, pending_problem = self._query("pending", self._pending_query)
        by_type_h, by_type_p, by_type_problems = self._by_type()
        # Unknown reservations only lose the shortcut (holdRemove applies); unknown burst pods make every row a
        # place to come home to (the add waits for all of them): neither raises a Warning of its own.
        reserved, _ = self._query("reserved", self._reserved_query)
        burst: dict[str, float] | None = None
        if self._by_type_queries is not None:
            burst, _ = self._query_rows("burst", self._by_type_queries[2], may_be_empty=False)
        self.metrics.headroom.set(math.nan if headroom is None else headroom)
        self.metrics.pending.set(math.nan if pending is None else pending)
        self.metrics.set_by_type(self.metrics.headroom_by_type, by_type_h, self.settings.gpu_types)
        self.metrics.set_by_type(self.metrics.pending_by_type, by_type_p, self.settings.gpu_types)
        self.metrics.burst.set(math.nan if burst is None else burst.get(ALL, 0.0))
        burst_typed = None if burst is None else {k: v for k, v in burst.items() if k != ALL}
        self.metrics.set_by_type(self.metrics.burst_by_type, burst_typed, self.settings.gpu_types)

        # Headroom is known only when every part of it is; pending by type unknown leaves the whole cluster's.
        headroom_rows: dict[str, float] | None = None
        if headroom is not None and (self._by_type_queries is None or by_type_h is not None):
            headroom_rows = {**(by_type_h or {}), ALL: headroom}
        pending_rows = None if pending is None else {**(by_type_p or {}), ALL: pending}

        node = self._read_node()
        changed: str | None = None
        taint_present: bool | None = None
        if node is not None:
            taint_present = bool(node.with_key(self.settings.taint_key))
            if leader and taint_present and self._repair(node):
                changed = "replace"
            self._last_taint_present = taint_present
            self.metrics.taint_present.set(1 if taint_present else 0)

        known = taint_present if taint_present is not None else bool(self._last_taint_present)
        decision = self.decider.decide(self.clock(), headroom_rows, pending_rows, known, reserved=reserved, burst=burst)
        if node is None and decision.action is not Action.HOLD:
            decision = Decision(Action.HOLD, "node-unreadable", f"cannot read node {self.settings.node_name}")
        problems = [p for p in (headroom_problem, pending_problem) if p] + by_type_problems
        if leader:
            self.metrics.decisions.labels(decision.action.value).inc()
            if problems:
                self._warn(node, "query", REASON_QUERY_FAILED, "; ".join(problems) + "; changing nothing")

        acting = leader and node is not None and decision.action is not Action.HOLD and changed is None
        if acting and node is not None and self._transition(node, decision):
            changed = decision.action.value
            self.metrics.taint_present.set(1 if decision.action is Action.ADD else 0)
        log.log(
            logging.INFO if changed or leader else logging.DEBUG,
            "tick",
            extra={
                "leader": leader,
                "headroom": headroom,
                "pending": pending,
                "reserved": reserved,
                "headroom_by_type": by_type_h,
                "pending_by_type": by_type_p,
                "burst": burst,
                "gpu_type": decision.gpu_type,
                "taint_present": taint_present,
                "action": decision.action.value,
                "reason": decision.reason,
                "detail": decision.detail,
                "changed": changed,
            },
        )
        return TickResult(leader, headroom, pending, taint_present, decision, changed, by_type_h, by_type_p, burst)

    def cycle(self) -> TickResult:
        """One tick: what the loop runs every ``interval`` and ``--once`` prints."""
        return self.tick()
