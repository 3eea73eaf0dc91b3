"""contract/times.py: the one reader (and writer) of RFC 3339 times for every daemon and the contract."""

from __future__ import annotations

import pytest

from contract.times import unix_seconds


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("2026-01-01T00:00:00Z", 1767225600.0),
        ("2026-01-01T01:00:00+01:00", 1767225600.0),
        ("2026-01-01T00:00:00.250Z", 1767225600.25),
        (" 2026-01-01T00:00:00Z\n", 1767225600.0),
    ],
)
def test_a_time_with_a_zone_is_its_instant(text: str, seconds: float) -> None:
    assert unix_seconds(text) == seconds


@pytest.mark.parametrize("text", [None, "", "  ", 1767225600, "yesterday", "2026-13-01T00:00:00Z"])
def test_absent_or_unreadable_is_unknown(text: object) -> None:
    assert unix_seconds(text) is None


def test_a_time_without_a_zone_names_no_instant() -> None:
    """Read as this machine's local time, it would move with the host's zone: it is unknown instead."""
    assert unix_seconds("2026-01-01T00:00:00") is None
