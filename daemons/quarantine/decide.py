"""Which GPU nodes to quarantine now, and the ledger that lists every quarantined node.

Pure: no I/O and no clock of its own; the caller passes the nodes as listed, the firing signals, the ledger as last
written and ``now`` (Unix seconds), so tests drive time by hand. :func:`decide` is the only way in.

Rules, per node with a firing signal:

1. Not a node of any GPU flavor (its labels carry no flavor's ``nodeLabels``), or the virtual node: nothing
   (``not-a-candidate``); a signal for a node that does not exist: nothing (``unknown-node``).
2. Already quarantined (it carries the quarantine taint, whatever its value or effect): nothing (``quarantined``).
3. Released less than ``releaseGrace`` ago (its ``gpucluster.io/quarantine-released-at`` annotation, which
   ``node_admission`` or the operator's kubectl step sets): nothing (``released-recently``). An alert that still
   fires once the grace is over quarantines it again: the GPU is still hot or erroring.
4. The circuit breaker of its flavor caps the rate and the total: at most ``max(1, floor(maxShare x nodes of
   the flavor))`` nodes of the flavor quarantined within ``breakerWindow`` (every ledger entry of the flavor whose
   ``since`` lies within the window: still quarantined, released since, or deleted since, one per node), and at
   most ``max(1, floor(maxQuarantinedShare x nodes of the flavor))`` quarantined at once (every active entry,
   however old: a slow trickle that is never released cannot drain the flavor either). The candidates of a cycle
   are taken in name order until the smaller budget is spent; the rest are ``refused-by-breaker`` and the breaker
   of the flavor is open.
5. Otherwise: ``quarantine``, with the reason word of the first signal in :data:`REASON_ORDER` (then by alert
   name), and a sentence naming every alert that fires for it.

The ledger is rebuilt from the nodes on every cycle (a kill between a node's patch and the ledger's write loses
nothing): one entry per quarantined node (reason and since from the node), kept after the node is released
(``released``) or deleted (``deleted``) until both the breaker window since its quarantine and ``ledgerRetention``
since its end have passed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from contract.constants import (
    QUARANTINE_REASON_ANNOTATION,
    QUARANTINE_TAINT_KEY,
    QUARANTINED_AT_ANNOTATION,
    VIRTUAL_NODE_TAINT_KEY,
)
from contract.quarantine_settings import RELEASED_AT_ANNOTATION, reason_of
from contract.times import unix_seconds
from daemons.toolkit.events import format_time  # noqa: F401 (the decision's times, as its tests name them)
from daemons.toolkit.taint import Taint

#: Which reason names a node when several alerts fire for it: the seed rule (temperature) first.
REASON_ORDER = ("gpu-temperature", "xid", "nvlink-errors", "infiniband-errors")
#: Alert labels worth naming in the reason sentence, in this order.
DETAIL_LABELS = ("gpu", "UUID", "uuid", "link", "device", "port", "type")
#: Longest reason sentence (an annotation an operator reads and sends on).
MAX_DETAIL = 480
#: The label virtual-kubelet puts on its node.
VIRTUAL_NODE_LABEL = ("type", "virtual-kubelet")


class Outcome(StrEnum):
    QUARANTINE = "quarantine"
    REFUSED_BY_BREAKER = "refused-by-breaker"
    QUARANTINED = "quarantined"
    RELEASED_RECENTLY = "released-recently"
    NOT_A_CANDIDATE = "not-a-candidate"
    UNKNOWN_NODE = "unknown-node"


@dataclass(frozen=True)
class NodeView:
    """A Node as listed: what the decision reads."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    uid: str = ""
    resource_version: str = ""

    @property
    def quarantine_taint(self) -> Taint | None:
        return next((t for t in self.taints if t.key == QUARANTINE_TAINT_KEY), None)

    @property
    def virtual(self) -> bool:
        key, value = VIRTUAL_NODE_LABEL
        return self.labels.get(key) == value or any(t.key == VIRTUAL_NODE_TAINT_KEY for t in self.taints)


@dataclass(frozen=True)
class Signal:
    """One firing alert that asks for a node's quarantine."""

    node: str
    alert: str
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def reason(self) -> str:
        return reason_of(self.alert)

    def describe(self) -> str:
        shown = ", ".join(f"{k}={self.labels[k]}" for k in DETAIL_LABELS if self.labels.get(k))
        return f"{self.alert} ({shown})" if shown else self.alert


@dataclass(frozen=True)
class LedgerEntry:
    node: str
    flavor: str
    reason: str
    detail: str
    #: Unix seconds the node was quarantined.
    since: float
    released: float | None = None
    deleted: float | None = None

    @property
    def active(self) -> bool:
        return self.released is None and self.deleted is None

    @property
    def ended(self) -> float | None:
        return self.deleted if self.deleted is not None else self.released


@dataclass(frozen=True)
class Policy:
    max_share: float
    window_s: float
    release_grace_s: float
    retention_s: float
    #: (name, nodeLabels) of every GPU flavor, in the stack's order.
    flavors: tuple[tuple[str, Mapping[str, str]], ...]
    #: Most of a flavor's nodes quarantined at once, whenever they were quarantined.
    max_quarantined_share: float = 1.0

    def __post_init__(self) -> None:
        for name, share in (("max_share", self.max_share), ("max_quarantined_share", self.max_quarantined_share)):
            if not 0 < share <= 1:
                raise ValueError(f"{name} {share} must be in (0, 1]")
        if min(self.window_s, self.release_grace_s, self.retention_s) <= 0:
            raise ValueError("the window, the grace and the retention must be longer than zero")

    def flavor_of(self, node: NodeView) -> str | None:
        """The first flavor whose every node label the node carries; None for the virtual node or no flavor."""
        if node.virtual:
            return None
        for name, labels in self.flavors:
            if labels and all(node.labels.get(k) == v for k, v in labels.items()):
                return name
        return None

    def limit(self, nodes: int) -> int:
        """Most nodes of a flavor of ``nodes`` nodes quarantined within the window: a share, at least one."""
        return max(1, math.floor(self.max_share * nodes + 1e-9))

    def cap(self, nodes: int) -> int:
        """Most nodes of a flavor of ``nodes`` nodes quarantined at once: a share, at least one."""
        return max(1, math.floor(self.max_quarantined_share * nodes + 1e-9))


@dataclass(frozen=True)
class Decision:
    node: str
    outcome: Outcome
    #: The taint's value (a reason word); empty when nothing is to be quarantined.
    reason: str
    #: A sentence for people (the reason annotation of a quarantine).
    detail: str
    flavor: str | None = None


@dataclass(frozen=True)
class Breaker:
    flavor: str
    nodes: int
    limit: int
    #: Nodes of the flavor quarantined within the window before this cycle.
    used: int
    quarantining: int
    refused: int
    #: Most of the flavor quarantined at once, and how many are now (before this cycle).
    cap: int = 0
    active: int = 0

    @property
    def open(self) -> bool:
        return self.refused > 0


@dataclass(frozen=True)
class Plan:
    decisions: tuple[Decision, ...]
    breakers: tuple[Breaker, ...]
    #: The ledger once every quarantine of this plan is applied.
    ledger: tuple[LedgerEntry, ...]

    def of(self, outcome: Outcome) -> list[Decision]:
        return [d for d in self.decisions if d.outcome is outcome]


# --- times ------------------------------------------------------------------------------------------------------


# --- the ledger -------------------------------------------------------------------------------------------------


def _flavor_or_previous(policy: Policy, node: NodeView, previous: LedgerEntry | None) -> str:
    return policy.flavor_of(node) or (previous.flavor if previous else "") or "none"


def build_ledger(
    nodes: Sequence[NodeView],
    previous: Iterable[LedgerEntry],
    now: float,
    policy: Policy,
    applied: Mapping[str, Decision] | None = None,
) -> tuple[LedgerEntry, ...]:
    """The ledger from the nodes (the source of truth), the previous ledger (for what is gone) and the quarantines
    ``applied`` this cycle (node -> its decision), in node-name order."""
    before = {e.node: e for e in previous}
    applied = applied or {}
    out: dict[str, LedgerEntry] = {}
    present = {n.name: n for n in nodes}
    for node in nodes:
        old = before.get(node.name)
        decision = applied.get(node.name)
        if decision is not None:
            out[node.name] = LedgerEntry(node.name, decision.flavor or "none", decision.reason, decision.detail, now)
            continue
        taint = node.quarantine_taint
        if taint is not None:
            since = unix_seconds(node.annotations.get(QUARANTINED_AT_ANNOTATION))
            if since is None:
                since = old.since if old is not None and old.active else now
            out[node.name] = LedgerEntry(
                node.name,
                _flavor_or_previous(policy, node, old),
                taint.value or (old.reason if old else "") or "unknown",
                node.annotations.get(QUARANTINE_REASON_ANNOTATION) or (old.detail if old else ""),
                since,
            )
        elif old is not None:
            if old.active:
                released = unix_seconds(node.annotations.get(RELEASED_AT_ANNOTATION))
                old = replace(old, released=released if released is not None and released >= old.since else now)
            out[node.name] = old
    for name, old in before.items():
        if name not in present:
            out[name] = old if old.deleted is not None else replace(old, deleted=now)
    kept = {
        name: e
        for name, e in out.items()
        if e.active or now - e.since < policy.window_s or now - (e.ended or now) < policy.retention_s
    }
    return tuple(kept[name] for name in sorted(kept))


# --- signals ----------------------------------------------------------------------------------------------------


def _reason_rank(reason: str) -> tuple[int, str]:
    return (REASON_ORDER.index(reason) if reason in REASON_ORDER else len(REASON_ORDER), reason)


def _detail(signals: Sequence[Signal]) -> str:
    parts = sorted({s.describe() for s in signals})
    text = "; ".join(parts[:4]) + (f"; and {len(parts) - 4} more" if len(parts) > 4 else "")
    text = f"firing: {text}"
    return text if len(text) <= MAX_DETAIL else text[: MAX_DETAIL - 1] + "…"


# --- the decision -----------------------------------------------------------------------------------------------


def decide(
    nodes: Sequence[NodeView],
    signals: Sequence[Signal],
    ledger: Sequence[LedgerEntry],
    now: float,
    policy: Policy,
) -> Plan:
    by_node: dict[str, list[Signal]] = {}
    for s in signals:
        by_node.setdefault(s.node, []).append(s)
    present = {n.name: n for n in nodes}
    current = build_ledger(nodes, ledger, now, policy)

    flavor_nodes: dict[str, int] = {name: 0 for name, _ in policy.flavors}
    for node in nodes:
        flavor = policy.flavor_of(node)
        if flavor is not None:
            flavor_nodes[flavor] += 1
    used: dict[str, int] = {name: 0 for name, _ in policy.flavors}
    active: dict[str, int] = {name: 0 for name, _ in policy.flavors}
    for entry in current:
        if entry.flavor in used and now - entry.since < policy.window_s:
            used[entry.flavor] += 1
        if entry.flavor in active and entry.active:
            active[entry.flavor] += 1

    decisions: list[Decision] = []
    candidates: dict[str, list[tuple[str, str, str]]] = {name: [] for name, _ in policy.flavors}
    for name in sorted(by_node):
        fired = sorted(by_node[name], key=lambda s: (_reason_rank(s.reason), s.alert))
        detail = _detail(fired)
        reason = fired[0].reason
        seen = present.get(name)
        if seen is None:
            decisions.append(Decision(name, Outcome.UNKNOWN_NODE, "", f"no node {name}; {detail}"))
            continue
        node = seen
        flavor = policy.flavor_of(node)
        if flavor is None:
            why = "the virtual node" if node.virtual else "a node of no GPU flavor"
            decisions.append(Decision(name, Outcome.NOT_A_CANDIDATE, "", f"{name} is {why}; {detail}"))
            continue
        if node.quarantine_taint is not None:
            decisions.append(Decision(name, Outcome.QUARANTINED, "", f"already quarantined; {detail}", flavor))
            continue
        released = unix_seconds(node.annotations.get(RELEASED_AT_ANNOTATION))
        if released is not None and now - released < policy.release_grace_s:
            decisions.append(
                Decision(
                    name,
                    Outcome.RELEASED_RECENTLY,
                    "",
                    f"released {max(0.0, now - released):.0f}s ago, within releaseGrace "
                    f"({policy.release_grace_s:.0f}s); {detail}",
                    flavor,
                )
            )
            continue
        candidates[flavor].append((name, reason, detail))

    breakers: list[Breaker] = []
    for flavor, _ in policy.flavors:
        limit = policy.limit(flavor_nodes[flavor])
        cap = policy.cap(flavor_nodes[flavor])
        by_rate = max(0, limit - used[flavor])
        at_once = max(0, cap - active[flavor])
        budget = min(by_rate, at_once)
        wanted = candidates[flavor]
        taken = min(budget, len(wanted))
        if by_rate <= at_once:
            why = (
                f"{used[flavor] + taken} of its {flavor_nodes[flavor]} nodes quarantined within "
                f"{policy.window_s:.0f}s, at most {limit} (maxShare {policy.max_share:g})"
            )
        else:
            why = (
                f"{active[flavor] + taken} of its {flavor_nodes[flavor]} nodes quarantined now, at most {cap} "
                f"(maxQuarantinedShare {policy.max_quarantined_share:g})"
            )
        for name, reason, detail in wanted[:budget]:
            decisions.append(Decision(name, Outcome.QUARANTINE, reason, detail, flavor))
        for name, reason, detail in wanted[budget:]:
            decisions.append(
                Decision(
                    name,
                    Outcome.REFUSED_BY_BREAKER,
                    reason,
                    f"circuit breaker open for flavor {flavor}: {why}; {detail}",
                    flavor,
                )
            )
        breakers.append(
            Breaker(
                flavor,
                flavor_nodes[flavor],
                limit,
                used[flavor],
                taken,
                max(0, len(wanted) - budget),
                cap,
                active[flavor],
            )
        )
    decisions.sort(key=lambda d: d.node)
    applied = {d.node: d for d in decisions if d.outcome is Outcome.QUARANTINE}
    return Plan(tuple(decisions), tuple(breakers), build_ledger(nodes, ledger, now, policy, applied))
