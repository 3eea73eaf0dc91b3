"""Training on an RDMA flavor uses the fabric: a JobSet that Kueue may place on an InfiniBand or RoCE flavor asks
for what reaching the fabric takes, and does not turn it off.

A training pod without the flavor's RDMA devices, the ``IPC_LOCK`` capability or a memory-backed ``/dev/shm`` runs
NCCL over TCP sockets (or fails), holding its GPUs at a fraction of the fabric's bandwidth while the rest of the
cohort waits. The JobSets ``gpucluster submit`` and ``TrainingJob`` render always have them
(``components/training/manifest.py``); this policy holds every JobSet of a stack to the same rule, including one a
program writes by hand.

Where a JobSet may land: its ``kueue.x-k8s.io/queue-name`` label names a LocalQueue of its namespace, which points at
a ClusterQueue, whose resource groups list the ResourceFlavors; a flavor's fabric is on its annotations
(``gpucluster.io/fabric-kind``, ``gpucluster.io/rdma-resource``, written by ``components/queues.py``). A JobSet whose
queue is not in the stack is not judged here (``gpucluster submit`` checks it against the stack).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from pulumi_policy import StackValidationArgs, StackValidationPolicy

from contract.constants import FABRIC_KIND_ANNOTATION, RDMA_RESOURCE_ANNOTATION
from contract.fabric_settings import RDMA_CAPABILITY, RDMA_FABRICS, fabric_turned_off
from policies.common import MANDATORY, Report, annotations_of, dig, labels_of, object_ref

KUEUE_API = "kubernetes:kueue.x-k8s.io/v1beta2"
RESOURCE_FLAVOR = f"{KUEUE_API}:ResourceFlavor"
CLUSTER_QUEUE = f"{KUEUE_API}:ClusterQueue"
LOCAL_QUEUE = f"{KUEUE_API}:LocalQueue"
JOBSET = "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
SHM_PATH = "/dev/shm"


def _rdma_flavors(args: StackValidationArgs) -> dict[str, str]:
    """ResourceFlavor name -> its RDMA resource, for the flavors of an RDMA fabric."""
    out: dict[str, str] = {}
    for r in args.resources:
        if r.resource_type != RESOURCE_FLAVOR:
            continue
        notes = annotations_of(r.props)
        if notes.get(FABRIC_KIND_ANNOTATION) in RDMA_FABRICS:
            out[str(dig(r.props, "metadata", "name"))] = str(notes.get(RDMA_RESOURCE_ANNOTATION, ""))
    return out


def _queue_flavors(args: StackValidationArgs) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for r in args.resources:
        if r.resource_type != CLUSTER_QUEUE:
            continue
        names = [
            str(f.get("name"))
            for group in dig(r.props, "spec", "resourceGroups") or []
            for f in (group.get("flavors") or [] if isinstance(group, Mapping) else [])
            if isinstance(f, Mapping)
        ]
        out[str(dig(r.props, "metadata", "name"))] = names
    return out


def _local_queues(args: StackValidationArgs) -> dict[tuple[str, str], str]:
    return {
        (str(dig(r.props, "metadata", "namespace")), str(dig(r.props, "metadata", "name"))): str(
            dig(r.props, "spec", "clusterQueue")
        )
        for r in args.resources
        if r.resource_type == LOCAL_QUEUE
    }


def _env(container: Mapping[str, Any]) -> dict[str, str]:
    return {
        str(e.get("name")): str(e.get("value", ""))
        for e in container.get("env") or []
        if isinstance(e, Mapping) and "value" in e
    }


def pod_misses(pod: Mapping[str, Any], rdma_resource: str) -> Iterator[str]:
    """What one training pod template lacks to reach an RDMA fabric, each as a phrase."""
    volumes = {
        v.get("name"): v for v in pod.get("volumes") or [] if isinstance(v, Mapping) and isinstance(v.get("name"), str)
    }
    for c in pod.get("containers") or []:
        if not isinstance(c, Mapping):
            continue
        name = c.get("name", "?")
        limits = dig(c, "resources", "limits") or {}
        if rdma_resource and rdma_resource not in limits:
            yield f"container {name} does not request {rdma_resource}"
        if RDMA_CAPABILITY not in (dig(c, "securityContext", "capabilities", "add") or []):
            yield f"container {name} lacks the {RDMA_CAPABILITY} capability"
        shm = [m for m in c.get("volumeMounts") or [] if isinstance(m, Mapping) and m.get("mountPath") == SHM_PATH]
        if not any(dig(volumes.get(m.get("name")), "emptyDir", "medium") == "Memory" for m in shm):
            yield f"container {name} has no memory-backed {SHM_PATH}"
        for key, why in fabric_turned_off(_env(c)):
            yield f"container {name} sets {key}, which {why}"


def _validate(args: StackValidationArgs, report: Report) -> None:
    rdma = _rdma_flavors(args)
    if not rdma:
        return
    queues = _queue_flavors(args)
    local = _local_queues(args)
    for r in args.resources:
        if r.resource_type != JOBSET:
            continue
        namespace = str(dig(r.props, "metadata", "namespace"))
        cluster_queue = local.get((namespace, str(labels_of(r.props).get(QUEUE_LABEL))))
        landing = [f for f in queues.get(cluster_queue or "", []) if f in rdma]
        if not landing:
            continue
        flavor = landing[0]
        for i, job in enumerate(dig(r.props, "spec", "replicatedJobs") or []):
            pod = dig(job, "template", "spec", "template", "spec")
            if not isinstance(pod, Mapping):
                continue
            misses = list(pod_misses(pod, rdma[flavor]))
            if misses:
                report(
                    f"JobSet {object_ref(r.props, r.name)} replicatedJobs[{i}] may run on flavor {flavor} (an RDMA "
                    f"fabric, through ClusterQueue {cluster_queue}) but {'; '.join(misses)}: NCCL would run over "
                    "TCP sockets or fail",
                    r.urn,
                )


training_jobs_use_the_fabric = StackValidationPolicy(
    name="training-jobs-use-the-fabric",
    description=(
        "A JobSet that may land on an RDMA flavor requests its devices, IPC_LOCK and /dev/shm, and keeps NCCL on it."
    ),
    enforcement_level=MANDATORY,
    validate=_validate,
)
