"""The check Job the verifier creates in a team's namespace: pure, from its settings and one decision.

What it is, and what the admission rule ``checkpoint-verifier-creates-only-check-jobs`` holds it to:

- Kueue's: the LocalQueue of CPU-only work in the team's namespace (``kueue.cpuQueue``) and the team's lowest research
  priority (``kueue.x-k8s.io/queue-name`` and ``priority-class``). It asks for CPU and memory only, and takes no GPU
  quota: its ClusterQueue counts only pods (at most ``kueue.cpuQueue.pods`` at once), apart from the GPU queues.
- one pod, never restarted (``backoffLimit: 0``, ``restartPolicy: Never``): a check that ends with no verdict is
  started again by the controller after ``retryAfter``, as a new Job; ``activeDeadlineSeconds`` is ``checkDeadline``;
  the Job goes ``keepFinished`` after it ends (``ttlSecondsAfterFinished``).
- the daemons' image running ``python3 -m daemons.checkpoint_verifier.check --newest-under /checkpoints/<job>``, as
  nobody, read-only root, no capability, no service-account token; the team's ``checkpoints`` claim mounted
  read-only at the same place a training pod mounts it; the verdict in the termination message.

A restore drill Job (:func:`drill_job`) is the same but for its command (``python3 -m
daemons.checkpoint_verifier.drill /checkpoints/<job>/<directory>``: the job's verified checkpoint), its container's
name, its resources and deadline (``restoreDrill``), and its labels (``checkpoint.gpucluster.io/kind:
restore-drill``) and annotation (the turn it belongs to).
"""

from __future__ import annotations

from typing import Any

from contract.checkpoint_verifier_settings import CheckpointVerifierSettings, TeamQueue
from contract.checkpoints import CHECKPOINTS_MOUNT, job_directory
from contract.constants import CHECKPOINT_CLAIM, PRIORITY_LABEL, QUEUE_LABEL, nonroot_pod_security_context
from contract.controllers.checkpoint_verifier import (
    APP,
    CHECK_CONTAINER,
    CHECK_LAST_VERIFIED_ANNOTATION,
    CHECK_MODULE,
    CHECK_OF_LABEL,
    CHECK_REPORT_ANNOTATION,
    DRILL_AFTER_ANNOTATION,
    DRILL_CONTAINER,
    DRILL_KIND,
    DRILL_MODULE,
    KIND_LABEL,
    MANAGED_BY_LABEL,
    TERMINATION_LOG,
)
from contract.spec import PYTHON


def check_job(
    settings: CheckpointVerifierSettings,
    team: TeamQueue,
    *,
    name: str,
    job: str,
    report: str,
    last_verified_step: int | None,
) -> dict[str, Any]:
    """The check Job ``name`` of ``job``'s newest checkpoint, for the report ``report``."""
    command = [
        PYTHON,
        "-m",
        CHECK_MODULE,
        "--newest-under",
        job_directory(job),
        "--workers",
        str(settings.workers),
        "--termination-log",
        TERMINATION_LOG,
    ]
    if last_verified_step is not None:
        command += ["--last-verified-step", str(last_verified_step)]
    annotations = {CHECK_REPORT_ANNOTATION: report}
    if last_verified_step is not None:
        annotations[CHECK_LAST_VERIFIED_ANNOTATION] = str(last_verified_step)
    return _job(
        settings,
        team,
        name=name,
        labels={CHECK_OF_LABEL: job, MANAGED_BY_LABEL: APP},
        annotations=annotations,
        container=CHECK_CONTAINER,
        command=command,
        resources={"cpu": settings.check_cpu, "memory": settings.check_memory},
        deadline=settings.check_deadline_seconds,
    )


def drill_job(
    settings: CheckpointVerifierSettings, team: TeamQueue, *, name: str, job: str, directory: str, after: str
) -> dict[str, Any]:
    """The restore drill Job ``name`` of ``job``'s verified checkpoint ``directory``, in the turn ``after``."""
    drill = settings.restore_drill
    command = [PYTHON, "-m", DRILL_MODULE, f"{job_directory(job)}/{directory}", "--termination-log", TERMINATION_LOG]
    if drill.max_read_mbps is not None:
        command += ["--max-read-mbps", str(drill.max_read_mbps)]
    return _job(
        settings,
        team,
        name=name,
        labels={CHECK_OF_LABEL: job, KIND_LABEL: DRILL_KIND, MANAGED_BY_LABEL: APP},
        annotations={DRILL_AFTER_ANNOTATION: after},
        container=DRILL_CONTAINER,
        command=command,
        resources={"cpu": drill.cpu, "memory": drill.memory},
        deadline=drill.deadline_seconds,
    )


def _job(
    settings: CheckpointVerifierSettings,
    team: TeamQueue,
    *,
    name: str,
    labels: dict[str, str],
    annotations: dict[str, str],
    container: str,
    command: list[str],
    resources: dict[str, str],
    deadline: float,
) -> dict[str, Any]:
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": nonroot_pod_security_context(),
        "containers": [
            {
                "name": container,
                "image": settings.image,
                "command": command,
                "resources": {"requests": resources, "limits": resources},
                "terminationMessagePath": TERMINATION_LOG,
                "terminationMessagePolicy": "File",
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"]},
                },
                "volumeMounts": [{"name": CHECKPOINT_CLAIM, "mountPath": CHECKPOINTS_MOUNT, "readOnly": True}],
            }
        ],
        "volumes": [
            {"name": CHECKPOINT_CLAIM, "persistentVolumeClaim": {"claimName": CHECKPOINT_CLAIM, "readOnly": True}}
        ],
    }
    if settings.check_node_selector:
        pod_spec["nodeSelector"] = dict(settings.check_node_selector)
    if settings.check_tolerations:
        pod_spec["tolerations"] = [t.to_k8s() for t in settings.check_tolerations]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": team.namespace,
            "labels": {**labels, QUEUE_LABEL: team.local_queue, PRIORITY_LABEL: team.priority},
            "annotations": annotations,
        },
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": int(deadline),
            "ttlSecondsAfterFinished": int(settings.keep_finished_seconds),
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }
