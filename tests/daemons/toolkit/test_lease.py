"""Leader election on a Lease against an in-memory coordination API with resourceVersion checks."""

from __future__ import annotations

import pytest

from daemons.toolkit.kube import KubeError
from daemons.toolkit.lease import LeaderElector, LeaseRecord
from tests.daemons.toolkit.fakes import Clock, FakeLeases

NS, NAME = "gpucluster-burst", "gpucluster-taint-controller"


def elector(leases: FakeLeases, clock: Clock, identity: str, changes: list[bool] | None = None) -> LeaderElector:
    return LeaderElector(
        leases,
        NS,
        NAME,
        identity,
        lease_duration_s=15,
        renew_deadline_s=10,
        clock=clock,
        wall_clock=clock.utc,
        on_change=changes.append if changes is not None else None,
    )


def test_the_first_candidate_creates_and_holds_the_lease() -> None:
    leases, clock, changes = FakeLeases(), Clock(), list[bool]()
    a = elector(leases, clock, "a", changes)
    assert a.try_acquire_or_renew() is True
    assert a.is_leader()
    record = leases.leases[(NS, NAME)]
    assert (record.holder, record.lease_duration_s, record.transitions) == ("a", 15, 0)
    assert record.acquire_time == record.renew_time == clock.utc()
    assert changes == [True]


def test_the_leader_renews_and_a_second_candidate_stays_standby() -> None:
    leases, clock = FakeLeases(), Clock()
    a, b = elector(leases, clock, "a"), elector(leases, clock, "b")
    assert a.try_acquire_or_renew()
    for _ in range(20):  # 40 s of rounds every 2 s: far past one leaseDuration, but a keeps renewing
        clock.advance(2)
        assert a.try_acquire_or_renew()
        assert not b.try_acquire_or_renew()
    assert a.is_leader()
    assert not b.is_leader()
    record = leases.leases[(NS, NAME)]
    assert record.holder == "a"
    assert record.renew_time == clock.utc()
    assert record.transitions == 0
    assert b.holder == "a"


def test_a_standby_takes_over_only_after_the_lease_expires() -> None:
    leases, clock = FakeLeases(), Clock()
    a, b = elector(leases, clock, "a"), elector(leases, clock, "b")
    a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()  # b first sees the record now
    clock.advance(14.9)  # a has died; b's own clock decides expiry
    assert not b.try_acquire_or_renew()
    clock.advance(0.1)
    assert b.try_acquire_or_renew()
    record = leases.leases[(NS, NAME)]
    assert (record.holder, record.transitions, record.acquire_time) == ("b", 1, clock.utc())
    # a comes back: it is no longer the holder and must not act
    assert not a.is_leader()
    assert not a.try_acquire_or_renew()


def test_a_leader_that_cannot_renew_stops_leading_before_the_lease_can_expire() -> None:
    leases, clock, changes = FakeLeases(), Clock(), list[bool]()
    a = elector(leases, clock, "a", changes)
    a.try_acquire_or_renew()
    leases.fail = KubeError("apiserver unreachable")
    clock.advance(9.9)
    assert a.try_acquire_or_renew() is True  # still within renewDeadline
    clock.advance(0.1)
    assert a.try_acquire_or_renew() is False
    assert not a.is_leader()
    assert changes == [True, False]


def test_is_leader_lapses_by_the_clock_alone() -> None:
    """Losing the lease stops acting at once, even if no election round ran in between."""
    leases, clock = FakeLeases(), Clock()
    a = elector(leases, clock, "a")
    a.try_acquire_or_renew()
    clock.advance(10)
    assert not a.is_leader()


def test_two_candidates_racing_for_an_expired_lease_one_wins_409() -> None:
    leases, clock = FakeLeases(), Clock()
    leases.leases[(NS, NAME)] = LeaseRecord("dead", 15, clock.utc(), clock.utc(), 3, "7")
    leases._rv = 7
    a, b = elector(leases, clock, "a"), elector(leases, clock, "b")
    a.try_acquire_or_renew()
    b.try_acquire_or_renew()
    clock.advance(16)
    # b writes between a's read and a's write: a's resourceVersion is stale -> 409 -> a stays standby
    leases.before_write = b.try_acquire_or_renew
    assert a.try_acquire_or_renew() is False
    assert b.is_leader()
    assert not a.is_leader()
    assert leases.leases[(NS, NAME)].holder == "b"
    assert leases.leases[(NS, NAME)].transitions == 4


def test_two_candidates_racing_to_create_one_gets_already_exists() -> None:
    leases, clock = FakeLeases(), Clock()
    a, b = elector(leases, clock, "a"), elector(leases, clock, "b")
    leases.before_write = b.try_acquire_or_renew
    assert a.try_acquire_or_renew() is False
    assert b.is_leader()
    assert not a.is_leader()


def test_release_empties_the_holder_so_a_standby_takes_over_at_once() -> None:
    leases, clock = FakeLeases(), Clock()
    a, b = elector(leases, clock, "a"), elector(leases, clock, "b")
    a.try_acquire_or_renew()
    b.try_acquire_or_renew()
    assert a.release() is True
    assert not a.is_leader()
    assert leases.leases[(NS, NAME)].holder == ""
    clock.advance(2)  # no waiting for leaseDuration
    assert b.try_acquire_or_renew()


def test_release_by_a_standby_changes_nothing() -> None:
    leases, clock = FakeLeases(), Clock()
    a, b = elector(leases, clock, "a"), elector(leases, clock, "b")
    a.try_acquire_or_renew()
    b.try_acquire_or_renew()
    assert b.release() is False
    assert leases.leases[(NS, NAME)].holder == "a"


def test_an_empty_identity_is_refused() -> None:
    with pytest.raises(ValueError, match="identity"):
        elector(FakeLeases(), Clock(), "")
