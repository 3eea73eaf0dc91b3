"""One cycle of the make-before-break controller (observe -> decide -> apply), and the loop that runs it.

Every replica observes and decides (its metrics and logs say what it would do); only the leader writes, and it
checks its leadership again before each write. The clock is passed in: ``now`` is Unix seconds, the scale of the
API's timestamps that maxHold and nodeGrace are measured from.

Events an operator reads in ``kubectl describe``: on the Workload (its namespace) when its check goes Ready or a
fallback happens, when its progress message changes, and when a write for it fails; on Nodes (namespace
``default``) when one is reserved or released, or a write to it fails; on the AdmissionCheck when its
controllerName is not ours.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from contract.constants import CLUSTER_EVENTS_NAMESPACE, KUEUE_API
from contract.make_before_break_settings import CONTROLLER_NAME, FIELD_MANAGER, MakeBeforeBreakSettings
from daemons.make_before_break.actions import (
    Action,
    Fallback,
    ReleaseNode,
    ReserveNode,
    SetCheckPending,
    SetCheckReady,
    SetDeletionCost,
    SetPlacement,
)
from daemons.make_before_break.client import KubeApi, read_lists
from daemons.make_before_break.decide import Decision, decide
from daemons.make_before_break.fields import TranslationError
from daemons.make_before_break.left_behind import LeftBehind, left_behind
from daemons.make_before_break.metrics import Metrics
from daemons.make_before_break.model import CheckState, Phase
from daemons.make_before_break.observe import Observed, observe
from daemons.make_before_break.policy import policy_of
from daemons.make_before_break.requests import (
    active_body,
    check_body,
    deletion_cost_patch,
    placement_body,
    release_ops,
    reserve_ops,
)
from daemons.make_before_break.translate import check_entry, controller_name_of
from daemons.toolkit.controller import OnTheApi
from daemons.toolkit.kube import ConflictError, KubeError

log = logging.getLogger("make_before_break")

# Event reasons.
REASON_RESERVED = "NodeReserved"
REASON_RELEASED = "NodeReleased"
REASON_MAKING_ROOM = "MakingRoom"
REASON_ROOM_MADE = "RoomMade"
REASON_FALLBACK = {"max-hold": "FallbackMaxHold", "no-capacity": "FallbackNoCapacity", "draining": "FallbackDraining"}
REASON_WRITE_FAILED = "MakeBeforeBreakWriteFailed"
REASON_NOT_OURS = "AdmissionCheckNotOurs"
#: Events on a Deployment whose placement changed, by its new phase (None: its own template, nothing moved).
REASON_PLACEMENT = {
    Phase.MOVED: "MovedForTraining",
    Phase.AWAITING_RETURN: "AwaitingReturn",
    Phase.RETURNING: "ComingHome",
    None: "PlacementHome",
}
#: Events about cluster-scoped objects (Nodes, the AdmissionCheck) must live here.
#: A Warning Event for the same problem on the same object goes out at most this often.
WARNING_INTERVAL_S = 300.0


def kind_of(action: Action) -> str:
    return {
        ReserveNode: "reserve-node",
        ReleaseNode: "release-node",
        SetDeletionCost: "set-deletion-cost",
        SetPlacement: "set-placement",
        SetCheckPending: "check-pending",
        SetCheckReady: "check-ready",
    }[type(action)]


@dataclass(frozen=True)
class Outcome:
    kind: str
    target: str
    #: applied, conflict, error, skipped
    result: str
    detail: str = ""


@dataclass(frozen=True)
class CycleResult:
    leader: bool
    observed: Observed
    decision: Decision
    outcomes: tuple[Outcome, ...] = ()
    active: str | None = None
    notes: tuple[str, ...] = field(default=())
    #: What of ours is on the cluster as observed this cycle; None when a list is unknown.
    left: LeftBehind | None = None


class Controller(OnTheApi[MakeBeforeBreakSettings, KubeApi, Metrics]):
    logger = log

    def __post_init__(self) -> None:
        self.policy = policy_of(self.settings)
        self.events = self.recorder(
            self.api.create_event, FIELD_MANAGER, clock=self.clock, warn_every=WARNING_INTERVAL_S
        )

    # ---------------------------------------------------------------- events

    def _node_event(self, name: str, uid: str | None, event_type: str, reason: str, message: str) -> None:
        involved = {"apiVersion": "v1", "kind": "Node", "name": name, "uid": uid}
        self.events.record(involved, CLUSTER_EVENTS_NAMESPACE, event_type, reason, message)

    def _workload_event(self, ns: str, name: str, uid: str, *, event_type: str, reason: str, message: str) -> None:
        involved = {"apiVersion": KUEUE_API, "kind": "Workload", "name": name, "namespace": ns, "uid": uid}
        self.events.record(involved, ns, event_type, reason, message)

    def _deployment_event(self, action: SetPlacement, applied: Mapping[str, Any]) -> None:
        """Why the placement changed, on the Deployment, so ``kubectl describe deployment`` tells an operator."""
        meta = applied.get("metadata") if isinstance(applied, Mapping) else None
        uid = meta.get("uid") if isinstance(meta, Mapping) else None
        involved = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": action.deployment,
            "namespace": action.namespace,
            "uid": uid,
        }
        message = action.reason or action.note or "placement changed"
        self.events.record(involved, action.namespace, "Normal", REASON_PLACEMENT[action.phase], message)

    # ---------------------------------------------------------------- writes

    def _apply(self, action: Action) -> str:
        """Write one action; returns a detail for the log. KubeError (ConflictError) when it could not."""
        key = self.settings.reservation_key
        if isinstance(action, ReserveNode | ReleaseNode):
            node = self.api.get_node(action.node)
            build = reserve_ops if isinstance(action, ReserveNode) else release_ops
            ops = build(node, key, action.uid)
            if not ops:
                return "already so"
            self.api.patch_node(action.node, ops)
            reserved = isinstance(action, ReserveNode)
            self._node_event(
                action.node,
                node["metadata"].get("uid"),
                "Normal",
                REASON_RESERVED if reserved else REASON_RELEASED,
                f"{'reserved for' if reserved else 'released by'} workload {action.uid}: {action.reason}",
            )
            return f"{len(ops)} patch operations"
        if isinstance(action, SetDeletionCost):
            self.api.patch_pod(action.namespace, action.pod, deletion_cost_patch(action.cost))
            return f"deletion cost {action.cost}"
        if isinstance(action, SetPlacement):
            applied = self.api.apply_deployment(placement_body(action))
            self._deployment_event(action, applied)
            return f"phase {action.phase.value if action.phase else 'home'}, epoch {action.epoch}"
        workload = self.api.get_workload(action.namespace, action.workload)
        meta = workload.get("metadata") or {}
        entry = check_entry(workload, self.settings.admission_check_name)
        if meta.get("uid") != action.uid or entry is None or entry.get("state") != CheckState.PENDING.value:
            raise ConflictError(f"workload {action.namespace}/{action.workload} changed since it was observed")
        self.api.apply_workload_status(check_body(action, workload, self.settings.admission_check_name, self.clock()))
        if isinstance(action, SetCheckReady):
            if action.fallback is not None:
                self.metrics.fallbacks.labels(action.fallback.value).inc()
                reason = REASON_FALLBACK[action.fallback.value]
                kind = "Normal" if action.fallback is Fallback.DRAINING else "Warning"
            else:
                reason, kind = REASON_ROOM_MADE, "Normal"
            self._workload_event(
                action.namespace, action.workload, action.uid, event_type=kind, reason=reason, message=action.message
            )
        else:
            self._workload_event(
                action.namespace,
                action.workload,
                action.uid,
                event_type="Normal",
                reason=REASON_MAKING_ROOM,
                message=action.message,
            )
        return "check " + ("Ready" if isinstance(action, SetCheckReady) else "Pending")

    def _failed(self, action: Action, exc: KubeError) -> None:
        message = f"cannot {kind_of(action)}: {exc}"
        if isinstance(action, ReserveNode | ReleaseNode):
            self._node_event(action.node, None, "Warning", REASON_WRITE_FAILED, message)
        elif isinstance(action, SetCheckPending | SetCheckReady):
            self._workload_event(
                action.namespace,
                action.workload,
                action.uid,
                event_type="Warning",
                reason=REASON_WRITE_FAILED,
                message=message,
            )

    def _target(self, action: Action) -> str:
        if isinstance(action, ReserveNode | ReleaseNode):
            return f"node/{action.node}"
        if isinstance(action, SetDeletionCost):
            return f"pod/{action.namespace}/{action.pod}"
        if isinstance(action, SetPlacement):
            return f"deployment/{action.namespace}/{action.deployment}"
        return f"workload/{action.namespace}/{action.workload}"

    def _run_action(self, action: Action) -> Outcome:
        kind, target = kind_of(action), self._target(action)
        if self.dry_run or not self.is_leader():
            why = "dry run" if self.dry_run else "not the leader"
            log.info(f"{why}: would {kind}", extra={"target": target, "reason": action.reason})
            return Outcome(kind, target, "skipped", why)
        try:
            detail = self._apply(action)
        except ConflictError as exc:
            log.info("changed since observed; trying again next cycle", extra={"target": target, "error": str(exc)})
            return Outcome(kind, target, "conflict", str(exc))
        except (KubeError, TranslationError) as exc:
            log.error("write failed", extra={"action": kind, "target": target, "error": str(exc)})
            self._failed(action, exc if isinstance(exc, KubeError) else KubeError(str(exc)))
            return Outcome(kind, target, "error", str(exc))
        log.info(kind, extra={"target": target, "reason": action.reason, "detail": detail})
        return Outcome(kind, target, "applied", detail)

    def ensure_active(self) -> str:
        """Set the AdmissionCheck's Active condition (Kueue treats a check without it as inactive)."""
        name = self.settings.admission_check_name
        try:
            check = self.api.get_admission_check(name)
            owner = controller_name_of(check)
            if owner != CONTROLLER_NAME:
                message = f"spec.controllerName is {owner!r}, not {CONTROLLER_NAME}: leaving it alone"
                log.error("the admission check is not ours", extra={"check": name, "controller": owner})
                involved = {"apiVersion": KUEUE_API, "kind": "AdmissionCheck", "name": name, "uid": None}
                self.events.record(involved, CLUSTER_EVENTS_NAMESPACE, "Warning", REASON_NOT_OURS, message)
                return "not ours"
            body = active_body(check, self.clock())
            if body is None:
                return "active"
            if self.dry_run:
                return "would set Active"
            self.api.apply_admission_check_status(body)
        except (KubeError, TranslationError) as exc:
            log.warning("cannot set the admission check Active", extra={"check": name, "error": str(exc)})
            return f"error: {exc}"
        log.info("set the admission check Active", extra={"check": name})
        return "set Active"

    # ---------------------------------------------------------------- the cycle

    def cycle(self) -> CycleResult:
        started = self.timer()
        raw = read_lists(self.api, self.settings)
        observed = observe(raw, self.settings)
        for name, problem in observed.problems.items():
            self.metrics.observe_errors.labels(name).inc()
            log.warning("cannot observe; changing nothing", extra={"list": name, "error": problem})
        now = self.clock()
        deciding = self.timer()
        decision = decide(observed.observation, self.policy, now)
        decide_seconds = self.timer() - deciding
        self.metrics.decide_seconds.observe(decide_seconds)
        leader = self.is_leader()
        self.metrics.is_leader.set(1 if leader else 0)
        self.metrics.cycles.inc()
        left = left_behind(observed.observation, self.policy.deletion_cost)
        self.metrics.draining.set(1 if self.policy.draining else 0)
        if left is not None:
            self.metrics.reserved_nodes.set(left.nodes)
            for kind, count in left.as_dict().items():
                self.metrics.left_behind.labels(kind).set(count)
            if self.policy.draining and left.nothing and not decision.actions:
                log.info("drained: nothing of make-before-break is left; enabled: false leaves nothing behind")
        workloads = observed.observation.workloads
        if workloads is not None:
            self.metrics.set_holds(
                {w.ref: now - w.quota_reserved_at for w in workloads if w.quota_reserved_at is not None}
            )
        active = None
        outcomes: list[Outcome] = []
        if leader:
            for action in decision.actions:
                self.metrics.decisions.labels(kind_of(action)).inc()
            active = self.ensure_active()
            for action in decision.actions:
                outcome = self._run_action(action)
                self.metrics.actions.labels(outcome.kind, outcome.result).inc()
                outcomes.append(outcome)
        for note in decision.notes:
            log.info(note)
        cycle_seconds = self.timer() - started
        self.metrics.cycle_seconds.observe(cycle_seconds)
        log.log(
            logging.INFO if decision.actions else logging.DEBUG,
            "cycle",
            extra={
                "leader": leader,
                "actions": len(decision.actions),
                "unknown": sorted(observed.problems),
                "workloads": [f"{r.ref}: {r.phase}" for r in decision.workloads],
                "decide_seconds": round(decide_seconds, 6),
                "cycle_seconds": round(cycle_seconds, 6),
            },
        )
        return CycleResult(leader, observed, decision, tuple(outcomes), active, decision.notes, left)
