"""Which nodes count: out at once for deliberate changes, a NotReady blink changes nothing, returns take returnAfter."""

from __future__ import annotations

from dataclasses import replace

import pytest

from contract.constants import ACCEPTANCE_FAILED_TAINT_KEY, ACCEPTED_LABEL, QUARANTINE_TAINT_KEY
from daemons.quota_controller.capacity import Capacity, FlavorRule, Rules
from daemons.quota_controller.model import NodeView, Out

GRACE, RETURN = 4.0, 60.0
RULES = Rules(
    not_ready_grace_s=GRACE,
    return_after_s=RETURN,
    out_taints={QUARANTINE_TAINT_KEY: Out.QUARANTINED, ACCEPTANCE_FAILED_TAINT_KEY: Out.NOT_ACCEPTED},
    accepted_label=ACCEPTED_LABEL,
    accepted_value="true",
)
H100 = FlavorRule("h100", {"gpu": "h100"}, "nvidia.com/gpu", 32)
L40S = FlavorRule("l40s", {"gpu": "l40s"}, "nvidia.com/gpu", 16, require_acceptance=False)
T0 = 1_000_000.0


def node(name: str, gpu: str = "h100", **changes: object) -> NodeView:
    base = NodeView(
        name=name,
        labels={"gpu": gpu, ACCEPTED_LABEL: "true"},
        allocatable={"nvidia.com/gpu": 8},
        unschedulable=False,
        ready=True,
        ready_since=T0 - 3600,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def fleet(**changed: NodeView) -> list[NodeView]:
    nodes = {f"n{i}": node(f"n{i}") for i in range(4)}
    nodes.update(changed)
    return list(nodes.values())


def test_four_healthy_nodes_are_the_whole_flavor() -> None:
    count = Capacity(RULES).count(T0, fleet(), [H100])["h100"]
    assert (count.healthy, count.nodes, count.usable, dict(count.out)) == (32, 4, 32, {})


@pytest.mark.parametrize(
    ("changed", "why"),
    [
        (node("n3", taint_keys=frozenset({QUARANTINE_TAINT_KEY})), Out.QUARANTINED),
        (node("n3", taint_keys=frozenset({ACCEPTANCE_FAILED_TAINT_KEY})), Out.NOT_ACCEPTED),
        (node("n3", labels={"gpu": "h100"}), Out.NOT_ACCEPTED),
        (node("n3", unschedulable=True), Out.CORDONED),
        (node("n3", allocatable={}), Out.NO_GPUS),
    ],
)
def test_a_deliberate_change_takes_a_node_out_at_once(changed: NodeView, why: Out) -> None:
    count = Capacity(RULES).count(T0, fleet(n3=changed), [H100])["h100"]
    assert (count.healthy, dict(count.out)) == (24, {"n3": why})


def test_unrelated_taints_and_other_flavors_nodes_change_nothing() -> None:
    nodes = [*fleet(n3=node("n3", taint_keys=frozenset({"nvidia.com/gpu"}))), node("l0", gpu="l40s")]
    counts = Capacity(RULES).count(T0, nodes, [H100, L40S])
    assert (counts["h100"].healthy, counts["l40s"].healthy) == (32, 8)


def test_a_flavor_that_does_not_require_acceptance_counts_unlabelled_nodes() -> None:
    counts = Capacity(RULES).count(T0, [node("l0", gpu="l40s", labels={"gpu": "l40s"})], [L40S])
    assert counts["l40s"].healthy == 8


def test_a_deleted_node_is_simply_gone() -> None:
    count = Capacity(RULES).count(T0, fleet()[:3], [H100])["h100"]
    assert (count.healthy, dict(count.out)) == (24, {})


def test_a_not_ready_blink_shorter_than_the_grace_changes_nothing() -> None:
    cap = Capacity(RULES)
    blink = node("n3", ready=False, ready_since=T0)
    assert cap.count(T0 + GRACE - 0.5, fleet(n3=blink), [H100])["h100"].healthy == 32
    # back Ready before the grace ran out: it never stopped counting, so no return delay either
    back = node("n3", ready=True, ready_since=T0 + GRACE - 0.2)
    assert cap.count(T0 + GRACE, fleet(n3=back), [H100])["h100"].healthy == 32


def test_not_ready_past_the_grace_takes_the_node_out() -> None:
    cap = Capacity(RULES)
    lost = node("n3", ready=False, ready_since=T0)
    count = cap.count(T0 + GRACE, fleet(n3=lost), [H100])["h100"]
    assert (count.healthy, dict(count.out)) == (24, {"n3": Out.NOT_READY})


def test_unknown_readiness_counts_as_not_ready_from_when_it_was_first_seen() -> None:
    cap = Capacity(RULES)
    unknown = node("n3", ready=None, ready_since=None)
    assert cap.count(T0, fleet(n3=unknown), [H100])["h100"].healthy == 32
    assert cap.count(T0 + GRACE, fleet(n3=unknown), [H100])["h100"].out == {"n3": Out.NOT_READY}


def test_a_node_back_from_not_ready_counts_only_after_return_after() -> None:
    cap = Capacity(RULES)
    cap.count(T0 + GRACE, fleet(n3=node("n3", ready=False, ready_since=T0)), [H100])
    back = node("n3", ready=True, ready_since=T0 + 10)
    assert cap.count(T0 + 10 + RETURN - 1, fleet(n3=back), [H100])["h100"].out == {"n3": Out.RETURNING}
    assert cap.count(T0 + 10 + RETURN, fleet(n3=back), [H100])["h100"].healthy == 32


def test_a_ready_since_older_than_the_loss_does_not_shorten_the_return() -> None:
    # kwok and some kubelets report the creation time as the Ready transition: the last loss seen here is the floor
    cap = Capacity(RULES)
    cap.count(T0 + 100, fleet(n3=node("n3", ready=False, ready_since=T0)), [H100])
    stale = node("n3", ready=True, ready_since=T0 - 3600)
    assert cap.count(T0 + 100 + RETURN - 1, fleet(n3=stale), [H100])["h100"].out == {"n3": Out.RETURNING}
    assert cap.count(T0 + 100 + RETURN, fleet(n3=stale), [H100])["h100"].healthy == 32


def test_a_flapping_node_stays_out() -> None:
    cap = Capacity(RULES)
    counts = []
    for i in range(20):  # NotReady 5 s, Ready 5 s, over and over; looked at 1 s and 4.5 s into each phase
        start = T0 + 5 * i
        n3 = node("n3", ready=i % 2 == 1, ready_since=start)
        counts += [cap.count(start + dt, fleet(n3=n3), [H100])["h100"].healthy for dt in (1.0, 4.5)]
    assert counts[0] == 32  # the first second: a blink so far
    assert set(counts[1:]) == {24}  # out from the first loss past the grace, never back while it flaps


def test_short_blinks_over_and_over_change_nothing() -> None:
    cap = Capacity(RULES)
    counts = []
    for i in range(20):  # NotReady 3 s, Ready 3 s
        start = T0 + 3 * i
        n3 = node("n3", ready=i % 2 == 1, ready_since=start)
        counts += [cap.count(start + dt, fleet(n3=n3), [H100])["h100"].healthy for dt in (1.0, 2.9)]
    assert set(counts) == {32}


def test_a_fresh_process_counts_every_ready_node_at_once() -> None:
    # what a restart or a new leader sees: nothing remembered, nothing returning
    count = Capacity(RULES).count(T0, fleet(n3=node("n3", ready_since=T0 - 1)), [H100])["h100"]
    assert count.healthy == 32


def test_a_node_that_leaves_the_list_is_forgotten() -> None:
    cap = Capacity(RULES)
    cap.count(T0 + GRACE, fleet(n3=node("n3", ready=False, ready_since=T0)), [H100])
    cap.count(T0 + GRACE + 1, fleet()[:3], [H100])
    # re-created with the same name and Ready: a new node, no return delay
    assert cap.count(T0 + GRACE + 2, fleet(n3=node("n3", ready_since=T0 + GRACE + 2)), [H100])["h100"].healthy == 32


def test_negative_delays_are_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        replace(RULES, not_ready_grace_s=-1)


def test_out_text_names_the_nodes_and_how_many_more() -> None:
    nodes = [node(f"n{i}", unschedulable=True) for i in range(7)]
    text = Capacity(RULES).count(T0, nodes, [H100])["h100"].out_text(limit=2)
    assert text == "n0 cordoned, n1 cordoned and 5 more"
