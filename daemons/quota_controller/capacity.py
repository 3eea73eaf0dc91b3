"""Which nodes count as capacity, flavor by flavor: pure, with the clock passed in.

A node of a flavor (it carries every one of the flavor's node labels) counts when, checked in this order:

1. it carries none of the out taints (the quarantine taint, the acceptance-failed taint): otherwise out at once;
2. it carries the acceptance label (when the flavor requires acceptance): otherwise out at once;
3. it is schedulable (not cordoned): otherwise out at once;
4. it is Ready. A node that is not Ready still counts until it has been not Ready for ``notReadyGrace``
   (from its Ready condition's ``lastTransitionTime``, or from when this process first saw it not Ready when the
   node does not say): a blink changes nothing;
5. it has been Ready for ``returnAfter`` since this process last saw it out for being not Ready (losses count at
   once, returns only when they last, so a flapping node stays out and the quotas do not flap). A process that
   starts fresh has seen nothing out: every Ready node counts at once, and a restart moves no quota;
6. it has GPUs of the flavor's resource allocatable.

A deleted node is simply not in the list: out at once. Deliberate changes (a cordon, the quarantine taint, the
acceptance label) act at once both ways; only readiness, which blinks on its own, has the two delays.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from daemons.quota_controller.model import NodeView, Out


@dataclass(frozen=True)
class FlavorRule:
    """What the controller knows of a flavor (from the stack, through its settings)."""

    name: str
    node_labels: Mapping[str, str]
    gpu_resource: str
    declared_gpus: int
    require_acceptance: bool = True

    def selects(self, node: NodeView) -> bool:
        return all(node.labels.get(k) == v for k, v in self.node_labels.items())


@dataclass(frozen=True)
class Rules:
    not_ready_grace_s: float
    return_after_s: float
    #: Taint key -> the reason it stands for (the quarantine taint: quarantined; acceptance failed: not accepted).
    out_taints: Mapping[str, Out]
    accepted_label: str
    accepted_value: str

    def __post_init__(self) -> None:
        if self.not_ready_grace_s < 0 or self.return_after_s < 0:
            raise ValueError("notReadyGrace and returnAfter must not be negative")


@dataclass(frozen=True)
class FlavorCount:
    flavor: str
    declared: int
    #: GPUs of the nodes that count (may exceed ``declared`` when the flavor has more nodes than the stack says).
    healthy: int
    #: Nodes that count.
    nodes: int
    #: Nodes of the flavor that do not count, and why.
    out: Mapping[str, Out] = field(default_factory=dict)

    @property
    def usable(self) -> int:
        """What the queues' shares are taken of: the healthy GPUs, at most the declared ones (the stack's numbers are
        the shares at full capacity; extra nodes make no queue bigger than the stack says)."""
        return min(self.healthy, self.declared)

    def out_text(self, limit: int = 5) -> str:
        if not self.out:
            return "every node counts"
        items = sorted(self.out.items())
        text = ", ".join(f"{node} {why.value}" for node, why in items[:limit])
        return text + (f" and {len(items) - limit} more" if len(items) > limit else "")


class Capacity:
    """Remembers what readiness needs remembered; :meth:`count` is the only way in."""

    def __init__(self, rules: Rules) -> None:
        self.rules = rules
        #: node -> when this process first saw it not Ready (for nodes whose condition has no transition time).
        self._not_ready_first: dict[str, float] = {}
        #: node -> the last time this process saw it out for being not Ready.
        self._out_not_ready: dict[str, float] = {}

    def _readiness(self, now: float, node: NodeView) -> Out | None:
        r = self.rules
        name = node.name
        if node.ready is not True:
            first = self._not_ready_first.setdefault(name, now)
            since = node.ready_since if node.ready_since is not None else first
            if name in self._out_not_ready or now - since >= r.not_ready_grace_s:
                self._out_not_ready[name] = now
                return Out.NOT_READY
            return None  # a blink, so far
        self._not_ready_first.pop(name, None)
        last_out = self._out_not_ready.get(name)
        if last_out is None:
            return None
        since = max(node.ready_since or last_out, last_out)
        if now - since < r.return_after_s:
            return Out.RETURNING
        del self._out_not_ready[name]
        return None

    def _out(self, now: float, node: NodeView, flavor: FlavorRule) -> Out | None:
        r = self.rules
        for key in sorted(node.taint_keys & set(r.out_taints)):
            return r.out_taints[key]
        if flavor.require_acceptance and node.labels.get(r.accepted_label) != r.accepted_value:
            return Out.NOT_ACCEPTED
        if node.unschedulable:
            return Out.CORDONED
        readiness = self._readiness(now, node)
        if readiness is not None:
            return readiness
        if node.allocatable.get(flavor.gpu_resource, 0) <= 0:
            return Out.NO_GPUS
        return None

    def count(self, now: float, nodes: Iterable[NodeView], flavors: Sequence[FlavorRule]) -> dict[str, FlavorCount]:
        """Every flavor's count. A node of several flavors counts in each (flavors should not overlap)."""
        healthy = {f.name: 0 for f in flavors}
        counted = {f.name: 0 for f in flavors}
        out: dict[str, dict[str, Out]] = {f.name: {} for f in flavors}
        seen: set[str] = set()
        for node in nodes:
            seen.add(node.name)
            for flavor in flavors:
                if not flavor.selects(node):
                    continue
                why = self._out(now, node, flavor)
                if why is None:
                    healthy[flavor.name] += node.allocatable.get(flavor.gpu_resource, 0)
                    counted[flavor.name] += 1
                else:
                    out[flavor.name][node.name] = why
        for memory in (self._not_ready_first, self._out_not_ready):
            for gone in set(memory) - seen:
                del memory[gone]
        return {
            f.name: FlavorCount(f.name, f.declared_gpus, healthy[f.name], counted[f.name], out[f.name]) for f in flavors
        }
