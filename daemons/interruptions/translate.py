"""API JSON -> the plain values of ``model.py``. A malformed object is named in a ValueError, never a crash.

Which pods belong to a JobSet: those in its namespace carrying its ``gpucluster.io/training-job`` label value, of
its current restart attempt (JobSet's label ``jobset.sigs.k8s.io/restart-attempt`` equal to ``status.restarts``,
where the label is there) and not being deleted. The gang is all Running when at least ``nodes`` of them are
(``nodes``: the sum of each replicatedJob's replicas x parallelism); since when is the latest Running start among them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from components.constants import (
    CHECKPOINT_ANNOTATION_PREFIX,
    CHECKPOINT_INTERVAL_ANNOTATION,
    CHECKPOINT_WRITE_ANNOTATION,
    JOBSET_RESTART_ATTEMPT_LABEL,
    MAX_RESTARTS_PER_HOUR_ANNOTATION,
    TEAM_LABEL,
    TRAINING_JOB_LABEL,
)
from daemons.interruptions.classify import NodeState, PodFailure
from daemons.interruptions.model import LEDGER_ANNOTATION, JobView, WorkloadView

TRAINER = "trainer"


def parse_time(text: object) -> float | None:
    """RFC 3339 -> epoch seconds; None when absent or unreadable."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _map(obj: Any, key: str) -> Mapping[str, Any]:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def _list(obj: Any, key: str) -> list[Any]:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, list) else []


def _int(text: object) -> int | None:
    try:
        return int(str(text))
    except (TypeError, ValueError):
        return None


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
        admitted_at=parse_time(admitted.get("lastTransitionTime")) if is_admitted else None,
        evictions=evictions,
        evicted_reason=str(evicted.get("reason") or "") if evicted.get("status") == "True" else "",
        evicted_at=parse_time(evicted.get("lastTransitionTime")) if evicted.get("status") == "True" else None,
    )


def event_time(obj: Mapping[str, Any]) -> float | None:
    """When an Event last happened: ``series.lastObservedTime``, ``lastTimestamp``, ``eventTime``, creation."""
    for value in (
        _map(obj, "series").get("lastObservedTime"),
        obj.get("lastTimestamp"),
        obj.get("eventTime"),
        _map(obj, "metadata").get("creationTimestamp"),
    ):
        t = parse_time(value)
        if t is not None:
            return t
    return None


def _gang_size(spec: Mapping[str, Any]) -> int:
    total = 0
    for rj in _list(spec, "replicatedJobs"):
        if not isinstance(rj, Mapping):
            continue
        replicas = _int(rj.get("replicas", 1)) or 1
        parallelism = _int(_map(_map(rj, "template"), "spec").get("parallelism", 1)) or 1
        total += replicas * parallelism
    return max(1, total)


def _running_start(pod: Mapping[str, Any]) -> float | None:
    status = _map(pod, "status")
    for cs in _list(status, "containerStatuses"):
        if isinstance(cs, Mapping) and cs.get("name") == TRAINER:
            started = parse_time(_map(_map(cs, "state"), "running").get("startedAt"))
            if started is not None:
                return started
    return parse_time(status.get("startTime"))


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


def job_view(
    jobset: Mapping[str, Any],
    *,
    pods: Sequence[Mapping[str, Any]],
    nodes: Mapping[str, NodeState],
    workload: WorkloadView | None,
    events: Sequence[Mapping[str, Any]],
    claim_annotations: Mapping[str, str],
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
    gang = _gang_size(spec)
    current = []
    failures = []
    for pod in pods:
        pmeta = _map(pod, "metadata")
        if _map(pmeta, "labels").get(TRAINING_JOB_LABEL) != job_label or pmeta.get("namespace") != ns:
            continue
        failure = pod_failure(pod)
        if failure is not None:
            failures.append((failure, nodes.get(failure.node or "", NodeState(False)) if failure.node else None))
        attempt = _map(pmeta, "labels").get(JOBSET_RESTART_ATTEMPT_LABEL)
        if pmeta.get("deletionTimestamp") or (attempt is not None and _int(attempt) != restarts):
            continue
        if _map(pod, "status").get("phase") == "Running":
            current.append(_running_start(pod))
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
        created_at=parse_time(meta.get("creationTimestamp")) or 0.0,
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
        checkpoint_at=parse_time(claim_annotations.get(f"{CHECKPOINT_ANNOTATION_PREFIX}{name}")),
        suspended=spec.get("suspend") is True,
    )
