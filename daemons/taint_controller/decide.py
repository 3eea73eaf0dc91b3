"""The hysteresis rule that decides whether the burst taint goes on, comes off, or stays as it is.

Pure: no I/O and no clock of its own; the caller passes ``now`` (seconds on any monotonic scale) with each
observation, so tests drive time by hand.

Every input is a set of **rows**: the whole cluster (the row ``""``, :data:`ALL`) and, with GPU types configured,
one row per GPU type (``"H100"``, ``"L40S"``). A plain number is the whole cluster's row alone, which is how a
stack with one GPU type decides. A row missing from an answer that has others is zero (no node of that type, or
nothing of it pending). Each row keeps its own two timers: since when it has held at or above highMark, and since
when it has held below lowMark with inference of its type Pending.

Rules, in order:

1. Headroom unknown (query failed or empty) -> hold, and every timer restarts: continuity cannot be proven
   across a gap, and changing nothing is the safe choice (fail-static).
2. Some row below lowMark with pending inference > 0 -> the "remove" condition (Pending inference that its GPU
   type has no room for: an idle H100 is no room for a replica that must run on an L40S). Once one row has held it
   continuously for ``holdRemove`` and the taint is present -> remove; the row that held longest decides. Unknown
   pending counts as no pending: the taint never comes off on one signal alone. With nodes reserved for a waiting
   gang (the make-before-break check) the hold is skipped: the Pending replicas are the ones it moved off the
   reserved GPUs on purpose, their replacements can only run on rented GPUs, and the gang waits for them; the hold
   guards against noise, which a reservation is not. Unknown reservations count as none (the hold applies).
3. No row in the remove condition, and headroom at or above highMark where the burst replicas would come home
   -> the "add" condition. Where they come home: the rows of the GPU types that have inference pods on the virtual
   node (``burst``), every one of them at or above highMark for ``holdAdd``. With none out, any row (in effect the
   whole cluster's, which is at least any type's) held at or above highMark for ``holdAdd``. With ``burst``
   unknown, every row. Once that holds and the taint is absent -> add.
4. Anything else (between the marks, or low headroom with nothing pending) -> hold.

lowMark < highMark, so a row is never in both conditions at once; each observation that breaks a row's condition
restarts that row's timer, so headroom that oscillates around one mark never completes a hold and the taint does
not flap. A remove condition anywhere blocks the add: the taint never goes on while some Pending inference has
nowhere in-cluster to go.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

#: The whole cluster's row (every GPU type together).
ALL = ""

#: An input: one number (the whole cluster) or rows by GPU type (``ALL`` for the whole cluster).
Rows = float | Mapping[str, float]


class Action(StrEnum):
    ADD = "add"
    REMOVE = "remove"
    HOLD = "hold"


@dataclass(frozen=True)
class Decision:
    action: Action
    #: One short machine-friendly word for logs and Events.
    reason: str
    #: A sentence for people; it names the GPU type that decided when there are types.
    detail: str
    #: The row that decided (``ALL``: the whole cluster); None when no row did (headroom unknown).
    gpu_type: str | None = None


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


@dataclass(frozen=True)
class _Observation:
    """One tick's inputs as rows, for the two halves of the rule."""

    now: float
    rows: frozenset[str]
    free: Mapping[str, float]
    waiting: Mapping[str, float]
    pending_unknown: bool
    #: Inference pods on the virtual node by row; None: unknown.
    out: Mapping[str, float] | None
    taint_present: bool
    reserved: float | None

    def who(self, row: str) -> str:
        """How a detail names a row: its GPU type, or the whole cluster when there are types to tell it from."""
        if row != ALL:
            return f"{row}: "
        return "all GPU types: " if any(r != ALL for r in self.rows) else ""


def rows_of(value: Rows) -> dict[str, float]:
    """An input as rows: a plain number is the whole cluster's row."""
    if isinstance(value, Mapping):
        return {str(k): float(v) for k, v in value.items()}
    return {ALL: float(value)}


class Decider:
    """Remembers, per row, since when each condition has held; ``decide`` is the only way in."""

    def __init__(self, thresholds: Thresholds) -> None:
        self.thresholds = thresholds
        self._add_since: dict[str, float] = {}
        self._remove_since: dict[str, float] = {}

    @property
    def add_since(self) -> float | None:
        """When a row's add condition started holding without a break, the earliest (None: no row holds it)."""
        return min(self._add_since.values(), default=None)

    @property
    def remove_since(self) -> float | None:
        """When a row's remove condition started holding without a break, the earliest (None: none holds it)."""
        return min(self._remove_since.values(), default=None)

    @property
    def add_since_by_type(self) -> dict[str, float]:
        return dict(self._add_since)

    @property
    def remove_since_by_type(self) -> dict[str, float]:
        return dict(self._remove_since)

    def reset(self) -> None:
        """Forget every timer (used after a transition so the next one needs a full hold again)."""
        self._add_since.clear()
        self._remove_since.clear()

    def decide(
        self,
        now: float,
        headroom: Rows | None,
        pending: Rows | None,
        taint_present: bool,
        *,
        reserved: float | None = None,
        burst: Rows | None = None,
    ) -> Decision:
        t = self.thresholds
        if headroom is None:
            self.reset()
            return Decision(Action.HOLD, "headroom-unknown", "in-cluster GPU headroom is unknown; changing nothing")
        free = rows_of(headroom)
        waiting = rows_of(pending) if pending is not None else {}
        out = rows_of(burst) if burst is not None else None
        rows = frozenset(free) | set(waiting) | set(out or {})

        for gone in set(self._add_since) - rows:
            del self._add_since[gone]
        for gone in set(self._remove_since) - rows:
            del self._remove_since[gone]
        low_rows: list[str] = []
        for row in rows:
            h, p = free.get(row, 0.0), waiting.get(row, 0.0)
            if h >= t.high_mark:
                self._add_since.setdefault(row, now)
                self._remove_since.pop(row, None)
                continue
            self._add_since.pop(row, None)
            if h < t.low_mark and p > 0:
                self._remove_since.setdefault(row, now)
                low_rows.append(row)
            else:
                self._remove_since.pop(row, None)

        obs = _Observation(now, rows, free, waiting, pending is None, out, taint_present, reserved)
        return self._remove(obs, low_rows) if low_rows else self._add(obs)

    def _remove(self, obs: _Observation, low_rows: list[str]) -> Decision:
        t = self.thresholds
        now, free, waiting, reserved = obs.now, obs.free, obs.waiting, obs.reserved
        # The row that has held longest decides; a GPU type before the whole cluster, then by name.
        row = min(low_rows, key=lambda r: (self._remove_since[r], r == ALL, r))
        h, p = free.get(row, 0.0), waiting[row]
        held = now - self._remove_since[row]
        where = obs.who(row)
        if not obs.taint_present:
            return Decision(
                Action.HOLD,
                "taint-absent",
                f"{where}headroom {h:g} < lowMark {t.low_mark} with {p:g} pending; taint already off",
                row,
            )
        if reserved is not None and reserved > 0:
            return Decision(
                Action.REMOVE,
                "room-reserved",
                f"{where}headroom {h:g} < lowMark {t.low_mark} with {p:g} inference pods pending and "
                f"{reserved:g} nodes reserved for a waiting gang: its moved replicas need rented GPUs now",
                row,
            )
        if held >= t.hold_remove_s:
            return Decision(
                Action.REMOVE,
                "headroom-low",
                f"{where}headroom {h:g} < lowMark {t.low_mark} with {p:g} inference pods pending "
                f"for {held:.0f}s (holdRemove {t.hold_remove_s:.0f}s)",
                row,
            )
        return Decision(
            Action.HOLD,
            "holding-remove",
            f"{where}headroom {h:g} < lowMark {t.low_mark} with {p:g} pending for {held:.0f}s "
            f"of {t.hold_remove_s:.0f}s",
            row,
        )

    def _add(self, obs: _Observation) -> Decision:
        t = self.thresholds
        now, rows, free, out = obs.now, obs.rows, obs.free, obs.out
        home: list[str] | None  # None: any row will do (nothing is out)
        if out is None:
            home = sorted(rows)
        elif any(v > 0 for v in out.values()):
            home = sorted(r for r, v in out.items() if v > 0)
        else:
            home = None
        homes = "" if home is None or home == [ALL] else f" (where burst replicas come home: {_names(home)})"

        if home is None:
            high = [r for r in rows if r in self._add_since]
            # The row high for longest (the whole cluster first) is the one to wait for.
            ready = min(high, key=lambda r: (self._add_since[r], r != ALL, r)) if high else None
            # Otherwise the row nearest highMark says why not.
            nearest = max(rows, key=lambda r: (free.get(r, 0.0), r == ALL, r)) if rows else ALL
        else:
            blocking = [r for r in home if r not in self._add_since]
            # Every home row high: the one that became high last is the one to wait for (a GPU type on a tie).
            ready = None if blocking else max(home, key=lambda r: (self._add_since[r], r != ALL, r))
            nearest = min(blocking, key=lambda r: (free.get(r, 0.0), r == ALL, r)) if blocking else ALL

        if ready is not None:
            h = free.get(ready, 0.0)
            held = now - self._add_since[ready]
            where = obs.who(ready)
            if obs.taint_present:
                return Decision(
                    Action.HOLD,
                    "taint-present",
                    f"{where}headroom {h:g} >= highMark {t.high_mark}{homes}; taint already on",
                    ready,
                )
            if held >= t.hold_add_s:
                return Decision(
                    Action.ADD,
                    "headroom-high",
                    f"{where}headroom {h:g} >= highMark {t.high_mark} for {held:.0f}s "
                    f"(holdAdd {t.hold_add_s:.0f}s){homes}",
                    ready,
                )
            return Decision(
                Action.HOLD,
                "holding-add",
                f"{where}headroom {h:g} >= highMark {t.high_mark} for {held:.0f}s of {t.hold_add_s:.0f}s{homes}",
                ready,
            )

        h = free.get(nearest, 0.0)
        where = obs.who(nearest)
        if h < t.low_mark:
            why = "pending count unknown" if obs.pending_unknown else "no inference pending"
            return Decision(
                Action.HOLD,
                "nothing-pending",
                f"{where}headroom {h:g} < lowMark {t.low_mark} but {why}{homes}",
                nearest,
            )
        return Decision(
            Action.HOLD,
            "between-marks",
            f"{where}headroom {h:g} between lowMark {t.low_mark} and highMark {t.high_mark}{homes}",
            nearest,
        )


def _names(rows: list[str]) -> str:
    return ", ".join(r if r != ALL else "all GPU types" for r in rows)
