"""An in-memory API server for the checkpoint verifier's controller tests, whose "kubelet" runs the real check.

:class:`FakeApi` keeps each team's ``checkpoints`` claim (annotations, a resourceVersion that moves on each write, a
record patch conditional on it), the check Jobs created (a second create of a name is a conflict, as the API server
refuses it) and their pods, and Events. :meth:`FakeApi.run_checks` plays the Job controller and the kubelet: it runs
each pending Job's own command (``python3 -m daemons.checkpoint_verifier.check ...`` or ``...drill ...``, as the
Job says it) in this process against ``volume`` (the directory standing for the claim, mounted at
``/checkpoints``), and writes what the check left in its termination log into the pod's status, with the Job's
Complete or Failed condition. A Job is created suspended, as Kueue's webhook leaves it, and ``run_checks`` admits it;
one never run stays suspended, as a Job Kueue never admits. What it does not model: Kueue's queueing order, the
deadline of a running Job, pods that never start.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contract.checkpoints import CHECKPOINTS_MOUNT
from contract.constants import CHECKPOINT_ANNOTATION_PREFIX, CHECKPOINT_CLAIM
from contract.controllers.checkpoint_verifier import CHECK_MODULE, DRILL_MODULE, TERMINATION_LOG
from contract.times import rfc3339
from daemons.checkpoint_verifier import check, drill
from daemons.checkpoint_verifier.translate import JOB_NAME_LABEL
from daemons.toolkit.kube import ConflictError, KubeError

START = 1_800_000_000.0


@dataclass
class FakeApi:
    volume: Path
    namespaces: tuple[str, ...] = ("team-a",)
    claims: dict[str, dict[str, Any]] = field(default_factory=dict)
    jobs: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    pods: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    #: Each namespace's checkpoint-resume ConfigMap data (Pulumi creates it empty; drop a namespace for none).
    resume: dict[str, dict[str, str]] = field(default_factory=dict)
    #: Raise KubeError on every call of these.
    failing: set[str] = field(default_factory=set)
    version: int = 100
    clock: float = START

    def __post_init__(self) -> None:
        for ns in self.namespaces:
            self.resume[ns] = {}
            self.claims[ns] = {
                "metadata": {
                    "name": CHECKPOINT_CLAIM,
                    "namespace": ns,
                    "uid": f"uid-{ns}",
                    "resourceVersion": self._bump(),
                    "annotations": {},
                }
            }

    def _call(self, name: str) -> None:
        if name in self.failing:
            raise KubeError(f"{name}: HTTP 500: the API server is down")

    def _bump(self) -> str:
        self.version += 1
        return str(self.version)

    # --- what a job and an operator do

    def report(self, ns: str, job: str, at: float) -> None:
        """The job's rank 0 annotates the claim: its checkpoint is complete."""
        meta = self.claims[ns]["metadata"]
        meta["annotations"][f"{CHECKPOINT_ANNOTATION_PREFIX}{job}"] = rfc3339(at)
        meta["resourceVersion"] = self._bump()

    def annotation(self, ns: str, key: str) -> str | None:
        value = self.claims[ns]["metadata"]["annotations"].get(key)
        return value if isinstance(value, str) else None

    def run_checks(self, *, message: bool = True) -> list[str]:
        """Run every Job not yet run; without ``message``, each ends with no termination message (a pod evicted,
        its node lost)."""
        ran = []
        for (ns, name), job in sorted(self.jobs.items()):
            if "conditions" in job.get("status", {}):
                continue
            job["spec"]["suspend"] = False  # admitted
            container = job["spec"]["template"]["spec"]["containers"][0]
            command = container["command"]
            modules = {CHECK_MODULE: check.main, DRILL_MODULE: drill.main}
            assert command[:2] == ["python3", "-m"], command
            assert command[2] in modules, command
            log = self.volume.parent / f"termination-{name}"
            args = [a.replace(CHECKPOINTS_MOUNT, str(self.volume), 1) for a in command[3:]]
            args = [str(log) if a == TERMINATION_LOG else a for a in args]
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                code = modules[command[2]](args)
            text = log.read_text() if log.exists() and message else ""
            kind = "Complete" if code == 0 else "Failed"
            job["status"] = {
                "conditions": [{"type": kind, "status": "True", "lastTransitionTime": rfc3339(self.clock)}]
            }
            terminated: dict[str, Any] = {"exitCode": code}
            if text:
                terminated["message"] = text
            self.pods[(ns, f"{name}-pod")] = {
                "metadata": {"name": f"{name}-pod", "namespace": ns, "labels": {JOB_NAME_LABEL: name}},
                "status": {"containerStatuses": [{"name": container["name"], "state": {"terminated": terminated}}]},
            }
            ran.append(name)
        return ran

    # --- the verifier's calls

    def claim(self, namespace: str) -> dict[str, Any] | None:
        self._call("claim")
        return json.loads(json.dumps(self.claims[namespace])) if namespace in self.claims else None

    def list_checks(self, namespace: str) -> list[Mapping[str, Any]]:
        self._call("list_checks")
        return [json.loads(json.dumps(j)) for (ns, _), j in sorted(self.jobs.items()) if ns == namespace]

    def list_check_pods(self, namespace: str) -> list[Mapping[str, Any]]:
        self._call("list_check_pods")
        return [json.loads(json.dumps(p)) for (ns, _), p in sorted(self.pods.items()) if ns == namespace]

    def create_check(self, body: dict[str, Any]) -> None:
        self._call("create_check")
        key = (body["metadata"]["namespace"], body["metadata"]["name"])
        if key in self.jobs:
            raise ConflictError(f"create check job {key}: conflict (AlreadyExists)")
        self.jobs[key] = json.loads(json.dumps(body))
        self.jobs[key]["metadata"]["creationTimestamp"] = rfc3339(self.clock)
        # Kueue's webhook suspends a Job of a LocalQueue until it is admitted (``run_checks`` admits it).
        self.jobs[key]["spec"]["suspend"] = True

    def delete_job(self, namespace: str, name: str) -> None:
        self._call("delete_job")
        self.jobs.pop((namespace, name), None)
        self.pods.pop((namespace, f"{name}-pod"), None)

    def write_record(self, namespace: str, annotation: str, value: str, resource_version: str) -> None:
        self._call("write_record")
        meta = self.claims[namespace]["metadata"]
        if meta["resourceVersion"] != resource_version:
            raise ConflictError("record: conflict (the object has been modified)")
        meta["annotations"][annotation] = value
        meta["resourceVersion"] = self._bump()

    def resume_configmap(self, namespace: str) -> dict[str, Any] | None:
        self._call("resume_configmap")
        if namespace not in self.resume:
            return None
        return {"metadata": {"name": "checkpoint-resume", "namespace": namespace}, "data": dict(self.resume[namespace])}

    def write_resume(self, namespace: str, data: Mapping[str, str | None]) -> None:
        self._call("write_resume")
        for key, value in data.items():
            if value is None:
                self.resume[namespace].pop(key, None)
            else:
                self.resume[namespace][key] = value

    def create_event(self, body: dict[str, Any]) -> None:
        self._call("create_event")
        self.events.append(body)
