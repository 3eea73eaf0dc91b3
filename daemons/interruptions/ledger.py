"""Per job: the list of interruptions (time, cause, time to running again, work lost), rebuilt from API objects.

The counts are the API server's own and exact: JobSet ``status.restarts`` and ``status.restartsCountTowardsMax``
(program restarts; the difference is the node's, less the hangs: a restart that ended the attempt the stall
detector's record names), Kueue's ``status.schedulingStats.evictions`` per reason (preemption, a node's failure,
requeue). One node failure may show twice: Kueue evicts a topology-placed gang's Workload (``NodeFailures``) while
JobSet restarts the gang for the same failed pods; the two, within :data:`SAME_NODE_FAILURE_S` of each other, are
one interruption (:func:`pair_node_failures`). The times come from the objects too (JobSet restart Events, the
Workload's Evicted condition) and from the daemon's own record, kept on the JobSet in the annotation
``gpucluster.io/interruptions`` (compact JSON, at most ``max_entries`` interruptions, written by the leader only). A
daemon killed with -9 loses nothing: the next cycle compares the counters in status with those in the record, and
every restart counted in status but missing from the record is added with the cause from the counter that moved
and the time from its Event if the API server still keeps it, else the time it was noticed, marked
``timeEstimated``.

Work lost by an interruption at ``t`` = ``t`` - the last checkpoint the job reported before ``t``, bounded below by
the time the attempt started running; when the only checkpoint reported is after ``t`` (the daemon was away), the
attempt's running time, at most one checkpoint interval, marked estimated the same way.

Pure: no I/O, the clock passed in.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from daemons.interruptions.classify import Cause, eviction_cause, pod_cause, pod_detail, restart_causes
from daemons.interruptions.model import NODE_RESTART_REASON, PROGRAM_RESTART_REASON, JobView

#: A Kueue ``NodeFailures`` eviction and a JobSet node restart this close together are one node failure. Both react
#: to the same failed node within seconds (measured 0.25 s apart on the simulated cluster, Kueue 0.19.2); a minute
#: leaves room for a slow controller while two real failures of one gang rarely come that close.
SAME_NODE_FAILURE_S = 60.0
#: Longest detail text kept per interruption.
MAX_DETAIL = 120
#: Longest record (the annotation's value); the oldest interruptions go first beyond it.
MAX_RECORD_BYTES = 32_768
VERSION = 1


@dataclass(frozen=True)
class Interruption:
    at: float
    cause: Cause
    #: True: an in-place restart (JobSet); False: Kueue evicted the Workload.
    restart: bool
    #: When every pod of the gang was Running again (None: not yet).
    recovered_at: float | None = None
    work_lost_s: float = 0.0
    #: The time is when the daemon noticed it, not when it happened (its Event was gone).
    time_estimated: bool = False
    detail: str = ""
    #: A Kueue eviction that JobSet also restarted the gang for (one node failure, counted once).
    restarted: bool = False

    @property
    def recovery_s(self) -> float | None:
        return None if self.recovered_at is None else max(0.0, self.recovered_at - self.at)


@dataclass(frozen=True)
class Record:
    """The daemon's record on one JobSet: the counters it has accounted for, and the interruptions (newest last)."""

    uid: str
    restarts: int = 0
    towards_max: int = 0
    evictions: Mapping[str, int] = field(default_factory=dict)
    #: First time the Workload was seen admitted, and every pod first seen Running.
    first_admitted: float | None = None
    first_running: float | None = None
    #: When the restart bound stopped the job, and the time restarts count from after it was resumed.
    stopped_at: float | None = None
    bound_from: float | None = None
    items: tuple[Interruption, ...] = ()
    #: In-place restarts that were the stall detector's (counted by JobSet with the node's).
    hangs: int = 0
    #: Node restarts that were one failure with a Kueue ``NodeFailures`` eviction (counted by both).
    paired: int = 0


def counts(job: JobView, hangs: int = 0, paired: int = 0) -> dict[Cause, int]:
    """Interruptions by cause, exact, from the JobSet's and the Workload's counters and the record's hangs and
    paired node failures (each counted once, though both JobSet and Kueue count it)."""
    out = dict.fromkeys(Cause, 0)
    out[Cause.PROGRAM] = max(0, job.restarts_towards_max)
    node = max(0, job.restarts - job.restarts_towards_max)
    out[Cause.HANG] = min(node, max(0, hangs))
    out[Cause.NODE] = node - out[Cause.HANG]
    if job.workload is not None:
        for reason, n in job.workload.evictions.items():
            out[eviction_cause(reason)] += max(0, n)
    out[Cause.NODE] = max(0, out[Cause.NODE] - max(0, paired))
    return out


# ---------------------------------------------------------------- the annotation


def _num(value: Any, what: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{what} is not a number")
    return float(value)


def parse_record(text: str, uid: str) -> tuple[Record, str]:
    """The record in the annotation, and a problem ('' when none). Unreadable, or another JobSet's (a JobSet
    recreated under the same name has a new uid): a fresh record, so every counted restart is accounted again."""
    if not text:
        return Record(uid), ""
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        if data.get("uid") != uid:
            return Record(uid), "the record is another JobSet's (uid differs); starting afresh"
        items = []
        for i, raw in enumerate(data.get("items") or []):
            if not isinstance(raw, dict):
                raise ValueError(f"items[{i}] is not an object")
            items.append(
                Interruption(
                    at=float(raw["at"]),
                    cause=Cause(raw["cause"]),
                    restart=bool(raw.get("restart", True)),
                    recovered_at=_num(raw.get("recoveredAt"), f"items[{i}].recoveredAt"),
                    work_lost_s=float(raw.get("workLost", 0.0)),
                    time_estimated=bool(raw.get("timeEstimated", False)),
                    detail=str(raw.get("detail", ""))[:MAX_DETAIL],
                    restarted=bool(raw.get("restarted", False)),
                )
            )
        ev = data.get("evictions") or {}
        if not isinstance(ev, dict):
            raise ValueError("evictions is not an object")
        return (
            Record(
                uid=uid,
                restarts=int(data.get("restarts", 0)),
                towards_max=int(data.get("towardsMax", 0)),
                hangs=int(data.get("hangs", 0)),
                paired=int(data.get("paired", 0)),
                evictions={str(k): int(v) for k, v in ev.items()},
                first_admitted=_num(data.get("firstAdmitted"), "firstAdmitted"),
                first_running=_num(data.get("firstRunning"), "firstRunning"),
                stopped_at=_num(data.get("stoppedAt"), "stoppedAt"),
                bound_from=_num(data.get("boundFrom"), "boundFrom"),
                items=tuple(items),
            ),
            "",
        )
    except (ValueError, KeyError, TypeError) as exc:
        return Record(uid), f"the record cannot be read ({str(exc)[:80]}); starting afresh"


def _item_json(i: Interruption) -> dict[str, Any]:
    out: dict[str, Any] = {"at": round(i.at, 3), "cause": i.cause.value}
    if not i.restart:
        out["restart"] = False
    if i.recovered_at is not None:
        out["recoveredAt"] = round(i.recovered_at, 3)
    out["workLost"] = round(i.work_lost_s, 3)
    if i.time_estimated:
        out["timeEstimated"] = True
    if i.detail:
        out["detail"] = i.detail[:MAX_DETAIL]
    if i.restarted:
        out["restarted"] = True
    return out


def render(record: Record, max_entries: int) -> str:
    """The annotation's value: compact JSON, the newest ``max_entries`` interruptions, at most
    :data:`MAX_RECORD_BYTES` (the counters stay exact however many interruptions are dropped)."""
    head: dict[str, Any] = {"v": VERSION, "uid": record.uid, "restarts": record.restarts}
    head["towardsMax"] = record.towards_max
    if record.hangs:
        head["hangs"] = record.hangs
    if record.paired:
        head["paired"] = record.paired
    if record.evictions:
        head["evictions"] = dict(sorted(record.evictions.items()))
    for key, value in (
        ("firstAdmitted", record.first_admitted),
        ("firstRunning", record.first_running),
        ("stoppedAt", record.stopped_at),
        ("boundFrom", record.bound_from),
    ):
        if value is not None:
            head[key] = round(value, 3)
    items = [_item_json(i) for i in record.items[-max_entries:]]
    while True:
        text = json.dumps({**head, "items": items}, separators=(",", ":"))
        if len(text) <= MAX_RECORD_BYTES or not items:
            return text
        items = items[1:]


# ---------------------------------------------------------------- rebuilding


def _work_lost(
    at: float, attempt_start: float, checkpoint_at: float | None, interval: float | None
) -> tuple[float, bool]:
    """Work lost at ``at`` and whether it is estimated (see the module docstring)."""
    if checkpoint_at is not None and checkpoint_at <= at:
        return max(0.0, at - max(checkpoint_at, attempt_start)), False
    ran = max(0.0, at - attempt_start)
    if checkpoint_at is not None and interval:
        return min(ran, interval), True
    return ran, checkpoint_at is not None


def _new(
    record: Record,
    job: JobView,
    now: float,
    cause: Cause,
    k: int,
    *,
    restart: bool,
    known_at: float | None,
) -> list[Interruption]:
    """``k`` new interruptions of one cause: the newest at ``known_at`` when that is newer than the last one of its
    cause in the record, the others (and all of them without it) at ``now``, marked ``timeEstimated``."""
    if k <= 0:
        return []
    last_same = max((i.at for i in record.items if i.cause == cause), default=None)
    exact = known_at is not None and (last_same is None or known_at > last_same)
    times: list[tuple[float, bool]] = [(now, True)] * k
    if exact and known_at is not None:
        times = [(known_at, True)] * (k - 1) + [(known_at, False)]
    details = [pod_detail(p, n) for p, n in job.failures if pod_cause(p, n) == cause]
    out = []
    attempt_start = max(
        [t for t in (record.first_running, *(i.recovered_at for i in record.items)) if t is not None],
        default=job.created_at,
    )
    for n, (noticed, estimated) in enumerate(times):
        at = noticed
        last_any = max((i.at for i in record.items), default=None)
        if (
            estimated
            and job.all_running_since is not None
            and job.all_running_since < at
            and (last_any is None or job.all_running_since > last_any)
        ):
            at = job.all_running_since  # running again already since a restart noticed late: it failed before that
        lost, lost_estimated = _work_lost(at, min(attempt_start, at), job.checkpoint_at, job.checkpoint_interval_s)
        out.append(
            Interruption(
                at=at,
                cause=cause,
                restart=restart,
                work_lost_s=lost,
                time_estimated=estimated or lost_estimated,
                detail="; ".join(details)[:MAX_DETAIL] if n == len(times) - 1 else "",
            )
        )
    return out


def pair_node_failures(items: list[Interruption]) -> tuple[list[Interruption], int]:
    """Items (sorted by time) with each Kueue ``NodeFailures`` eviction and the JobSet node restart within
    :data:`SAME_NODE_FAILURE_S` of it made one interruption, and how many were paired.

    The one kept is the eviction (the gang lost its quota: not an in-place restart), at the earlier of the two times,
    with the larger work lost and both details, marked ``restarted``; a marked eviction pairs with nothing more, so a
    second failure soon after is still counted. A node restart pairs with the nearest unmarked eviction only.
    """
    out = list(items)
    paired = 0
    for e in [i for i in out if i.cause == Cause.NODE and not i.restart and not i.restarted]:
        near = [r for r in out if r.cause == Cause.NODE and r.restart and abs(r.at - e.at) <= SAME_NODE_FAILURE_S]
        if not near:
            continue
        r = min(near, key=lambda x: abs(x.at - e.at))
        detail = "; ".join(d for d in (e.detail, r.detail) if d)[:MAX_DETAIL]
        first = e if e.at <= r.at else r
        merged = replace(
            e,
            at=first.at,
            work_lost_s=max(e.work_lost_s, r.work_lost_s),
            time_estimated=first.time_estimated,
            recovered_at=e.recovered_at if e.recovered_at is not None else r.recovered_at,
            detail=detail,
            restarted=True,
        )
        out = [merged if i is e else i for i in out if i is not r]
        paired += 1
    return sorted(out, key=lambda i: i.at), paired


def reconcile(record: Record, job: JobView, now: float) -> Record:
    """The record brought up to what the objects say now: new restarts and evictions added, open interruptions
    closed when every pod of the gang is Running again since they happened."""
    if record.uid != job.uid:
        record = Record(job.uid)
    node_new, program_new = restart_causes(
        (record.restarts, record.towards_max), (job.restarts, job.restarts_towards_max)
    )
    last_event = dict(job.restart_events)
    hang_new = 0
    stall = job.stall_restart
    if node_new > 0 and stall is not None and record.restarts <= stall[0] < job.restarts:
        hang_new, node_new = 1, node_new - 1  # the detector's eviction ended that attempt
    added = _new(record, job, now, Cause.HANG, hang_new, restart=True, known_at=stall[1] if stall else None)
    added += _new(record, job, now, Cause.NODE, node_new, restart=True, known_at=last_event.get(NODE_RESTART_REASON))
    added += _new(
        record, job, now, Cause.PROGRAM, program_new, restart=True, known_at=last_event.get(PROGRAM_RESTART_REASON)
    )
    evictions = dict(record.evictions)
    wl = job.workload
    if wl is not None:
        for reason, n in sorted(wl.evictions.items()):
            k = n - evictions.get(reason, 0)
            known = wl.evicted_at if wl.evicted_reason == reason else None
            added += _new(record, job, now, eviction_cause(reason), k, restart=False, known_at=known)
            evictions[reason] = max(n, evictions.get(reason, 0))
    items, paired = pair_node_failures(sorted((*record.items, *added), key=lambda i: i.at))
    if job.all_running_since is not None:
        items = [
            replace(i, recovered_at=job.all_running_since)
            if i.recovered_at is None and job.all_running_since >= i.at
            else i
            for i in items
        ]
    first_admitted = record.first_admitted
    if wl is not None and wl.admitted_at is not None:
        first_admitted = wl.admitted_at if first_admitted is None else min(first_admitted, wl.admitted_at)
    first_running = record.first_running
    if first_running is None and job.all_running_since is not None:
        first_running = job.all_running_since
    bound_from = record.bound_from
    stopped_at = record.stopped_at
    if stopped_at is not None and wl is not None and wl.active:
        # Resumed by an operator: restarts before now no longer count toward the bound.
        stopped_at, bound_from = None, now
    return Record(
        uid=job.uid,
        restarts=max(record.restarts, job.restarts),
        towards_max=max(record.towards_max, job.restarts_towards_max),
        hangs=record.hangs + hang_new,
        paired=record.paired + paired,
        evictions=evictions,
        first_admitted=first_admitted,
        first_running=first_running,
        stopped_at=stopped_at,
        bound_from=bound_from,
        items=tuple(items),
    )
