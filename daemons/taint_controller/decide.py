"""The hysteresis rule that decides whether the burst taint goes on, comes off, or stays as it is.

Pure: no I/O and no clock of its own; the caller passes ``now`` (seconds on any monotonic scale) with each
observation, so tests drive time by hand.

Rules, in order:

1. Headroom unknown (query failed or empty) -> hold, and both hold timers restart: continuity cannot be
   proven across a gap, and changing nothing is the safe choice (fail-static).
2. Headroom >= highMark -> the "add" condition. Once it has held continuously for ``holdAdd`` and the taint is
   absent -> add.
3. Headroom < lowMark and pending inference > 0 -> the "remove" condition. Once it has held continuously for
   ``holdRemove`` and the taint is present -> remove. Unknown pending counts as no pending: the taint never
   comes off on one signal alone. With nodes reserved for a waiting gang (the make-before-break check) the hold
   is skipped: the Pending replicas are the ones it moved off the reserved GPUs on purpose, their replacements
   can only run on rented GPUs, and the gang waits for them; the hold guards against noise, which a reservation
   is not. Unknown reservations count as none (the hold applies).
4. Anything else (between the marks, or low headroom with nothing pending) -> hold; both timers restart.

lowMark < highMark, so the two conditions never hold at once; each observation that breaks a condition restarts
its timer, so headroom that oscillates around one mark never completes a hold and the taint does not flap.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Action(StrEnum):
    ADD = "add"
    REMOVE = "remove"
    HOLD = "hold"


@dataclass(frozen=True)
class Decision:
    action: Action
    #: One short machine-friendly word for logs and Events.
    reason: str
    #: A sentence for people.
    detail: str


@dataclass(frozen=True)
class Thresholds:
    high_mark: int
    low_mark: int
    hold_add_s: float
    hold_remove_s: float

    def __post_init__(self) -> None:
        if not 0 <= self.low_mark < self.high_mark:
            raise ValueError(f"need 0 <= low_mark ({self.low_mark}) < high_mark ({self.high_mark})")
        if self.hold_add_s < 0 or self.hold_remove_s < 0:
            raise ValueError("hold times must not be negative")


class Decider:
    """Remembers since when each condition has held; ``decide`` is the only way in."""

    def __init__(self, thresholds: Thresholds) -> None:
        self.thresholds = thresholds
        self._add_since: float | None = None
        self._remove_since: float | None = None

    @property
    def add_since(self) -> float | None:
        """When the add condition started holding without a break (None: not holding now)."""
        return self._add_since

    @property
    def remove_since(self) -> float | None:
        return self._remove_since

    def reset(self) -> None:
        """Forget both timers (used after a transition so the next one needs a full hold again)."""
        self._add_since = None
        self._remove_since = None

    def decide(
        self,
        now: float,
        headroom: float | None,
        pending: float | None,
        taint_present: bool,
        reserved: float | None = None,
    ) -> Decision:
        t = self.thresholds
        if headroom is None:
            self.reset()
            return Decision(Action.HOLD, "headroom-unknown", "in-cluster GPU headroom is unknown; changing nothing")

        if headroom >= t.high_mark:
            self._remove_since = None
            if self._add_since is None:
                self._add_since = now
            held = now - self._add_since
            if taint_present:
                return Decision(
                    Action.HOLD, "taint-present", f"headroom {headroom:g} >= highMark {t.high_mark}; taint already on"
                )
            if held >= t.hold_add_s:
                return Decision(
                    Action.ADD,
                    "headroom-high",
                    f"headroom {headroom:g} >= highMark {t.high_mark} for {held:.0f}s (holdAdd {t.hold_add_s:.0f}s)",
                )
            return Decision(
                Action.HOLD,
                "holding-add",
                f"headroom {headroom:g} >= highMark {t.high_mark} for {held:.0f}s of {t.hold_add_s:.0f}s",
            )

        self._add_since = None
        if headroom < t.low_mark and pending is not None and pending > 0:
            if self._remove_since is None:
                self._remove_since = now
            held = now - self._remove_since
            if not taint_present:
                return Decision(
                    Action.HOLD,
                    "taint-absent",
                    f"headroom {headroom:g} < lowMark {t.low_mark} with {pending:g} pending; taint already off",
                )
            if reserved is not None and reserved > 0:
                return Decision(
                    Action.REMOVE,
                    "room-reserved",
                    f"headroom {headroom:g} < lowMark {t.low_mark} with {pending:g} inference pods pending and "
                    f"{reserved:g} nodes reserved for a waiting gang: its moved replicas need rented GPUs now",
                )
            if held >= t.hold_remove_s:
                return Decision(
                    Action.REMOVE,
                    "headroom-low",
                    f"headroom {headroom:g} < lowMark {t.low_mark} with {pending:g} inference pods pending "
                    f"for {held:.0f}s (holdRemove {t.hold_remove_s:.0f}s)",
                )
            return Decision(
                Action.HOLD,
                "holding-remove",
                f"headroom {headroom:g} < lowMark {t.low_mark} with {pending:g} pending for {held:.0f}s "
                f"of {t.hold_remove_s:.0f}s",
            )

        self._remove_since = None
        if headroom < t.low_mark:
            why = "pending count unknown" if pending is None else "no inference pending"
            return Decision(Action.HOLD, "nothing-pending", f"headroom {headroom:g} < lowMark {t.low_mark} but {why}")
        return Decision(
            Action.HOLD,
            "between-marks",
            f"headroom {headroom:g} between lowMark {t.low_mark} and highMark {t.high_mark}",
        )
