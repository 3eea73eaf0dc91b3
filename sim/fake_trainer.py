"""A fake trainer for the simulated cluster: what a gang's program would do, played from outside the pods.

kwok runs no containers, so this process stands in for the program of every training JobSet it is told about.
While every pod of the gang's current attempt is Running it makes progress (one second of work per second), stops
to write a checkpoint every ``GPUCLUSTER_CHECKPOINT_INTERVAL_SECONDS`` of work (for the write time in the pod
annotation ``sim.gpucluster.io/checkpoint-write-seconds``), and after each complete checkpoint writes the
checkpoint report the contract names (``checkpoint.gpucluster.io/<jobset>: <RFC 3339>`` on the team's
``checkpoints`` claim). Where the claim's volume is a directory of this machine (``sim/claims.py``), the checkpoint
itself is written first, as the job's ranks would: a real DCP checkpoint under ``<volume>/<jobset>/step-<N>``, the
step being the seconds of work it holds (``sim/checkpoint_faults.save_checkpoint``; :meth:`FakeTrainer.corrupt_next`
spoils the next one), for the checkpoint verifier to read. An interruption (a new restart attempt, a pod gone, a
JobSet resubmitted) loses the work since the last complete checkpoint; the next attempt resumes from it (from the
last one written, verified or not: what a job that trusts its own last save does). Once the work in
``sim.gpucluster.io/work-seconds`` is done it ends every pod Succeeded, and the JobSet completes.

What the program puts on its GPUs follows what it does (:meth:`Progress.activity`): computing, the tensor cores
busy (utilisation 97 %, tensor activity 0.45); writing a checkpoint, the GPUs nearly idle (4 %, 0); *hung*
(:meth:`Progress.hang`: a rank stuck in a collective, the silent failure), utilisation pinned at 100 % by the
spinning communication kernel while the tensor cores do nothing and no step, checkpoint or report is made, every pod
still Running, until the gang is restarted. With ``progress_every`` it also writes the progress report the stall
detector reads (``progress.gpucluster.io/<jobset>`` on the claim: step, phase, time), as the training README's
loop does. With a ``load`` sink (the fake dcgm-exporter's ``/admin/load``) each
:meth:`FakeTrainer.step` sends the load of every running gang's pods.

A *logical job* (pod annotation ``sim.gpucluster.io/logical-job``, default the JobSet's name) keeps its progress
across JobSets: a job that gives its nodes up on each failure is resubmitted under a new name and resumes from the
same checkpoint.

:class:`Progress` is the pure part (the clock is passed in); :class:`FakeTrainer` reads and writes the API.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contract.constants import (
    CHECKPOINT_ANNOTATION_PREFIX,
    JOBSET_RESTART_ATTEMPT_LABEL,
    PROGRESS_ANNOTATION_PREFIX,
    TRAINING_JOB_LABEL,
)
from sim.checkpoint_faults import CORRUPTIONS, save_checkpoint
from sim.claims import host_directory

WORK_ANNOTATION = "sim.gpucluster.io/work-seconds"
WRITE_ANNOTATION = "sim.gpucluster.io/checkpoint-write-seconds"
LOGICAL_JOB_ANNOTATION = "sim.gpucluster.io/logical-job"
INTERVAL_ENV = "GPUCLUSTER_CHECKPOINT_INTERVAL_SECONDS"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
#: (utilisation %, tensor activity) of a gang's GPUs while it computes, writes a checkpoint, or hangs.
COMPUTING_LOAD = (97.0, 0.45)
WRITING_LOAD = (4.0, 0.0)
HUNG_LOAD = (100.0, 0.0)


def rfc3339(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class Progress:
    """One logical job's training, advanced by :meth:`tick` with the time and whether its gang runs."""

    work_needed: float
    interval: float
    write: float
    saved: float = 0.0
    since_save: float = 0.0
    #: Seconds left of the checkpoint being written (None: computing).
    writing_left: float | None = None
    attempt: str | None = None
    last: float | None = None
    done_at: float | None = None
    #: When the gang first ran (the start of its training time: the first queueing is not an interruption's).
    started_at: float | None = None
    #: Times a complete checkpoint finished (what the report carries).
    checkpoints: list[float] = field(default_factory=list)
    #: Work lost by each interruption, and when the gang ran again after one.
    lost: list[float] = field(default_factory=list)
    interrupted_at: list[float] = field(default_factory=list)
    running_again_at: list[float] = field(default_factory=list)
    #: A rank is stuck: no work is done until the gang restarts.
    hung: bool = False

    def __post_init__(self) -> None:
        if self.work_needed <= 0 or self.interval <= 0 or self.write < 0:
            raise ValueError("work and interval must be positive, the write time not negative")

    @property
    def done(self) -> bool:
        return self.done_at is not None

    def hang(self) -> None:
        """A rank stops inside a collective: the pods keep running, nothing advances, until the gang restarts."""
        if self.attempt is not None and not self.done:
            self.hung = True

    def activity(self) -> tuple[float, float] | None:
        """(utilisation %, tensor activity) on the running gang's GPUs; None while it does not run."""
        if self.attempt is None or self.done:
            return None
        if self.hung:
            return HUNG_LOAD
        return WRITING_LOAD if self.writing_left is not None else COMPUTING_LOAD

    def interrupt(self, now: float) -> None:
        """The gang stopped: the work since the last complete checkpoint (and a write under way) is lost."""
        self.hung = False
        if self.attempt is None:
            return
        self.lost.append(self.since_save)
        self.interrupted_at.append(now)
        self.since_save = 0.0
        self.writing_left = None
        self.attempt = None
        self.last = None

    def tick(self, now: float, attempt: str | None) -> None:
        """Advance to ``now``; ``attempt`` names the running gang (None: not every pod Running)."""
        if self.done:
            return
        if attempt != self.attempt:
            self.interrupt(now)
            if attempt is None:
                return
            self.attempt = attempt
            self.last = now
            if self.started_at is None:
                self.started_at = now
            if self.interrupted_at:
                self.running_again_at.append(now)
            return
        if attempt is None or self.last is None:
            return
        if not self.hung:
            self._advance(self.last, now)
        self.last = now

    def _advance(self, t: float, until: float) -> None:
        while t < until and not self.done:
            if self.writing_left is not None:
                step = min(self.writing_left, until - t)
                t += step
                self.writing_left -= step
                if self.writing_left <= 1e-9:
                    self.saved += self.since_save
                    self.since_save = 0.0
                    self.writing_left = None
                    self.checkpoints.append(t)
                continue
            to_finish = self.work_needed - self.saved - self.since_save
            to_checkpoint = self.interval - self.since_save
            step = min(until - t, to_finish, to_checkpoint)
            t += step
            self.since_save += step
            if self.saved + self.since_save >= self.work_needed - 1e-9:
                self.done_at = t
            elif self.since_save >= self.interval - 1e-9:
                self.writing_left = self.write


def gang_attempt(jobset: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> str | None:
    """``<jobset>/<attempt>`` when every pod of the current restart attempt is Running; else None."""
    name = jobset["metadata"]["name"]
    attempt = str((jobset.get("status") or {}).get("restarts", 0))
    want = sum(
        int(rj["replicas"]) * int(rj["template"]["spec"].get("parallelism", 1))
        for rj in jobset["spec"]["replicatedJobs"]
    )
    running = [
        p
        for p in pods
        if (p["metadata"].get("labels") or {}).get(JOBSET_RESTART_ATTEMPT_LABEL) == attempt
        and not p["metadata"].get("deletionTimestamp")
        and (p.get("status") or {}).get("phase") == "Running"
    ]
    return f"{name}/{attempt}" if len(running) >= want > 0 else None


def _pod_template(jobset: Mapping[str, Any]) -> Mapping[str, Any]:
    return jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]  # type: ignore[no-any-return]


def progress_for(jobset: Mapping[str, Any]) -> tuple[str, Progress]:
    """The logical job a JobSet plays and a fresh :class:`Progress` from its template."""
    template = _pod_template(jobset)
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    env = {e["name"]: e.get("value", "") for c in template["spec"]["containers"] for e in c.get("env") or []}
    logical = annotations.get(LOGICAL_JOB_ANNOTATION, jobset["metadata"]["name"])
    return logical, Progress(
        work_needed=float(annotations.get(WORK_ANNOTATION, "60")),
        interval=float(env.get(INTERVAL_ENV, "60")),
        write=float(annotations.get(WRITE_ANNOTATION, "0")),
    )


class FakeTrainer:
    """Plays the program of every training JobSet in ``namespace``; :meth:`step` once per poll."""

    def __init__(
        self,
        api: Any,
        namespace: str,
        clock: Callable[[], float],
        load: Callable[[list[dict[str, Any]]], None] | None = None,
        progress_every: float | None = None,
    ) -> None:
        self.api = api  # a kubernetes.client.ApiClient
        self.namespace = namespace
        self.clock = clock
        #: Where each step's GPU load goes (``[{namespace, pod, util, tensorActive}]``); None: nowhere.
        self.load = load
        #: Write the progress report (the stall detector's contract) at most this often, and at once when the phase
        #: changes; None: the program writes none.
        self.progress_every = progress_every
        self.jobs: dict[str, Progress] = {}
        self._reported: dict[str, int] = {}
        #: logical job -> the corruption its next checkpoint gets (``checkpoint_faults.CORRUPTIONS``).
        self._corrupt: dict[str, str] = {}
        self._volume: Path | None = None
        #: logical job -> (step, phase, when) of the last progress report written.
        self._progress: dict[str, tuple[int, str, float]] = {}

    def _custom(self) -> Any:
        from kubernetes import client  # noqa: PLC0415 (only the I/O side needs the client)

        return client.CustomObjectsApi(self.api)

    def _core(self) -> Any:
        from kubernetes import client  # noqa: PLC0415

        return client.CoreV1Api(self.api)

    def step(self) -> None:
        now = self.clock()
        jobsets = self._custom().list_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", self.namespace, "jobsets", label_selector=TRAINING_JOB_LABEL
        )["items"]
        pods = self.api.sanitize_for_serialization(self._core().list_namespaced_pod(self.namespace).items)
        by_jobset: dict[str, list[dict[str, Any]]] = {}
        for p in pods:
            owner = (p["metadata"].get("labels") or {}).get(JOBSET_NAME_LABEL)
            if owner:
                by_jobset.setdefault(owner, []).append(p)
        seen: set[str] = set()
        loads: list[dict[str, Any]] = []
        for js in jobsets:
            if any(
                c.get("type") in ("Completed", "Failed") and c.get("status") == "True"
                for c in (js.get("status") or {}).get("conditions") or []
            ):
                continue
            logical, fresh = progress_for(js)
            seen.add(logical)
            progress = self.jobs.setdefault(logical, fresh)
            was_done = progress.done
            progress.tick(now, gang_attempt(js, by_jobset.get(js["metadata"]["name"], [])))
            activity = progress.activity()
            if activity is not None:
                loads += [
                    {
                        "namespace": self.namespace,
                        "pod": p["metadata"]["name"],
                        "util": activity[0],
                        "tensorActive": activity[1],
                    }
                    for p in by_jobset.get(js["metadata"]["name"], [])
                    if (p.get("status") or {}).get("phase") == "Running"
                ]
            self._report(js, logical, progress)
            self._report_progress(js, logical, progress, now)
            if progress.done and not was_done:
                self._succeed(by_jobset.get(js["metadata"]["name"], []))
        for logical, progress in self.jobs.items():
            if logical not in seen and not progress.done:
                progress.tick(now, None)
        if self.load is not None:
            self.load(loads)

    def corrupt_next(self, logical: str, corruption: str) -> None:
        """The next checkpoint of ``logical`` is written spoilt by ``corruption`` (a save that went wrong)."""
        if corruption not in CORRUPTIONS:
            raise ValueError(f"{corruption!r} is no corruption; known: {', '.join(CORRUPTIONS)}")
        self._corrupt[logical] = corruption

    def volume(self) -> Path | None:
        """The directory of this machine behind the team's ``checkpoints`` claim; None when it has none."""
        if self._volume is None:
            claim = self._core().read_namespaced_persistent_volume_claim("checkpoints", self.namespace)
            name = claim.spec.volume_name
            if name:
                pv = self.api.sanitize_for_serialization(self._core().read_persistent_volume(name))
                self._volume = host_directory(pv)
        return self._volume

    def _report(self, jobset: Mapping[str, Any], logical: str, progress: Progress) -> None:
        """The checkpoint itself (where the volume is here), then its report on the team's claim, once per new
        complete checkpoint."""
        if len(progress.checkpoints) == self._reported.get(logical, 0):
            return
        self._reported[logical] = len(progress.checkpoints)
        volume = self.volume()
        if volume is not None:
            corruption = self._corrupt.pop(logical, None)
            save_checkpoint(volume / jobset["metadata"]["name"], int(progress.saved), corruption=corruption)
        key = f"{CHECKPOINT_ANNOTATION_PREFIX}{jobset['metadata']['name']}"
        body = {"metadata": {"annotations": {key: rfc3339(progress.checkpoints[-1])}}}
        self._core().patch_namespaced_persistent_volume_claim("checkpoints", self.namespace, body)

    def _report_progress(self, jobset: Mapping[str, Any], logical: str, progress: Progress, now: float) -> None:
        """The progress report, as a training loop honouring the contract writes it: the step (a second of work is
        a step), the phase (``checkpoint`` while writing one), and when the step last advanced; throttled to
        ``progress_every`` unless the phase changed. A hung or stopped gang writes nothing."""
        if self.progress_every is None or progress.attempt is None or progress.hung or progress.done:
            return
        step = int(progress.saved + progress.since_save)
        phase = "checkpoint" if progress.writing_left is not None else "train"
        last = self._progress.get(logical)
        if last is not None and last[1] == phase and (step == last[0] or now - last[2] < self.progress_every):
            return
        self._progress[logical] = (step, phase, now)
        key = f"{PROGRESS_ANNOTATION_PREFIX}{jobset['metadata']['name']}"
        report = json.dumps({"step": step, "phase": phase, "at": rfc3339(now)})
        self._core().patch_namespaced_persistent_volume_claim(
            "checkpoints", self.namespace, {"metadata": {"annotations": {key: report}}}
        )

    def _succeed(self, pods: Iterable[Mapping[str, Any]]) -> None:
        """The program finished: every pod of the gang exits 0."""
        now = rfc3339(self.clock())
        for p in pods:
            if (p.get("status") or {}).get("phase") != "Running":
                continue
            containers = [
                {
                    "name": c["name"],
                    "image": c["image"],
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": {
                        "terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}
                    },
                }
                for c in p["spec"]["containers"]
            ]
            body = {"status": {"phase": "Succeeded", "containerStatuses": containers}}
            self._core().patch_namespaced_pod_status(p["metadata"]["name"], self.namespace, body)


def fail_pod(api: Any, namespace: str, name: str, exit_code: int = 1) -> None:
    """The program crashed in one pod: its container exits ``exit_code`` (the program's fault)."""
    from kubernetes import client  # noqa: PLC0415

    core = client.CoreV1Api(api)
    pod = api.sanitize_for_serialization(core.read_namespaced_pod(name, namespace))
    now = rfc3339(dt.datetime.now(dt.UTC).timestamp())
    containers = [
        {
            "name": c["name"],
            "image": c["image"],
            "imageID": "",
            "ready": False,
            "restartCount": 0,
            "state": {"terminated": {"exitCode": exit_code, "reason": "Error", "startedAt": now, "finishedAt": now}},
        }
        for c in pod["spec"]["containers"]
    ]
    core.patch_namespaced_pod_status(name, namespace, {"status": {"phase": "Failed", "containerStatuses": containers}})
