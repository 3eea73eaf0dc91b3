"""What every ClusterQueue's quota should be now, and which queues must change: pure, with the clock passed in.

One call per cycle (:meth:`Decider.decide`):

1. Nodes unknown (the list failed) or an empty node list (no cluster runs without nodes: a read that returns none
   is taken for a broken one) -> change nothing (fail-static): every queue keeps the quota it has.
2. Count each flavor's healthy GPUs (``capacity.py``), and apportion them among the queues in the stack's
   proportions (``apportion.py``).
3. Queues unknown (the read failed) -> nothing to compare against: change nothing. A queue that is not there (not
   created yet, or deleted) is skipped.
4. Shrinking is bounded, per queue and flavor, against its number at full capacity: never below ``minShare`` of
   it (a false mass NotReady cannot empty the queues), and at most ``maxShrinkShare`` of it less than the queue
   has now per cycle. A bounded step is said (``QueueUpdate.limited``). Growth is not bounded.
5. A queue whose ``spec.resourceGroups`` differ from the wanted ones is updated, whole (the list is atomic in
   Kueue's API). The update says what changed, per flavor; when a new quota (with its borrowing limit) is below what
   the queue's admitted workloads already hold, it says so too: Kueue keeps admitted workloads running and admits
   nothing more there until usage falls below it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

from contract.quota_controller_settings import resource_groups
from daemons.quota_controller.apportion import apportion, scaled_limit
from daemons.quota_controller.capacity import Capacity, FlavorCount, FlavorRule, Rules
from daemons.quota_controller.model import NodeView, Observation, QueueView


@dataclass(frozen=True)
class QueueShares:
    """A ClusterQueue's numbers at full capacity."""

    name: str
    quota: Mapping[str, int]
    borrowing_limit: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Quota:
    nominal: int
    borrowing_limit: int | None = None

    def text(self) -> str:
        return f"{self.nominal}" + (f" (borrowing {self.borrowing_limit})" if self.borrowing_limit is not None else "")


@dataclass(frozen=True)
class QueueUpdate:
    queue: str
    resource_groups: list[dict[str, object]]
    #: Per flavor: ``h100 32 -> 24`` (and the borrowing limit when it changes).
    changes: tuple[str, ...]
    #: Per flavor whose new quota is below what admitted workloads hold: ``h100: quota 24 (borrowing 0) < 32 admitted``.
    below_admitted: tuple[str, ...] = ()
    #: Per flavor whose shrinking was bounded: ``h100 held at 16, its floor (50% of 32); capacity says 8``.
    limited: tuple[str, ...] = ()


@dataclass(frozen=True)
class Decision:
    #: "follow" (quotas computed; ``updates`` may be empty), or why nothing is changed.
    reason: str
    detail: str
    counts: Mapping[str, FlavorCount] = field(default_factory=dict)
    #: Queue -> flavor -> the quota it should have.
    wanted: Mapping[str, Mapping[str, Quota]] = field(default_factory=dict)
    updates: tuple[QueueUpdate, ...] = ()


def quantity(value: object) -> int | None:
    """A Kubernetes quantity as whole units (``"32"``, ``32``, ``"32000m"``); None when it is not one."""
    try:
        number = Decimal(str(value).removesuffix("m")) / (1000 if str(value).endswith("m") else 1)
    except (InvalidOperation, ValueError):
        return None
    return int(number) if number == number.to_integral_value() else None


def live_quotas(queue: QueueView) -> dict[str, Quota] | None:
    """Flavor -> quota as the queue has it; None when its resource groups are not in the shape we write."""
    out: dict[str, Quota] = {}
    for group in queue.resource_groups:
        flavors = group.get("flavors")
        if not isinstance(flavors, list):
            return None
        for flavor in flavors:
            if not isinstance(flavor, Mapping) or not isinstance(flavor.get("resources"), list):
                return None
            for res in flavor["resources"]:
                if not isinstance(res, Mapping):
                    return None
                nominal = quantity(res.get("nominalQuota"))
                limit = res.get("borrowingLimit")
                borrowing = None if limit is None else quantity(limit)
                if nominal is None or (limit is not None and borrowing is None):
                    return None
                out[str(flavor.get("name"))] = Quota(nominal, borrowing)
    return out


def _canonical(groups: Sequence[Mapping[str, object]]) -> list[object]:
    """Resource groups with quantities as numbers, so ``"32"`` and ``32`` compare equal."""
    out: list[object] = []
    for group in groups:
        flavors = group.get("flavors")
        entries: list[object] = []
        for flavor in flavors if isinstance(flavors, list) else []:
            if not isinstance(flavor, Mapping):
                entries.append(flavor)
                continue
            resources = flavor.get("resources")
            entries.append(
                (
                    flavor.get("name"),
                    [
                        {k: (quantity(v) if k in ("nominalQuota", "borrowingLimit") else v) for k, v in r.items()}
                        if isinstance(r, Mapping)
                        else r
                        for r in (resources if isinstance(resources, list) else [])
                    ],
                )
            )
        out.append((group.get("coveredResources"), entries))
    return out


class Decider:
    """The stack's flavors and shares, and the capacity memory; :meth:`decide` is the only way in."""

    def __init__(
        self,
        flavors: Sequence[FlavorRule],
        queues: Sequence[QueueShares],
        rules: Rules,
        *,
        min_share: float = 0.0,
        max_shrink_share: float = 1.0,
    ) -> None:
        if not 0.0 <= min_share <= 1.0 or not 0.0 < max_shrink_share <= 1.0:
            raise ValueError("min_share must be in [0, 1] and max_shrink_share in (0, 1]")
        self.flavors = tuple(flavors)
        self.queues = tuple(queues)
        self.capacity = Capacity(rules)
        self.min_share = min_share
        self.max_shrink_share = max_shrink_share

    def bounded(
        self, queue: QueueShares, wanted: Mapping[str, Quota], live: Mapping[str, Quota]
    ) -> tuple[dict[str, Quota], tuple[str, ...]]:
        """``wanted`` with each flavor's shrinking bounded (rule 4), and a sentence per bounded flavor."""
        out: dict[str, Quota] = {}
        said: list[str] = []
        for flavor, quota in wanted.items():
            full = queue.quota.get(flavor, 0)
            floor = math.ceil(self.min_share * full)
            nominal = quota.nominal
            why = ""
            if nominal < floor:
                nominal, why = floor, f"held at {floor}, its floor ({self.min_share:.0%} of {full})"
            now = live.get(flavor)
            step = max(1, math.ceil(self.max_shrink_share * full))
            if now is not None and nominal < now.nominal - step:
                nominal = now.nominal - step
                why = f"down {step} this cycle to {nominal} (at most {self.max_shrink_share:.0%} of {full} a cycle)"
            if why:
                said.append(f"{flavor} {why}; capacity says {quota.nominal}")
            out[flavor] = Quota(nominal, quota.borrowing_limit)
        return out, tuple(said)

    def wanted(self, counts: Mapping[str, FlavorCount]) -> dict[str, dict[str, Quota]]:
        """Queue -> flavor -> quota, every flavor apportioned among the queues that have a share of it."""
        out: dict[str, dict[str, Quota]] = {q.name: {} for q in self.queues}
        for flavor in self.flavors:
            count = counts[flavor.name]
            shares = {q.name: q.quota[flavor.name] for q in self.queues if flavor.name in q.quota}
            for queue, nominal in apportion(shares, flavor.declared_gpus, count.usable).items():
                shares_of = next(q for q in self.queues if q.name == queue)
                limit = shares_of.borrowing_limit.get(flavor.name)
                borrowing = None if limit is None else scaled_limit(limit, flavor.declared_gpus, count.usable)
                out[queue][flavor.name] = Quota(nominal, borrowing)
        return out

    def groups(self, queue: QueueShares, quotas: Mapping[str, Quota]) -> list[dict[str, object]]:
        return resource_groups(
            [(f.name, f.gpu_resource) for f in self.flavors],
            {f: q.nominal for f, q in quotas.items()},
            {f: q.borrowing_limit for f, q in quotas.items() if q.borrowing_limit is not None},
        )

    def decide(self, now: float, observed: Observation) -> Decision:
        nodes: tuple[NodeView, ...] | None = observed.nodes
        if nodes is None:
            why = observed.problems.get("nodes", "the node list failed")
            return Decision("nodes-unknown", f"nodes unknown ({why}); changing no quota")
        if not nodes:
            return Decision("no-nodes", "the node list is empty, which no running cluster is; changing no quota")
        counts = self.capacity.count(now, nodes, self.flavors)
        wanted = self.wanted(counts)
        if observed.queues is None:
            why = observed.problems.get("clusterqueues", "the ClusterQueue reads failed")
            return Decision("queues-unknown", f"ClusterQueues unknown ({why}); changing no quota", counts, wanted)
        updates: list[QueueUpdate] = []
        for queue in self.queues:
            live = observed.queues.get(queue.name)
            if live is None:
                continue
            before = live_quotas(live) or {}
            wanted[queue.name], limited = self.bounded(queue, wanted[queue.name], before)
            groups = self.groups(queue, wanted[queue.name])
            if _canonical(groups) == _canonical(live.resource_groups):
                continue
            changes = tuple(
                f"{flavor} {before[flavor].text() if flavor in before else 'none'} -> {quota.text()}"
                for flavor, quota in wanted[queue.name].items()
                if before.get(flavor) != quota
            )
            below = tuple(
                f"{flavor}: quota {quota.text()} < {live.usage[flavor]} admitted"
                for flavor, quota in wanted[queue.name].items()
                if live.usage.get(flavor, 0) > quota.nominal + (quota.borrowing_limit or 0)
            )
            updates.append(QueueUpdate(queue.name, groups, changes or ("resource groups reshaped",), below, limited))
        summary = "; ".join(f"{c.flavor} {c.usable}/{c.declared} GPUs ({c.out_text()})" for c in counts.values())
        return Decision("follow", summary, counts, wanted, tuple(updates))
