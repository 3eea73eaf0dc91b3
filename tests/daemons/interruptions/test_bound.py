from __future__ import annotations

from daemons.interruptions.bound import decide
from daemons.interruptions.classify import Cause

NOW = 100_000.0


def times(n: int, step: float = 60.0) -> list[tuple[float, Cause]]:
    return [(NOW - step * i, Cause.PROGRAM) for i in range(n)]


def test_more_than_the_bound_stops() -> None:
    d = decide(times(7), NOW, 6)
    assert d.stop
    assert d.restarts == 7
    assert d.bound == 6
    assert d.causes_text() == "7 program"


def test_at_the_bound_does_not_stop() -> None:
    d = decide(times(6), NOW, 6)
    assert not d.stop
    assert d.restarts == 6


def test_restarts_older_than_an_hour_do_not_count() -> None:
    old = [(NOW - 3600.0 - 1, Cause.PROGRAM)] * 10
    d = decide([*old, *times(2)], NOW, 6)
    assert not d.stop
    assert d.restarts == 2


def test_an_inactive_workload_is_not_stopped_again() -> None:
    assert not decide(times(9), NOW, 6, active=False).stop


def test_after_a_resume_only_later_restarts_count() -> None:
    assert not decide(times(9), NOW, 6, since=NOW - 150).stop  # restarts at NOW, NOW-60, NOW-120 only
    assert decide(times(9), NOW, 2, since=NOW - 150).stop


def test_bound_zero_stops_at_the_first_restart() -> None:
    assert decide(times(1), NOW, 0).stop
    assert not decide([], NOW, 0).stop


def test_causes_are_counted_apart() -> None:
    d = decide([(NOW, Cause.NODE), (NOW - 1, Cause.PROGRAM), (NOW - 2, Cause.PROGRAM)], NOW, 1)
    assert d.causes == {"node": 1, "program": 2}
    assert d.causes_text() == "2 program, 1 node"
