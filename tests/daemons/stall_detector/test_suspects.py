"""Attribution: each kind of evidence names a node at its threshold and not below it; the repeat rule hands a node
on only after repeated offences within the window."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from daemons.stall_detector.suspects import (
    Naming,
    NodeEvidence,
    SuspectPolicy,
    offences,
    repeat_offenders,
    suspects,
)

POLICY = SuspectPolicy()


def gang(*tensor: float | None, **change: Any) -> list[NodeEvidence]:
    """Nodes n0, n1 ... with these tensor activities; ``change`` applies to n0."""
    nodes = [NodeEvidence(f"n{i}", t) for i, t in enumerate(tensor)]
    nodes[0] = replace(nodes[0], **change)
    return nodes


def test_a_healthy_gang_has_no_suspect() -> None:
    assert suspects(gang(0.45, 0.46, 0.44, 0.45), POLICY) == {}


def test_a_node_at_70_percent_of_its_peers_is_a_straggler_and_one_at_85_is_not() -> None:
    assert suspects(gang(0.70, 1.0, 1.0, 1.0), POLICY) == {"n0": ("straggler",)}
    assert suspects(gang(0.85, 1.0, 1.0, 1.0), POLICY) == {}
    # at the ratio exactly: not below it
    assert suspects(gang(0.8, 1.0, 1.0), POLICY) == {}


def test_with_two_nodes_the_slow_one_is_compared_with_the_other() -> None:
    assert suspects(gang(0.7, 1.0), POLICY) == {"n0": ("straggler",)}


def test_a_node_alone_or_with_unknown_peers_is_never_a_straggler() -> None:
    assert suspects(gang(0.1), POLICY) == {}
    assert suspects(gang(0.1, None, None), POLICY) == {}
    # an unknown node is not judged either
    assert suspects(gang(None, 1.0, 1.0), POLICY) == {}


@pytest.mark.parametrize(
    ("change", "reason", "quiet"),
    [
        ({"transport_errors": 10.0}, "transport-errors", {"transport_errors": 9.0}),
        ({"link_errors": 1.0}, "link-errors", {"link_errors": 0.0}),
        ({"hardware_xid": True}, "xid", {"hardware_xid": False}),
        ({"throttled": True}, "throttled", {"throttled": False}),
    ],
)
def test_each_kind_of_evidence_names_the_node_at_its_threshold(
    change: dict[str, Any], reason: str, quiet: dict[str, Any]
) -> None:
    assert suspects(gang(0.45, 0.45, 0.45, **change), POLICY) == {"n0": (reason,)}
    assert suspects(gang(0.45, 0.45, 0.45, **quiet), POLICY) == {}


def test_the_reasons_come_in_their_order() -> None:
    found = suspects(gang(0.1, 1.0, 1.0, transport_errors=50.0, hardware_xid=True), POLICY)
    assert found == {"n0": ("xid", "transport-errors", "straggler")}


def test_a_node_is_handed_on_after_three_namings_within_the_window_and_not_before() -> None:
    now = 1_800_000_000.0
    day = POLICY.repeat_window_s
    xid = ("xid",)

    def by(*ats: float) -> list[Naming]:
        return [Naming(at, "team-a", xid) for at in ats]

    named = {
        "n0": by(now - 60, now - 3600, now - day + 1),  # three within a day: out
        "n1": by(now - 60, now - 3600),  # twice: only named
        "n2": by(now - 60, now - 3600, now - day),  # the oldest just outside the window
    }
    assert repeat_offenders(named, now, POLICY) == ("n0",)
    assert repeat_offenders(named, now, replace(POLICY, repeat_count=2)) == ("n0", "n1", "n2")


def test_straggling_alone_counts_once_per_team_and_hardware_evidence_each_time() -> None:
    now = 1_800_000_000.0
    straggler = ("straggler",)
    one_team = [Naming(now - 60 * i, "team-a", straggler) for i in range(5)]
    assert offences(one_team, now, POLICY) == 1
    three_teams = [Naming(now - 60 * i, f"team-{i}", straggler) for i in range(3)]
    assert offences(three_teams, now, POLICY) == 3
    with_evidence = [Naming(now - 60 * i, "team-a", ("transport-errors", "straggler")) for i in range(3)]
    assert offences(with_evidence, now, POLICY) == 3
    assert repeat_offenders({"n0": one_team, "n1": three_teams, "n2": with_evidence}, now, POLICY) == ("n1", "n2")


@pytest.mark.parametrize(
    "change",
    [
        {"straggler_ratio": 0},
        {"straggler_ratio": 1},
        {"transport_errors": 0},
        {"link_errors": -1},
        {"repeat_count": 0},
        {"repeat_window_s": 0},
    ],
)
def test_a_policy_out_of_range_is_refused(change: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=next(iter(change))):
        replace(POLICY, **change)
