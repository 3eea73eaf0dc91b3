"""The decision of one cycle: fail-static on unknown inputs, whole resource groups, changes and admitted usage said."""

from __future__ import annotations

from dataclasses import replace

from contract.constants import ACCEPTED_LABEL, QUARANTINE_TAINT_KEY
from contract.quota_controller_settings import resource_groups
from daemons.quota_controller.capacity import FlavorRule, Rules
from daemons.quota_controller.decide import Decider, QueueShares, Quota, live_quotas
from daemons.quota_controller.model import NodeView, Observation, Out, QueueView

RULES = Rules(4.0, 60.0, {QUARANTINE_TAINT_KEY: Out.QUARANTINED}, ACCEPTED_LABEL, "true")
H100 = FlavorRule("h100", {"gpu": "h100"}, "nvidia.com/gpu", 32)
L40S = FlavorRule("l40s", {"gpu": "l40s"}, "nvidia.com/gpu", 16)
QUEUES = [
    QueueShares("pretraining", {"h100": 24, "l40s": 4}, {"h100": 8}),
    QueueShares("evaluation", {"h100": 8, "l40s": 12}),
]
T0 = 1_000_000.0
GPU = "nvidia.com/gpu"


def node(name: str, gpu: str = "h100", **changes: object) -> NodeView:
    base = NodeView(name, {"gpu": gpu, ACCEPTED_LABEL: "true"}, {"nvidia.com/gpu": 8}, False, True, T0 - 3600)
    return replace(base, **changes)  # type: ignore[arg-type]


def nodes(**changed: NodeView) -> tuple[NodeView, ...]:
    out = {f"h{i}": node(f"h{i}") for i in range(4)} | {f"l{i}": node(f"l{i}", gpu="l40s") for i in range(2)}
    out.update(changed)
    return tuple(out.values())


def static(queue: QueueShares) -> QueueView:
    """The queue as Pulumi created it: the stack's numbers."""
    groups = resource_groups(
        [("h100", "nvidia.com/gpu"), ("l40s", "nvidia.com/gpu")], queue.quota, queue.borrowing_limit
    )
    return QueueView(queue.name, tuple(groups))


def decider() -> Decider:
    return Decider([H100, L40S], QUEUES, RULES)


def live() -> dict[str, QueueView]:
    return {q.name: static(q) for q in QUEUES}


def test_full_capacity_changes_nothing() -> None:
    decision = decider().decide(T0, Observation(nodes(), live()))
    assert decision.reason == "follow"
    assert decision.updates == ()
    assert decision.wanted["pretraining"]["h100"] == Quota(24, 8)


def test_a_quarantined_node_shrinks_every_queue_of_its_flavor_only() -> None:
    obs = Observation(nodes(h3=node("h3", taint_keys=frozenset({QUARANTINE_TAINT_KEY}))), live())
    decision = decider().decide(T0, obs)
    assert [u.queue for u in decision.updates] == ["pretraining", "evaluation"]
    pretraining, evaluation = decision.updates
    assert pretraining.changes == ("h100 24 (borrowing 8) -> 18 (borrowing 6)",)
    assert evaluation.changes == ("h100 8 -> 6",)
    assert live_quotas(QueueView("p", tuple(pretraining.resource_groups))) == {"h100": Quota(18, 6), "l40s": Quota(4)}
    assert "h100 24/32 GPUs (h3 quarantined)" in decision.detail


def test_the_update_is_the_whole_list_in_the_components_shape() -> None:
    decision = decider().decide(T0, Observation(nodes(h3=node("h3", unschedulable=True)), live()))
    groups = decision.updates[0].resource_groups
    assert groups == resource_groups(
        [("h100", "nvidia.com/gpu"), ("l40s", "nvidia.com/gpu")], {"h100": 18, "l40s": 4}, {"h100": 6}
    )


def test_quantities_written_as_numbers_or_strings_compare_equal() -> None:
    queues = live()
    # as Kueue's own defaulting or a hand edit may leave them: numbers, not strings
    flavors = [
        {"name": "h100", "resources": [{"name": GPU, "nominalQuota": 8}]},
        {"name": "l40s", "resources": [{"name": GPU, "nominalQuota": 12}]},
    ]
    numeric = [{"coveredResources": [GPU], "flavors": flavors}]
    queues["evaluation"] = QueueView("evaluation", tuple(numeric))
    assert decider().decide(T0, Observation(nodes(), queues)).updates == ()


def test_nodes_unknown_changes_nothing() -> None:
    decision = decider().decide(T0, Observation(None, live(), {"nodes": "list nodes: timed out"}))
    assert (decision.reason, decision.updates) == ("nodes-unknown", ())
    assert "timed out" in decision.detail


def test_an_empty_node_list_is_taken_for_a_broken_read() -> None:
    decision = decider().decide(T0, Observation((), live()))
    assert (decision.reason, decision.updates) == ("no-nodes", ())


def test_queues_unknown_changes_nothing_but_still_counts() -> None:
    decision = decider().decide(T0, Observation(nodes(h3=node("h3", unschedulable=True)), None))
    assert (decision.reason, decision.updates) == ("queues-unknown", ())
    assert decision.counts["h100"].usable == 24


def test_a_queue_that_is_not_there_is_skipped() -> None:
    queues = live()
    del queues["evaluation"]
    decision = decider().decide(T0, Observation(nodes(h3=node("h3", unschedulable=True)), queues))
    assert [u.queue for u in decision.updates] == ["pretraining"]


def test_a_quota_below_what_is_admitted_is_said() -> None:
    queues = live()
    queues["evaluation"] = replace(queues["evaluation"], usage={"h100": 8})
    decision = decider().decide(T0, Observation(nodes(h3=node("h3", unschedulable=True)), queues))
    evaluation = next(u for u in decision.updates if u.queue == "evaluation")
    assert evaluation.below_admitted == ("h100: quota 6 < 8 admitted",)
    pretraining = next(u for u in decision.updates if u.queue == "pretraining")
    assert pretraining.below_admitted == ()  # nothing admitted there


def test_a_quota_still_above_what_is_admitted_says_nothing() -> None:
    queues = live()
    queues["evaluation"] = replace(queues["evaluation"], usage={"h100": 6})
    decision = decider().decide(T0, Observation(nodes(h3=node("h3", unschedulable=True)), queues))
    assert all(u.below_admitted == () for u in decision.updates)


def test_capacity_coming_back_restores_the_stack_numbers() -> None:
    d = decider()
    shrunk = d.decide(T0, Observation(nodes(h3=node("h3", unschedulable=True)), live()))
    queues = {u.queue: QueueView(u.queue, tuple(u.resource_groups)) for u in shrunk.updates}
    back = d.decide(T0 + 1, Observation(nodes(), queues))
    assert {u.queue: u.changes for u in back.updates} == {
        "pretraining": ("h100 18 (borrowing 6) -> 24 (borrowing 8)",),
        "evaluation": ("h100 6 -> 8",),
    }


def test_a_blink_moves_no_quota_and_a_loss_past_the_grace_does() -> None:
    d = decider()
    blinking = node("h3", ready=False, ready_since=T0)
    assert d.decide(T0 + 3, Observation(nodes(h3=blinking), live())).updates == ()
    assert len(d.decide(T0 + 4, Observation(nodes(h3=blinking), live())).updates) == 2


def test_resource_groups_in_another_shape_are_rewritten() -> None:
    queues = live()
    queues["evaluation"] = QueueView("evaluation", ({"coveredResources": ["nvidia.com/gpu"], "flavors": "broken"},))
    decision = decider().decide(T0, Observation(nodes(), queues))
    evaluation = next(u for u in decision.updates if u.queue == "evaluation")
    assert evaluation.changes == ("h100 none -> 8", "l40s none -> 12")


# --- bounded shrinking: a false mass NotReady cannot empty the queues -------------------------------------------


def bounded() -> Decider:
    return Decider([H100, L40S], QUEUES, RULES, min_share=0.5, max_shrink_share=0.25)


def all_h100_not_ready() -> tuple[NodeView, ...]:
    lost = {f"h{i}": node(f"h{i}", ready=False, ready_since=T0 - 3600) for i in range(4)}
    return nodes(**lost)


def test_a_mass_not_ready_shrinks_a_step_a_cycle_and_stops_at_the_floor() -> None:
    d = bounded()
    queues = live()
    seen = []
    for cycle in range(6):
        decision = d.decide(T0 + cycle, Observation(all_h100_not_ready(), queues))
        seen.append(decision.wanted["pretraining"]["h100"].nominal)
        for update in decision.updates:
            queues[update.queue] = QueueView(update.queue, tuple(update.resource_groups))
        if cycle == 0:
            (update,) = [u for u in decision.updates if u.queue == "pretraining"]
            assert update.limited == ("h100 down 6 this cycle to 18 (at most 25% of 24 a cycle); capacity says 0",)
    # 24 at full capacity: 6 a cycle, never below 12 (half)
    assert seen == [18, 12, 12, 12, 12, 12]
    last = d.decide(T0 + 10, Observation(all_h100_not_ready(), queues))
    assert last.updates == ()  # held at the floor: nothing to write, nothing said again


def test_the_floor_is_said_and_without_bounds_the_quota_follows_at_once() -> None:
    queues = live()
    queues["pretraining"] = QueueView(
        "pretraining", tuple(static(QueueShares("pretraining", {"h100": 14, "l40s": 4}, {"h100": 8})).resource_groups)
    )
    decision = bounded().decide(T0, Observation(all_h100_not_ready(), queues))
    (update,) = [u for u in decision.updates if u.queue == "pretraining"]
    assert update.limited == ("h100 held at 12, its floor (50% of 24); capacity says 0",)
    unbounded = decider().decide(T0, Observation(all_h100_not_ready(), live()))
    assert unbounded.wanted["pretraining"]["h100"].nominal == 0
    assert all(u.limited == () for u in unbounded.updates)


def test_growth_is_not_bounded() -> None:
    queues = {q.name: static(QueueShares(q.name, dict.fromkeys(q.quota, 0), {})) for q in QUEUES}
    decision = bounded().decide(T0, Observation(nodes(), queues))
    assert decision.wanted["pretraining"]["h100"].nominal == 24
    assert all(u.limited == () for u in decision.updates)


def test_bounds_out_of_range_are_refused() -> None:
    import pytest  # noqa: PLC0415

    for kw in ({"min_share": 1.5}, {"max_shrink_share": 0.0}, {"min_share": -0.1}):
        with pytest.raises(ValueError, match="min_share must be in"):
            Decider([H100], QUEUES[:1], RULES, **kw)  # type: ignore[arg-type]
