"""The check Job the verifier creates in a team's namespace: pure, from its settings and one decision.

What it is, and what the admission rule ``checkpoint-verifier-creates-only-check-jobs`` holds it to:

- Kueue's: the team's LocalQueue and its lowest research priority (``kueue.x-k8s.io/queue-name`` and
  ``priority-class``), so it queues like any job of the team and never delays its training. It asks for CPU and memory
  only: Kueue's quota counts GPUs, so it takes none.
- one pod, never restarted (``backoffLimit: 0``, ``restartPolicy: Never``): a check that ends with no verdict is
  started again by the controller after ``retryAfter``, as a new Job; ``activeDeadlineSeconds`` is ``checkDeadline``;
  the Job goes ``keepFinished`` after it ends (``ttlSecondsAfterFinished``).
- the daemons' image running ``python3 -m daemons.checkpoint_verifier.check --newest-under /checkpoints/<job>``, as
  nobody, read-only root, no capability, no service-account token; the team's ``checkpoints`` claim mounted
  read-only at the same place a training pod mounts it; the verdict in the termination message.
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
    TERMINATION_LOG,
)
from contract.spec import PYTHON

MANAGED_BY = "app.kubernetes.io/managed-by"


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
    resources = {"cpu": settings.check_cpu, "memory": settings.check_memory}
    labels = {CHECK_OF_LABEL: job, MANAGED_BY: APP}
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": nonroot_pod_security_context(),
        "containers": [
            {
                "name": CHECK_CONTAINER,
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
            "annotations": {
                CHECK_REPORT_ANNOTATION: report,
                **({CHECK_LAST_VERIFIED_ANNOTATION: str(last_verified_step)} if last_verified_step is not None else {}),
            },
        },
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": int(settings.check_deadline_seconds),
            "ttlSecondsAfterFinished": int(settings.keep_finished_seconds),
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }
