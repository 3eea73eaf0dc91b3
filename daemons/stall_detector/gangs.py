"""API JSON -> what the stall detector judges: a running gang, its pods, its progress report and its last restart.

Pure: no I/O. A malformed JobSet is named in a ValueError; a malformed progress report or restart record reads as
absent, with the reason in ``problems`` (the progress report is the job's to write: a bad one costs the job its
excuse, never the detector its cycle).

The progress report (optional; the contract is in ``components/training/README.md``): rank 0 annotates its team's
``checkpoints`` claim with ``progress.gpucluster.io/<jobset name>`` holding JSON::

    {"step": 1200, "phase": "train", "at": "2026-12-03T10:00:00Z"}

``at`` is when ``step`` last advanced; ``phase`` is ``train`` or a quiet phase (``checkpoint``, ``eval``, ``data``),
``phaseSince`` (optional, RFC 3339) when it began, else ``at``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from contract.constants import (
    GPU_RESOURCE,
    JOBSET_RESTART_ATTEMPT_LABEL,
    PROGRESS_ANNOTATION_PREFIX,
    STALL_AFTER_ANNOTATION,
    STALL_RESTART_ANNOTATION,
    TRAINING_JOB_LABEL,
)
from contract.times import unix_seconds
from daemons.jobsets import (
    as_int,
    as_list,
    as_map,
    belongs,
    gang_size,
    of_attempt,
    running_start,
)
from daemons.stall_detector.decide import QUIET_PHASES, TRAIN_PHASE, Gang, Progress

#: Longest progress report or restart record read (an annotation is at most 256 KiB in all; ours are small).
MAX_RECORD = 4096
PHASES = frozenset({TRAIN_PHASE, *QUIET_PHASES})


@dataclass(frozen=True)
class GangPod:
    name: str
    node: str | None
    gpus: int
    phase: str
    terminating: bool
    #: Its restart attempt (JobSet's label); None without one.
    attempt: int | None


@dataclass(frozen=True)
class RestartRecord:
    """What the detector wrote on the JobSet before evicting a pod of ``attempt``."""

    attempt: int
    at: float
    evidence: str
    suspects: Mapping[str, tuple[str, ...]]

    def to_json(self) -> str:
        return json.dumps(
            {
                "attempt": self.attempt,
                "at": round(self.at, 3),
                "evidence": self.evidence[:1024],
                "suspects": {n: list(r) for n, r in sorted(self.suspects.items())},
            },
            separators=(",", ":"),
        )


@dataclass(frozen=True)
class GangView:
    namespace: str
    name: str
    uid: str
    resource_version: str
    #: The current restart attempt (``status.restarts``).
    attempt: int
    suspended: bool
    #: The pods of the current attempt that are not being deleted.
    pods: tuple[GangPod, ...]
    #: Every pod of the job, any attempt (to see whether an eviction of the attempt is under way).
    all_pods: tuple[GangPod, ...]
    gang: Gang
    progress: Progress | None
    restart: RestartRecord | None
    #: Why a report or record was not used.
    problems: tuple[str, ...] = ()


def _record(text: str) -> Mapping[str, Any]:
    """An annotation's JSON object, at most MAX_RECORD characters; ValueError naming what is wrong."""
    if len(text) > MAX_RECORD:
        raise ValueError(f"longer than {MAX_RECORD} characters")
    try:
        doc = json.loads(text)
    except ValueError:
        raise ValueError("not JSON") from None
    if not isinstance(doc, Mapping):
        raise ValueError("not a JSON object")
    return doc


def parse_progress(text: str) -> Progress:
    """A progress report; ValueError naming what is wrong."""
    doc = _record(text)
    step = doc.get("step")
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise ValueError("step must be a whole number, 0 or more")
    phase = doc.get("phase", TRAIN_PHASE)
    if phase not in PHASES:
        raise ValueError(f"phase must be one of {', '.join(sorted(PHASES))}")
    at = unix_seconds(doc.get("at"))
    if at is None:
        raise ValueError("at must be an RFC 3339 time")
    since = unix_seconds(doc.get("phaseSince")) if "phaseSince" in doc else at
    if since is None:
        raise ValueError("phaseSince must be an RFC 3339 time")
    return Progress(step=step, advanced_at=at, phase=str(phase), phase_since=since)


def parse_restart(text: str) -> RestartRecord:
    """The detector's own restart record; ValueError naming what is wrong."""
    doc = _record(text)
    attempt, at = doc.get("attempt"), doc.get("at")
    if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 0:
        raise ValueError("attempt must be a whole number, 0 or more")
    if not isinstance(at, int | float) or isinstance(at, bool):
        raise ValueError("at must be a number of seconds")
    suspects = doc.get("suspects")
    if not isinstance(suspects, Mapping):
        suspects = {}
    return RestartRecord(
        attempt=attempt,
        at=float(at),
        evidence=str(doc.get("evidence", ""))[:1024],
        suspects={str(n): tuple(str(r) for r in v) for n, v in suspects.items() if isinstance(v, list)},
    )


def _pod(obj: Mapping[str, Any]) -> GangPod:
    meta, spec = as_map(obj, "metadata"), as_map(obj, "spec")
    gpus = 0
    for c in as_list(spec, "containers"):
        gpus += as_int(as_map(as_map(c, "resources"), "limits").get(GPU_RESOURCE)) or 0
    node = spec.get("nodeName")
    return GangPod(
        name=str(meta.get("name") or "?"),
        node=node if isinstance(node, str) and node else None,
        gpus=gpus,
        phase=str(as_map(obj, "status").get("phase") or ""),
        terminating=bool(meta.get("deletionTimestamp")),
        attempt=as_int(as_map(meta, "labels").get(JOBSET_RESTART_ATTEMPT_LABEL)),
    )


def gang_view(
    jobset: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], claim_annotations: Mapping[str, str]
) -> GangView:
    meta = as_map(jobset, "metadata")
    name, ns, uid = meta.get("name"), meta.get("namespace"), meta.get("uid")
    if not isinstance(name, str) or not isinstance(ns, str) or not isinstance(uid, str):
        raise ValueError("a JobSet has no metadata.name, namespace or uid")
    labels, annotations = as_map(meta, "labels"), as_map(meta, "annotations")
    spec, status = as_map(jobset, "spec"), as_map(jobset, "status")
    attempt = as_int(status.get("restarts")) or 0
    job_label = str(labels.get(TRAINING_JOB_LABEL, name))
    mine = [p for p in pods if belongs(p, ns, job_label)]
    current = [p for p in mine if of_attempt(p, attempt)]
    size = gang_size(spec)
    running = [p for p in current if as_map(p, "status").get("phase") == "Running"]
    starts = [running_start(p) for p in running]
    since: float | None = None
    if len(running) >= size and all(t is not None for t in starts):
        since = max(t for t in starts if t is not None)
    views = tuple(_pod(p) for p in current)
    problems: list[str] = []
    progress: Progress | None = None
    report = claim_annotations.get(f"{PROGRESS_ANNOTATION_PREFIX}{name}")
    if report is not None:
        try:
            progress = parse_progress(report)
        except ValueError as exc:
            problems.append(f"progress report {PROGRESS_ANNOTATION_PREFIX}{name}: {exc}")
    restart: RestartRecord | None = None
    record = annotations.get(STALL_RESTART_ANNOTATION)
    if isinstance(record, str):
        try:
            restart = parse_restart(record)
        except ValueError as exc:
            problems.append(f"restart record {STALL_RESTART_ANNOTATION}: {exc}")
    stall_after = annotations.get(STALL_AFTER_ANNOTATION)
    own_window: float | None = None
    if stall_after is not None:
        try:
            own_window = float(str(stall_after))
        except ValueError:
            problems.append(f"{STALL_AFTER_ANNOTATION}: {str(stall_after)[:40]!r} is not a number of seconds")
        else:
            if not 0 < own_window < 7 * 86400:
                problems.append(f"{STALL_AFTER_ANNOTATION}: {own_window:g} is not in (0, 604800) seconds")
                own_window = None
    nodes = tuple(sorted({p.node for p in views if p.node and p.phase == "Running"}))
    gang = Gang(
        namespace=ns,
        name=name,
        nodes=nodes,
        gpus=sum(p.gpus for p in views if p.phase == "Running"),
        running_since=since,
        stall_after_s=own_window,
    )
    return GangView(
        namespace=ns,
        name=name,
        uid=uid,
        resource_version=str(meta.get("resourceVersion") or ""),
        attempt=attempt,
        suspended=spec.get("suspend") is True,
        pods=views,
        all_pods=tuple(_pod(p) for p in mine),
        gang=gang,
        progress=progress,
        restart=restart,
        problems=tuple(problems),
    )
