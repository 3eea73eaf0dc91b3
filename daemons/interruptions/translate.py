"""API JSON -> the plain values of ``model.py``. A malformed object is named in a ValueError, never a crash.

Which pods are the gang now, and since when it all runs, is ``daemons/jobsets.py`` (the stall detector
reads the gang the same way).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from contract.checkpoint_record import read_record
from contract.constants import (
    CHECKPOINT_ANNOTATION_PREFIX,
    CHECKPOINT_INTERVAL_ANNOTATION,
    CHECKPOINT_WRITE_ANNOTATION,
    MAX_RESTARTS_PER_HOUR_ANNOTATION,
    STALL_RESTART_ANNOTATION,
    TEAM_LABEL,
    TRAINING_JOB_LABEL,
    VERIFIED_ANNOTATION_PREFIX,
)
from contract.times import unix_seconds
from daemons.interruptions.classify import NodeState, PodFailure
from daemons.interruptions.model import LEDGER_ANNOTATION, JobView, WorkloadView
from daemons.jobsets import TRAINER, belongs, gang_size, of_attempt, running_start
from daemons.jobsets import as_int as _int
from daemons.jobsets import as_list as _list
from daemons.jobsets import as_map as _map

__all__ = ["TRAINER", "job_view", "node_state", "owner_uid", "pod_failure", "unix_seconds", "workload_view"]


def _float(text: object) -> float | None:
    try:
        value = float(str(text))
    except (TypeError, ValueError):
        return None
    return value if value > 0 else None


def _condition(obj: Any, kind: str) -> Mapping[str, Any]:
    for c in _list(_map(obj, "status"), "conditions"):
        if isinstance(c, Mapping) and c.get("type") == kind:
            return c
    return {}


def node_state(obj: Mapping[str, Any], quarantine_keys: Iterable[str]) -> tuple[str, NodeState]:
    name = _map(obj, "metadata").get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("a node has no metadata.name")
    ready_status = _condition(obj, "Ready").get("status")
    ready = True if ready_status == "True" else False if ready_status == "False" else None
    keys = set(quarantine_keys)
    quarantined = any(isinstance(t, Mapping) and t.get("key") in keys for t in _list(_map(obj, "spec"), "taints"))
    return name, NodeState(True, ready, quarantined)


def owner_uid(obj: Mapping[str, Any], kind: str = "JobSet") -> str | None:
    for ref in _list(_map(obj, "metadata"), "ownerReferences"):
        if isinstance(ref, Mapping) and ref.get("kind") == kind and isinstance(ref.get("uid"), str):
            return str(ref["uid"])
    return None


def workload_view(obj: Mapping[str, Any]) -> WorkloadView:
    meta = _map(obj, "metadata")
    name, ns = meta.get("name"), meta.get("namespace")
    if not isinstance(name, str) or not isinstance(ns, str):
        raise ValueError("a Workload has no metadata.name or namespace")
    admitted = _condition(obj, "Admitted")
    evicted = _condition(obj, "Evicted")
    evictions: dict[str, int] = {}
    for e in _list(_map(_map(obj, "status"), "schedulingStats"), "evictions"):
        if isinstance(e, Mapping) and isinstance(e.get("reason"), str):
            evictions[e["reason"]] = evictions.get(e["reason"], 0) + (_int(e.get("count")) or 0)
    active = _map(obj, "spec").get("active")
    is_admitted = admitted.get("status") == "True"
    return WorkloadView(
        namespace=ns,
        name=name,
        active=active is not False,
        admitted=is_admitted,
        admitted_at=unix_seconds(admitted.get("lastTransitionTime")) if is_admitted else None,
        evictions=evictions,
        evicted_reason=str(evicted.get("reason") or "") if evicted.get("status") == "True" else "",
        evicted_at=unix_seconds(evicted.get("lastTransitionTime")) if evicted.get("status") == "True" else None,
    )


def event_time(obj: Mapping[str, Any]) -> float | None:
    """When an Event last happened: ``series.lastObservedTime``, ``lastTimestamp``, ``eventTime``, creation."""
    for value in (
        _map(obj, "series").get("lastObservedTime"),
        obj.get("lastTimestamp"),
        obj.get("eventTime"),
        _map(obj, "metadata").get("creationTimestamp"),
    ):
        t = unix_seconds(value)
        if t is not None:
            return t
    return None


def pod_failure(pod: Mapping[str, Any]) -> PodFailure | None:
    """What a failed (or disrupted) pod says; None for a pod that has not failed."""
    status = _map(pod, "status")
    disrupted = _condition(pod, "DisruptionTarget").get("status") == "True"
    exit_code: int | None = None
    reason = ""
    for cs in _list(status, "containerStatuses"):
        if isinstance(cs, Mapping) and cs.get("name") == TRAINER:
            term = _map(_map(cs, "state"), "terminated") or _map(_map(cs, "lastState"), "terminated")
            exit_code = _int(term.get("exitCode")) if term else None
            reason = str(term.get("reason") or "") if term else ""
    if status.get("phase") != "Failed" and not disrupted:
        return None
    meta = _map(pod, "metadata")
    node = _map(pod, "spec").get("nodeName")
    return PodFailure(
        str(meta.get("name") or "?"), node if isinstance(node, str) else None, disrupted, exit_code, reason
    )


def checkpoint_at(claim_annotations: Mapping[str, str], job: str, *, verified_only: bool) -> float | None:
    """When the job's last checkpoint that counts was complete: the verifier's last verified one
    (``verified.checkpoint.gpucluster.io/<job>``, its ``reported`` time) or, with no verifier, the job's own report;
    None when there is none (or it does not read)."""
    if not verified_only:
        return unix_seconds(claim_annotations.get(f"{CHECKPOINT_ANNOTATION_PREFIX}{job}"))
    record = read_record(claim_annotations.get(f"{VERIFIED_ANNOTATION_PREFIX}{job}", ""))
    return None if record is None or record.verified is None else unix_seconds(record.verified.reported)


def job_view(
    jobset: Mapping[str, Any],
    *,
    pods: Sequence[Mapping[str, Any]],
    nodes: Mapping[str, NodeState],
    workload: WorkloadView | None,
    events: Sequence[Mapping[str, Any]],
    claim_annotations: Mapping[str, str],
    verified_only: bool = False,
) -> JobView:
    meta = _map(jobset, "metadata")
    name, ns, uid = meta.get("name"), meta.get("namespace"), meta.get("uid")
    if not isinstance(name, str) or not isinstance(ns, str) or not isinstance(uid, str):
        raise ValueError("a JobSet has no metadata.name, namespace or uid")
    labels, annotations = _map(meta, "labels"), _map(meta, "annotations")
    spec, status = _map(jobset, "spec"), _map(jobset, "status")
    restarts = _int(status.get("restarts")) or 0
    towards = _int(status.get("restartsCountTowardsMax")) or 0
    job_label = labels.get(TRAINING_JOB_LABEL, name)
    gang = gang_size(spec)
    current = []
    failures = []
    for pod in pods:
        if not belongs(pod, ns, job_label):
            continue
        failure = pod_failure(pod)
        if failure is not None:
            failures.append((failure, nodes.get(failure.node or "", NodeState(False)) if failure.node else None))
        if of_attempt(pod, restarts) and _map(pod, "status").get("phase") == "Running":
            current.append(running_start(pod))
    since: float | None = None
    if len(current) >= gang and all(t is not None for t in current):
        since = max(t for t in current if t is not None)
    restart_events: dict[str, float] = {}
    for ev in events:
        involved = _map(ev, "involvedObject")
        if involved.get("name") != name or involved.get("namespace", ns) != ns:
            continue
        if involved.get("uid") not in (None, "", uid):
            continue
        t = event_time(ev)
        reason = ev.get("reason")
        if isinstance(reason, str) and t is not None:
            restart_events[reason] = max(t, restart_events.get(reason, t))
    max_rph = _int(annotations.get(MAX_RESTARTS_PER_HOUR_ANNOTATION))
    return JobView(
        namespace=ns,
        name=name,
        uid=uid,
        team=str(labels.get(TEAM_LABEL, "")),
        created_at=unix_seconds(meta.get("creationTimestamp")) or 0.0,
        restarts=restarts,
        restarts_towards_max=towards,
        max_restarts_per_hour=max_rph if max_rph is not None and max_rph >= 0 else None,
        checkpoint_interval_s=_float(annotations.get(CHECKPOINT_INTERVAL_ANNOTATION)),
        checkpoint_write_s=_float(annotations.get(CHECKPOINT_WRITE_ANNOTATION)),
        nodes=gang,
        record_text=str(annotations.get(LEDGER_ANNOTATION, "")),
        pods_running=len(current),
        all_running_since=since,
        failures=tuple(failures),
        workload=workload,
        restart_events=tuple(sorted(restart_events.items(), key=lambda kv: kv[1])),
        checkpoint_at=checkpoint_at(claim_annotations, name, verified_only=verified_only),
        suspended=spec.get("suspend") is True,
        stall_restart=stall_restart(annotations.get(STALL_RESTART_ANNOTATION)),
    )


def stall_restart(text: object) -> tuple[int, float] | None:
    """The attempt and time of the stall detector's record; None when absent or unreadable."""
    if not isinstance(text, str) or len(text) > 4096:
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    attempt = doc.get("attempt") if isinstance(doc, dict) else None
    at = doc.get("at") if isinstance(doc, dict) else None
    if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 0:
        return None
    if not isinstance(at, int | float) or isinstance(at, bool):
        return None
    return attempt, float(at)
