"""Reading training JobSets and their pods from API JSON: what the interruption accounting and the stall detector
both need to agree on. A malformed field reads as absent, never a crash.

Which pods are the gang now: those in the JobSet's namespace carrying its ``gpucluster.io/training-job`` label
value, of its current restart attempt (JobSet's label ``jobset.sigs.k8s.io/restart-attempt`` equal to
``status.restarts``, where the label is there) and not being deleted. The gang is all Running when at least
:func:`gang_size` of them are; since when is the latest Running start among them (:func:`running_start`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contract.constants import JOBSET_RESTART_ATTEMPT_LABEL, TRAINING_JOB_LABEL
from contract.times import unix_seconds

#: The training pod's container (components/training/manifest.py names it).
TRAINER = "trainer"


def as_map(obj: Any, key: str) -> Mapping[str, Any]:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def as_list(obj: Any, key: str) -> list[Any]:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, list) else []


def as_int(text: object) -> int | None:
    try:
        return int(str(text))
    except (TypeError, ValueError):
        return None


def gang_size(spec: Mapping[str, Any]) -> int:
    """Pods of the gang: each replicatedJob's replicas x parallelism, summed (at least one)."""
    total = 0
    for rj in as_list(spec, "replicatedJobs"):
        if not isinstance(rj, Mapping):
            continue
        replicas = as_int(rj.get("replicas", 1)) or 1
        parallelism = as_int(as_map(as_map(rj, "template"), "spec").get("parallelism", 1)) or 1
        total += replicas * parallelism
    return max(1, total)


def running_start(pod: Mapping[str, Any]) -> float | None:
    """When the trainer container started running, else the pod's start time."""
    status = as_map(pod, "status")
    for cs in as_list(status, "containerStatuses"):
        if isinstance(cs, Mapping) and cs.get("name") == TRAINER:
            started = unix_seconds(as_map(as_map(cs, "state"), "running").get("startedAt"))
            if started is not None:
                return started
    return unix_seconds(status.get("startTime"))


def belongs(pod: Mapping[str, Any], namespace: str, job_label: str) -> bool:
    """The pod is one of the job's, of any attempt."""
    meta = as_map(pod, "metadata")
    return meta.get("namespace") == namespace and as_map(meta, "labels").get(TRAINING_JOB_LABEL) == job_label


def of_attempt(pod: Mapping[str, Any], restarts: int) -> bool:
    """The pod is of the current attempt and not being deleted."""
    meta = as_map(pod, "metadata")
    attempt = as_map(meta, "labels").get(JOBSET_RESTART_ATTEMPT_LABEL)
    return not meta.get("deletionTimestamp") and (attempt is None or as_int(attempt) == restarts)
