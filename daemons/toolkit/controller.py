"""What every controller of ours is, whatever its work: a replica that reads and decides every ``interval``, writes
only while it leads, and tells an operator what it did in Events.

:class:`Replica` is what the runner hands every controller (``runner.Wiring``): its settings, whether this replica
leads now, who it is and whether it writes at all; the constructor is always ``Controller(settings, *inputs,
metrics, is_leader=..., identity=..., dry_run=...)``, what a controller makes of its settings goes in
``__post_init__``, and :meth:`Replica.run` is the loop the runner serves: one :meth:`~Replica.cycle` every
``interval`` until stopped, an unexpected error logged and the loop going on. Its inputs are the API alone
(:class:`OnTheApi`, the runner's ``on_the_api``) or Prometheus and the API (:class:`Querying`, ``querying``).

:class:`EventRecorder` writes a controller's Events: best effort, none in a dry run. :class:`Throttle` keeps a
problem that lasts from raising a Warning every cycle.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import KW_ONLY, dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from daemons.toolkit.events import event_body
from daemons.toolkit.kube import KubeError
from daemons.toolkit.prometheus import Querier
from daemons.toolkit.shutdown import every


class LoopSettings(Protocol):
    """Settings that say how often the controller runs a cycle (``interval``)."""

    @property
    def interval_seconds(self) -> float: ...


S = TypeVar("S", bound=LoopSettings)
#: The controller's API client and its metrics.
A = TypeVar("A")
M = TypeVar("M")


@dataclass(eq=False, repr=False)
class Replica(Generic[S]):
    """One replica of a controller: its settings and what the runner says of this replica.

    A subclass names its logger (``logger``), adds its inputs and metrics as fields, makes its policy of the
    settings in ``__post_init__`` and implements :meth:`cycle`.
    """

    settings: S
    _: KW_ONLY
    #: Whether this replica leads now (its Lease; always True in a dry run, which takes none).
    is_leader: Callable[[], bool]
    #: Its leader election identity, and the ``reportingInstance`` of its Events.
    identity: str
    #: Write nothing; log what would be written.
    dry_run: bool = False

    #: Where :meth:`run` logs a cycle that failed.
    logger: ClassVar[logging.Logger]
    #: What one pass of the loop is called in that line (``<step> failed``).
    step: ClassVar[str] = "cycle"

    def __post_init__(self) -> None:
        """What the controller makes of its settings once built (nothing here)."""

    def cycle(self) -> object:
        """One pass: read, decide, and write while leading; what ``--once`` prints a summary of."""
        raise NotImplementedError

    def run(self, stop: threading.Event) -> None:
        """A cycle every ``interval`` until ``stop`` is set (:func:`~daemons.toolkit.shutdown.every`)."""
        every(self.cycle, self.settings.interval_seconds, stop, self.logger, self.step)

    def recorder(
        self,
        create: Callable[[dict[str, Any]], object],
        component: str,
        *,
        clock: Callable[[], float],
        warn_every: float | None = None,
    ) -> EventRecorder:
        """This replica's :class:`EventRecorder` (its identity, its dry run, its logger) on ``create``."""
        return EventRecorder(
            create,
            component=component,
            identity=self.identity,
            log=self.logger,
            clock=clock,
            dry_run=self.dry_run,
            warn_every=warn_every,
        )


@dataclass(eq=False, repr=False)
class OnTheApi(Replica[S], Generic[S, A, M]):
    """A controller that reads and writes through the API only:
    ``Controller(settings, api, metrics, *, is_leader, identity, dry_run=False, clock=time.time, timer=...)``."""

    api: A
    metrics: M
    _: KW_ONLY
    #: Unix seconds: what decisions are made with and Events are stamped with.
    clock: Callable[[], float] = time.time
    #: Measures durations (a cycle's, a decision's); monotonic, unlike the clock.
    timer: Callable[[], float] = time.perf_counter


@dataclass(eq=False, repr=False)
class Querying(Replica[S], Generic[S, A, M]):
    """A controller that queries Prometheus and acts on the API:
    ``Controller(settings, querier, api, metrics, *, is_leader, identity, dry_run=False, <its clocks>)``."""

    querier: Querier
    api: A
    metrics: M


class Throttle:
    """At most once per ``interval_s`` for each key (a kind of problem, an object): what keeps a problem that lasts
    from raising a Warning every cycle."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._last: dict[Hashable, float] = {}

    def due(self, key: Hashable, now: float) -> bool:
        """Whether ``key`` may go out at ``now``; if so, the interval starts again from ``now``."""
        last = self._last.get(key)
        if last is not None and now - last < self.interval_s:
            return False
        self._last[key] = now
        return True


@dataclass(eq=False)
class EventRecorder:
    """A controller's Events (``kubectl describe`` shows them), written through ``create`` (its client's
    ``create_event``) as ``component`` and its replica's ``identity``.

    Best effort: a failure is logged (``cannot record an event``), never raised; nothing is written in a dry run.
    With ``warn_every``, a Warning about one object for one reason goes out at most that often.
    """

    create: Callable[[dict[str, Any]], object]
    _: KW_ONLY
    #: ``source.component`` and ``reportingComponent`` (the controller's field manager).
    component: str
    #: ``reportingInstance``: the replica's leader election identity.
    identity: str
    log: logging.Logger
    #: Unix seconds, what each Event is stamped with.
    clock: Callable[[], float] = time.time
    dry_run: bool = False
    warn_every: float | None = None

    def __post_init__(self) -> None:
        self._warnings = Throttle(self.warn_every) if self.warn_every is not None else None

    def record(self, involved: Mapping[str, Any], namespace: str, event_type: str, reason: str, message: str) -> None:
        """An Event about ``involved`` (apiVersion, kind, name, and uid / namespace where known) in ``namespace``,
        stamped with the clock's time."""
        if self.dry_run:
            return
        now = self.clock()
        if self._warnings is not None and event_type == "Warning":
            about = f"{involved.get('namespace') or ''}/{involved['name']}"
            if not self._warnings.due((reason, about), now):
                return
        body = event_body(
            involved,
            namespace,
            event_type=event_type,
            reason=reason,
            message=message,
            now=now,
            component=self.component,
            identity=self.identity,
        )
        try:
            self.create(body)
        except KubeError as exc:
            self.log.warning("cannot record an event", extra={"reason": reason, "error": str(exc)})
