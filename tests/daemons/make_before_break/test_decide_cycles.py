"""Whole flips on a small simulated cluster: out and back, under kill -9, without capacity, at production scale.

Each cycle observes the cluster (rebuilt from its API state alone), decides, applies; then the other controllers
(ReplicaSets, scheduler, gang) take one 5-second step. See ``fakes.py`` for what they do.
"""

from __future__ import annotations

import random

import pytest

from daemons.make_before_break.decide import Policy, decide
from daemons.make_before_break.model import CheckState, Phase
from tests.daemons.make_before_break.builders import VIRTUAL, gang
from tests.daemons.make_before_break.fakes import FakeCluster

POLICY = Policy(max_hold_s=600.0, node_grace_s=60.0, max_returning=2)
STEP = 5.0


def run(cluster: FakeCluster, seconds: float, *, crash: random.Random | None = None) -> None:
    end = cluster.now + seconds
    while cluster.now < end:
        cluster.cycle(POLICY, crash=crash)
        cluster.tick(STEP)


def settled(cluster: FakeCluster, *, rented: int = 0) -> bool:
    """Nothing left to do: no action, no reservation, every Deployment home, nothing marked, ``rented`` pods rented."""
    obs = cluster.observe()
    return (
        decide(obs, POLICY, cluster.now).actions == ()
        and all(n.reserved_for is None for n in obs.nodes or ())
        and all(not d.flips and d.epoch is None and d.phase is None for d in obs.deployments or ())
        and all(p.deletion_cost is None for p in obs.pods or ())
        and len(cluster.on(VIRTUAL)) == rented
    )


def never_below_desired(cluster: FakeCluster) -> bool:
    return all(cluster.min_available[d.key] >= d.desired for d in cluster.deployments.values())


def small(*, virtual_ready: bool = True) -> FakeCluster:
    """4 nodes x 8 GPUs: llm 12 x 1 GPU, mixtral 4 x 2 GPUs (20 of 32 GPUs)."""
    cluster = FakeCluster.build(4, {"llm": (12, 1), "mixtral": (4, 2)})
    cluster.virtual_ready = virtual_ready
    return cluster


def test_a_full_flip_out_and_back_preempts_nothing_and_never_dips() -> None:
    cluster = small()
    cluster.submit(gang("u1", 2, 8, at=cluster.now))
    run(cluster, 300)
    assert cluster.fallbacks == []
    assert "u1" in cluster.admitted_at
    assert cluster.preempted == []
    gang_nodes = {p.node for p in cluster.on_any() if p.namespace == "team-a"}
    assert len(gang_nodes) == 2
    assert all(cluster.nodes[n].reserved_for == "u1" for n in gang_nodes)
    assert never_below_desired(cluster)
    cluster.finish("u1")
    run(cluster, 600)
    assert settled(cluster)
    assert never_below_desired(cluster)
    assert cluster.preempted == []


@pytest.mark.parametrize("seed", range(12))
def test_kill_9_at_random_moments_converges_loses_no_replica_and_holds_no_longer_than_max_hold(seed: int) -> None:
    crash = random.Random(seed)
    cluster = small()
    submitted = cluster.now
    cluster.submit(gang("u1", 2, 8, at=submitted))
    while "u1" not in cluster.admitted_at and cluster.now < submitted + 2 * POLICY.max_hold_s:
        obs = cluster.observe()
        # A controller that restarts here rebuilds the same observation and decides the same.
        assert decide(obs, POLICY, cluster.now) == decide(cluster.observe(), POLICY, cluster.now)
        cluster.cycle(POLICY, crash=crash)
        cluster.tick(STEP)
    assert cluster.admitted_at["u1"] - submitted <= POLICY.max_hold_s + STEP
    run(cluster, 60, crash=crash)
    cluster.finish("u1")
    run(cluster, 900, crash=crash)
    run(cluster, 120)  # the last controller lives
    assert settled(cluster)
    assert never_below_desired(cluster)
    assert cluster.fallbacks == []
    assert cluster.preempted == []


@pytest.mark.parametrize("seed", range(8))
def test_kill_9_during_a_fallback_still_admits_and_leaves_nothing_half_moved(seed: int) -> None:
    crash = random.Random(seed)
    cluster = small(virtual_ready=False)
    cluster.submit(gang("u1", 2, 8, at=cluster.now))
    run(cluster, POLICY.max_hold_s + 60, crash=crash)
    assert cluster.admitted_at["u1"] <= POLICY.max_hold_s + 60
    run(cluster, 60)
    for d in cluster.deployments.values():
        assert "u1" not in d.flips
    assert all(p.deletion_cost is None for p in cluster.on_any())


def test_the_provider_has_no_capacity_and_the_cluster_no_room_training_is_admitted_at_once() -> None:
    cluster = FakeCluster.build(2, {"llm": (12, 1)}, virtual_gpus=0)  # 8 + 4 replicas, 4 GPUs free
    cluster.submit(gang("u1", 1, 8, at=cluster.now))
    run(cluster, 3 * STEP)
    assert cluster.fallbacks == [("u1", "no-capacity")]
    assert cluster.admitted_at["u1"] <= 2 * STEP
    # Nothing was moved: the Deployment is as it was, and the gang took its GPUs the old way.
    d = cluster.deployments[("inference", "llm")]
    assert (d.flips, d.epoch, d.phase) == (frozenset(), None, None)
    assert len(cluster.preempted) == 4
    assert all(p.deletion_cost is None for p in cluster.on_any())


def test_every_create_refused_training_is_admitted_by_max_hold_and_nothing_is_left_half_moved() -> None:
    cluster = small(virtual_ready=False)
    cluster.submit(gang("u1", 2, 8, at=cluster.now))
    run(cluster, POLICY.max_hold_s + 3 * STEP)
    assert cluster.fallbacks == [("u1", "max-hold")]
    assert cluster.admitted_at["u1"] <= POLICY.max_hold_s + STEP
    for d in cluster.deployments.values():
        assert d.flips == frozenset()
        assert d.phase in (None, Phase.AWAITING_RETURN), d
    message = cluster.workloads["u1"].check_message
    assert message.startswith("maxHold 10m00s passed before the room was made")
    cluster.finish("u1")
    cluster.virtual_ready = True
    run(cluster, 900)
    # The 2 replicas the gang preempted burst the old way, with their own template: the descheduler may bring them
    # home as it does today (no no-eviction marker on them).
    assert settled(cluster, rented=len(cluster.preempted))
    assert all(p.epoch is None for p in cluster.on(VIRTUAL))


def test_a_workload_deleted_mid_flip_gives_everything_back() -> None:
    cluster = small()
    cluster.submit(gang("u1", 2, 8, at=cluster.now))
    run(cluster, 3 * STEP)  # reserved, rolling
    assert any(d.flips == {"u1"} for d in cluster.deployments.values())
    assert "u1" not in cluster.admitted_at
    cluster.delete("u1")
    run(cluster, 600)
    assert settled(cluster)
    assert never_below_desired(cluster)


def test_two_workloads_get_disjoint_rooms_and_neither_preempts() -> None:
    cluster = small()
    cluster.submit(gang("u1", 1, 8, at=cluster.now))
    cluster.submit(gang("u2", 1, 8, at=cluster.now + 1))
    run(cluster, 300)
    assert set(cluster.admitted_at) == {"u1", "u2"}
    assert cluster.fallbacks == []
    assert cluster.preempted == []
    holders = [n.reserved_for for n in cluster.nodes.values() if n.reserved_for]
    assert sorted(holders) == ["u1", "u2"]
    for uid in ("u1", "u2"):
        cluster.finish(uid)
    run(cluster, 900)
    assert settled(cluster)


def test_a_reserved_node_that_blinks_changes_nothing() -> None:
    cluster = small()
    cluster.submit(gang("u1", 2, 8, at=cluster.now))
    run(cluster, 2 * STEP)
    held = sorted(n.name for n in cluster.nodes.values() if n.reserved_for == "u1")
    blink = held[0]
    cluster.set_ready(blink, False)
    run(cluster, 30)
    cluster.set_ready(blink, True)
    run(cluster, 300)
    assert sorted(n.name for n in cluster.nodes.values() if n.reserved_for == "u1") == held
    assert cluster.fallbacks == []
    assert cluster.preempted == []


def test_production_scale_96_nodes_64_replicas_and_a_64_node_gang() -> None:
    services = {"llama": (24, 1), "mixtral": (16, 2), "embed": (16, 1), "vision": (8, 4)}
    cluster = FakeCluster.build(96, services, virtual_gpus=512)
    cluster.submit(gang("big", 64, 8, at=cluster.now))
    run(cluster, 400)
    assert "big" in cluster.admitted_at
    assert cluster.fallbacks == []
    assert cluster.preempted == []
    assert never_below_desired(cluster)
    assert cluster.workloads["big"].check is CheckState.READY
