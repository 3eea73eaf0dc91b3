"""Which node of a stalled or slow gang is to blame, and when a node has been to blame often enough to go.

Pure, like ``decide.py``: the caller passes each node's evidence over the window and the times each node was named
before; no clock of its own.

A node is *suspect* when its own evidence stands out (reasons in this order):

* ``xid``: a hardware XID on one of its GPUs in the window (the program's XIDs are not evidence:
  ``contract/xids.py``);
* ``link-errors``: NVLink or InfiniBand link errors on it in the window, at least ``linkErrors``;
* ``transport-errors``: InfiniBand transport retries and timeouts (local ACK timeouts and the rest of
  ``hw_counters``) on its ports, at least ``transportErrors``: the NIC timeouts that hang a collective silently;
* ``throttled``: one of its GPUs slowed for heat or power (DCGM's clock event reasons) at least ``THROTTLED_SHARE``
  of the window;
* ``straggler``: its GPUs' tensor activity below ``stragglerRatio`` of its peers' median (the other nodes of the
  gang: with two nodes, the other one), the talk's "one GPU throttles the whole job". Nodes whose activity is
  unknown are neither judged nor counted among the peers.

A node named in at least ``repeatCount`` judgements within ``repeatWindow`` (across restarts of the gang) is a
*repeat offender*: handed to quarantine with its reasons, so the gang restarts without it. Named once, it is only
named (an Event): one bad minute is not a bad node.

``straggler`` alone is evidence a job's own code can produce: a team that idles one rank on purpose would have the
node named at every restart, and its quarantine would evict every other team's pods there. So namings whose only
reason is ``straggler`` count once per team (the job's namespace) toward ``repeatCount``; a naming with hardware
evidence (an XID, link or transport errors, throttling) counts each time. A node that only straggles in one team's
jobs is named (Events, the suspect metric) and left to an operator.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

REASONS = ("xid", "link-errors", "transport-errors", "throttled", "straggler")
#: Reasons that a job's own code can produce (its ranks' tensor activity): alone, they count once per team.
STEERABLE = frozenset({"straggler"})
#: A node is ``throttled`` when one of its GPUs was slowed for heat or power at least this share of the window: a
#: GPU that throttles now and then under a hot load is normal; one held back half the time drags the whole gang.
THROTTLED_SHARE = 0.5


@dataclass(frozen=True)
class NodeEvidence:
    """What one node of the gang showed over the window."""

    node: str
    #: Mean tensor activity of its GPUs the gang holds; None: unknown.
    tensor_active: float | None
    transport_errors: float = 0.0
    link_errors: float = 0.0
    hardware_xid: bool = False
    throttled: bool = False


@dataclass(frozen=True)
class SuspectPolicy:
    straggler_ratio: float = 0.8
    transport_errors: float = 10.0
    link_errors: float = 1.0
    repeat_count: int = 3
    repeat_window_s: float = 86_400.0

    def __post_init__(self) -> None:
        if not 0 < self.straggler_ratio < 1:
            raise ValueError(f"straggler_ratio {self.straggler_ratio} must be in (0, 1)")
        if min(self.transport_errors, self.link_errors) <= 0:
            raise ValueError("transport_errors and link_errors must be more than zero")
        if self.repeat_count < 1 or self.repeat_window_s <= 0:
            raise ValueError("repeat_count must be at least 1 and repeat_window_s more than zero")


def suspects(evidence: Sequence[NodeEvidence], policy: SuspectPolicy) -> dict[str, tuple[str, ...]]:
    """Each suspect node and why, in ``REASONS`` order; nodes with no reason are left out."""
    known = {e.node: e.tensor_active for e in evidence if e.tensor_active is not None}
    out: dict[str, tuple[str, ...]] = {}
    for e in evidence:
        reasons: list[str] = []
        if e.hardware_xid:
            reasons.append("xid")
        if e.link_errors >= policy.link_errors:
            reasons.append("link-errors")
        if e.transport_errors >= policy.transport_errors:
            reasons.append("transport-errors")
        if e.throttled:
            reasons.append("throttled")
        peers = [v for n, v in known.items() if n != e.node]
        if e.tensor_active is not None and peers:
            median = statistics.median(peers)
            if median > 0 and e.tensor_active < policy.straggler_ratio * median:
                reasons.append("straggler")
        if reasons:
            out[e.node] = tuple(reasons)
    return out


@dataclass(frozen=True)
class Naming:
    """One time a node was named: when, by the job of which team (its namespace), and why."""

    at: float
    team: str
    reasons: tuple[str, ...]


def offences(namings: Sequence[Naming], now: float, policy: SuspectPolicy) -> int:
    """How many of ``namings`` within the window count toward ``repeat_count``: each with hardware evidence, and
    one per team among those whose reasons are all ``STEERABLE``."""
    recent = [n for n in namings if 0 <= now - n.at < policy.repeat_window_s]
    evidenced = sum(1 for n in recent if not set(n.reasons) <= STEERABLE)
    return evidenced + len({n.team for n in recent if set(n.reasons) <= STEERABLE})


def repeat_offenders(named: Mapping[str, Sequence[Naming]], now: float, policy: SuspectPolicy) -> tuple[str, ...]:
    """The nodes with at least ``repeat_count`` offences (:func:`offences`) within the window before ``now``."""
    return tuple(
        sorted(node for node, namings in named.items() if offences(namings, now, policy) >= policy.repeat_count)
    )
