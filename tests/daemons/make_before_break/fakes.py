"""A small cluster that applies the actions and plays the other controllers.

The cluster is deliberately simple: a ReplicaSet controller that rolls Deployments out make-before-break
(maxUnavailable 0, old pods removed lowest deletion cost first), a scheduler that binds each new pod to the
fullest in-cluster node with room that it tolerates (never a reserved node) and otherwise to the virtual node,
pods that become Ready one tick after binding, and a gang that lands when its check is Ready, preempting
inference pods only when free GPUs are short (each preemption is recorded).
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from daemons.make_before_break.actions import (
    Action,
    PodSetUpdate,
    ReleaseNode,
    ReserveNode,
    SetCheckPending,
    SetCheckReady,
    SetDeletionCost,
    SetPlacement,
)
from daemons.make_before_break.decide import Decision, Policy, decide
from daemons.make_before_break.model import CheckState, Deployment, Node, Observation, Pod, VirtualNode, Workload
from tests.daemons.make_before_break.builders import NS, VIRTUAL, dep, node


@dataclass
class _SimPod:
    pod: Pod
    ready_at: float | None  # None: not Ready yet (or never: pending)


@dataclass
class FakeCluster:
    """State as the API would hold it; ``observe`` rebuilds an Observation from it alone."""

    nodes: dict[str, Node]
    deployments: dict[tuple[str, str], Deployment]
    virtual_gpus: int | None = 64
    now: float = 0.0
    boot_s: float = 5.0
    pods: dict[tuple[str, str], _SimPod] = field(default_factory=dict)
    #: Unbound pods: (namespace, deployment, epoch, name).
    pending: list[tuple[str, str, str | None, str]] = field(default_factory=list)
    workloads: dict[str, Workload] = field(default_factory=dict)
    updates: dict[str, tuple[PodSetUpdate, ...]] = field(default_factory=dict)
    landed: set[str] = field(default_factory=set)
    preempted: list[tuple[str, str]] = field(default_factory=list)
    fallbacks: list[tuple[str, str]] = field(default_factory=list)
    admitted_at: dict[str, float] = field(default_factory=dict)
    generation_lag: set[tuple[str, str]] = field(default_factory=set)
    seq: int = 0
    #: False: the provider refuses every create (pods on the virtual node never become Ready).
    virtual_ready: bool = True
    #: Per Deployment, the fewest replicas available at the end of any tick.
    min_available: dict[tuple[str, str], int] = field(default_factory=dict)

    # ---------------------------------------------------------------- building

    @classmethod
    def build(
        cls,
        node_count: int,
        replicas: dict[str, tuple[int, int]],
        *,
        gpus_per_node: int = 8,
        virtual_gpus: int | None = 64,
    ) -> FakeCluster:
        """Nodes n00.., and Deployments {name: (replicas, gpus)} spread over them, fullest nodes first."""
        nodes = {f"n{i:02d}": node(f"n{i:02d}", gpus_per_node) for i in range(node_count)}
        deps = {(NS, name): dep(name, r, g) for name, (r, g) in replicas.items()}
        cluster = cls(nodes, deps, virtual_gpus)
        for name, (r, _) in replicas.items():
            for _ in range(r):
                cluster.pending.append((NS, name, None, cluster._name(name)))
        cluster._schedule(ready=True)
        return cluster

    def _name(self, deployment: str) -> str:
        self.seq += 1
        return f"{deployment}-{self.seq:04d}"

    # ---------------------------------------------------------------- the API

    def observe(self) -> Observation:
        deployments = []
        for key, d in self.deployments.items():
            mine = [s for s in self.pods.values() if (s.pod.namespace, s.pod.deployment) == key]
            live = [s for s in mine if not s.pod.terminating]
            pend = [p for p in self.pending if (p[0], p[1]) == key]
            updated = sum(1 for s in live if s.pod.epoch == d.epoch) + sum(1 for p in pend if p[2] == d.epoch)
            available = sum(1 for s in live if s.ready_at is not None and s.ready_at <= self.now)
            deployments.append(
                replace(
                    d,
                    updated=updated,
                    available=available,
                    replicas=len(live) + len(pend),
                    current=key not in self.generation_lag,
                )
            )
        vn = VirtualNode(VIRTUAL, self.virtual_gpus, burst_taint=not self.pending)
        pods = tuple(s.pod for s in self.pods.values())
        return Observation(tuple(self.nodes.values()), pods, tuple(deployments), tuple(self.workloads.values()), vn)

    def apply(self, actions: Iterable[Action]) -> None:
        for a in actions:
            if isinstance(a, ReserveNode):
                self.nodes[a.node] = replace(self.nodes[a.node], reserved_for=a.uid)
            elif isinstance(a, ReleaseNode):
                if self.nodes[a.node].reserved_for == a.uid:
                    self.nodes[a.node] = replace(self.nodes[a.node], reserved_for=None)
            elif isinstance(a, SetDeletionCost):
                s = self.pods.get((a.namespace, a.pod))
                if s is not None:
                    s.pod = replace(s.pod, deletion_cost=a.cost)
            elif isinstance(a, SetPlacement):
                key = (a.namespace, a.deployment)
                d = self.deployments[key]
                if d.epoch != a.epoch:
                    self.generation_lag.add(key)
                self.deployments[key] = replace(d, flips=frozenset(a.flips), epoch=a.epoch, phase=a.phase, note=a.note)
            elif isinstance(a, SetCheckPending):
                w = self.workloads[a.uid]
                self.workloads[a.uid] = replace(w, check_message=a.message)
            elif isinstance(a, SetCheckReady):
                w = self.workloads[a.uid]
                self.workloads[a.uid] = replace(w, check=CheckState.READY, check_message=a.message)
                self.updates[a.uid] = a.pod_set_updates
                self.admitted_at[a.uid] = self.now
                if a.fallback is not None:
                    self.fallbacks.append((a.uid, a.fallback.value))

    def cycle(self, policy: Policy, *, crash: random.Random | None = None) -> Decision:
        """One controller cycle; with ``crash``, the controller dies after a random number of its writes."""
        decision = decide(self.observe(), policy, self.now)
        actions = list(decision.actions)
        if crash is not None:
            actions = actions[: crash.randint(0, len(actions))]
        self.apply(actions)
        return decision

    # ---------------------------------------------------------------- the other controllers

    def tick(self, seconds: float = 5.0) -> None:
        self.now += seconds
        self.generation_lag.clear()
        for key, s in list(self.pods.items()):
            if s.pod.terminating:
                del self.pods[key]
        for key, d in self.deployments.items():
            self._roll(key, d)
        self._schedule(ready=False)
        self._land_gangs()
        for d in self.observe().deployments or ():
            self.min_available[d.key] = min(self.min_available.get(d.key, d.available), d.available)

    def _roll(self, key: tuple[str, str], d: Deployment) -> None:
        mine = [s for s in self.pods.values() if (s.pod.namespace, s.pod.deployment) == key and not s.pod.terminating]
        pend = [p for p in self.pending if (p[0], p[1]) == key]
        new_bound = [s for s in mine if s.pod.epoch == d.epoch]
        old_bound = [s for s in mine if s.pod.epoch != d.epoch]
        new_pend = [p for p in pend if p[2] == d.epoch]
        old_pend = [p for p in pend if p[2] != d.epoch]
        for p in old_pend:
            self.pending.remove(p)
        new_unready = len(new_pend) + sum(1 for s in new_bound if s.ready_at is None or s.ready_at > self.now)
        total = len(new_bound) + len(new_pend) + len(old_bound)
        removable = total - d.desired - new_unready
        rank = sorted(
            old_bound,
            key=lambda s: (s.ready_at is not None and s.ready_at <= self.now, s.pod.deletion_cost or 0, s.pod.name),
        )
        for s in rank[: max(0, removable)]:
            s.pod = replace(s.pod, terminating=True)
            total -= 1
        new = len(new_bound) + len(new_pend)
        room = min(d.desired - new, d.desired + d.surge - total)
        for _ in range(max(0, room)):
            self.pending.append((key[0], key[1], d.epoch, self._name(key[1])))

    def used(self) -> dict[str, int]:
        out: dict[str, int] = dict.fromkeys([*self.nodes, VIRTUAL], 0)
        for s in self.pods.values():
            out[s.pod.node] += s.pod.gpus
        return out

    def free(self, name: str) -> int:
        return self.nodes[name].gpus - self.used()[name]

    def _schedule(self, *, ready: bool) -> None:
        used = self.used()
        for entry in list(self.pending):
            namespace, deployment, epoch, name = entry
            gpus = self.deployments[(namespace, deployment)].gpus_per_pod
            fits = [
                n for n in self.nodes.values() if n.healthy and n.reserved_for is None and n.gpus - used[n.name] >= gpus
            ]
            target: str | None = None
            if fits:
                target = min(fits, key=lambda n: (n.gpus - used[n.name], n.name)).name
            elif self.virtual_gpus is None or used[VIRTUAL] + gpus <= self.virtual_gpus:
                target = VIRTUAL
            if target is None:
                continue
            used[target] += gpus
            self.pending.remove(entry)
            at: float | None = self.now if ready else self.now + self.boot_s * (2 if target == VIRTUAL else 1)
            if target == VIRTUAL and not self.virtual_ready:
                at = None  # the provider refuses it: never Ready
            self.pods[(namespace, name)] = _SimPod(Pod(namespace, name, target, gpus, deployment, epoch), at)

    def _land_gangs(self) -> None:
        for uid, w in self.workloads.items():
            if w.check is not CheckState.READY or uid in self.landed or not w.holds_quota:
                continue
            self.landed.add(uid)
            pinned = bool(self.updates.get(uid))
            for ps in w.pod_sets:
                for i in range(ps.count):
                    self._land(uid, f"{w.name}-{ps.name}-{i}", ps.gpus_per_pod, pinned)

    def _land(self, uid: str, name: str, gpus: int, pinned: bool) -> None:
        candidates = sorted(
            (n for n in self.nodes.values() if n.healthy and (n.reserved_for == uid if pinned else True)),
            key=lambda n: n.name,
        )
        for n in candidates:
            if self.free(n.name) >= gpus:
                self.pods[("team-a", name)] = _SimPod(Pod("team-a", name, n.name, gpus), self.now)
                return
        for n in candidates:  # preemption: inference pods on the first node where that makes room
            victims = sorted(
                (s for s in self.pods.values() if s.pod.node == n.name and s.pod.deployment is not None),
                key=lambda s: s.pod.name,
            )
            immovable = sum(s.pod.gpus for s in self.pods.values() if s.pod.node == n.name and s.pod.deployment is None)
            if n.gpus - immovable < gpus:
                continue
            for s in victims:
                if self.free(n.name) >= gpus:
                    break
                del self.pods[s.pod.key]
                self.preempted.append(s.pod.key)
                self.pending.append((s.pod.namespace, s.pod.deployment or "", s.pod.epoch, self._name("preempted")))
            self.pods[("team-a", name)] = _SimPod(Pod("team-a", name, n.name, gpus), self.now)
            return

    # ---------------------------------------------------------------- test verbs

    def submit(self, w: Workload) -> None:
        self.workloads[w.uid] = w

    def finish(self, uid: str) -> None:
        self.workloads[uid] = replace(self.workloads[uid], finished=True)
        for key in [k for k, s in self.pods.items() if k[0] == "team-a" and s.pod.name.startswith(f"job-{uid}-")]:
            del self.pods[key]

    def delete(self, uid: str) -> None:
        del self.workloads[uid]

    def available(self, name: str) -> int:
        return next(d.available for d in self.observe().deployments or () if d.name == name)

    def on(self, name: str) -> list[Pod]:
        return [s.pod for s in self.pods.values() if s.pod.node == name]

    def on_any(self) -> list[Pod]:
        return [s.pod for s in self.pods.values()]

    def set_ready(self, name: str, ready: bool) -> None:
        self.nodes[name] = replace(self.nodes[name], not_ready_since=None if ready else self.now)
