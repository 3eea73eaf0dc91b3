"""What a target pod says: its instance state and tags, the GPUs it holds, the GPUs the target nodes have free.

State of a target pod (`pod_state`): being deleted -> terminated; Pending -> creating; Running with every
container ready -> running (address = pod IP), Running otherwise -> creating; Succeeded -> exited (0);
Failed -> failed (exit code of the first terminated container that failed); Unknown (node lost) -> failed;
gone -> None.

Offers (`free_gpus`): for every configured GPU type the configured price, and as available GPUs the sum over the
target nodes that are Ready, schedulable, match the configured nodeSelector and whose NoSchedule/NoExecute taints
the configured tolerations tolerate, of allocatable ``nvidia.com/gpu`` minus the GPU requests of the
non-terminal pods bound to them; bounded by ``max_gpus`` minus the GPUs that burst pods (any node's) already
hold in the target cluster. The target cluster does not tell GPU types apart here: pin them with nodeSelector.

Pure: these functions read API JSON that `api.KubeApi` has already checked for shape (`check_pod`, `check_node`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from contract.constants import GPU_RESOURCE
from contract.model import pod_resource_count
from contract.times import unix_seconds
from daemons.burst_provider import replies
from daemons.burst_provider.providers.base import Instance, InstanceState, InstanceTags, Port
from daemons.burst_provider.providers.kubernetes.translate import (
    GPU_COUNT_ANNOTATION,
    GPU_TYPE_ANNOTATION,
    NODE_LABEL,
    SOURCE_NAME_ANNOTATION,
    SOURCE_NAME_LABEL,
    SOURCE_NAMESPACE_LABEL,
    SOURCE_UID_LABEL,
)


def _container_statuses(status: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [*(status.get("containerStatuses") or []), *(status.get("initContainerStatuses") or [])]


def _exit_code(status: Mapping[str, Any]) -> int | None:
    """The exit code of the first container that failed, else of the first that terminated."""
    codes = [
        int(cs["state"]["terminated"].get("exitCode", 0))
        for cs in _container_statuses(status)
        if isinstance((cs.get("state") or {}).get("terminated"), Mapping)
    ]
    failed = [c for c in codes if c != 0]
    return failed[0] if failed else (codes[0] if codes else None)


def pod_state(pod: Mapping[str, Any]) -> tuple[InstanceState, int | None, str]:
    """The instance state of a target pod, its exit code when it has one, and a message."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    phase = str(status.get("phase") or "Pending")
    detail = ": ".join(str(x) for x in (status.get("reason"), status.get("message")) if x)
    if meta.get("deletionTimestamp"):
        return InstanceState.TERMINATED, _exit_code(status), "being deleted"
    if phase == "Pending":
        return InstanceState.CREATING, None, detail or "pending"
    if phase == "Running":
        statuses = status.get("containerStatuses") or []
        if statuses and all(cs.get("ready") for cs in statuses):
            return InstanceState.RUNNING, None, ""
        return InstanceState.CREATING, None, detail or "containers not ready"
    if phase == "Succeeded":
        return InstanceState.EXITED, 0, detail
    if phase == "Failed":
        return InstanceState.FAILED, _exit_code(status), detail or "pod failed"
    return InstanceState.FAILED, None, f"pod phase {phase} (its node stopped reporting)"


def tags_of(pod: Mapping[str, Any]) -> InstanceTags | None:
    """The tags a target pod carries, or None when it is not a burst pod."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    node = labels.get(NODE_LABEL)
    uid = labels.get(SOURCE_UID_LABEL)
    namespace = labels.get(SOURCE_NAMESPACE_LABEL)
    name = annotations.get(SOURCE_NAME_ANNOTATION) or labels.get(SOURCE_NAME_LABEL)
    if not (node and uid and namespace and name):
        return None
    return InstanceTags(node=str(node), namespace=str(namespace), pod=str(name), uid=str(uid))


def instance_id_of(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def instance_from_pod(provider: str, pod: Mapping[str, Any]) -> Instance | None:
    """The `Instance` a target pod stands for (None when it carries no burst tags)."""
    tags = tags_of(pod)
    if tags is None:
        return None
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    annotations = meta.get("annotations") or {}
    state, exit_code, message = pod_state(pod)
    ports = tuple(
        Port(port=int(p["containerPort"]), protocol=str(p.get("protocol", "TCP")), name=str(p.get("name", "")))
        for c in (pod.get("spec") or {}).get("containers") or []
        for p in c.get("ports") or []
        if "containerPort" in p
    )
    finished = [
        t
        for cs in _container_statuses(status)
        if (t := unix_seconds(((cs.get("state") or {}).get("terminated") or {}).get("finishedAt"))) is not None
    ]
    try:
        gpu_count = int(annotations.get(GPU_COUNT_ANNOTATION, pod_gpu_request(pod)))
    except ValueError:
        gpu_count = pod_gpu_request(pod)
    return Instance(
        provider=provider,
        instance_id=instance_id_of(pod),
        tags=tags,
        state=state,
        gpu_type=str(annotations.get(GPU_TYPE_ANNOTATION, "")),
        gpu_count=gpu_count,
        address=str(status.get("podIP") or "") if state == InstanceState.RUNNING else "",
        ports=ports,
        exit_code=exit_code,
        message=message,
        started_at=unix_seconds(status.get("startTime")),
        finished_at=max(finished) if finished and state in (InstanceState.EXITED, InstanceState.FAILED) else None,
    )


def _quantity_int(value: object) -> int:
    """An integer resource quantity such as nvidia.com/gpu ("8"); anything else counts as 0."""
    try:
        return int(str(value))
    except ValueError:
        return 0


def pod_gpu_request(pod: Mapping[str, Any]) -> int:
    """GPUs a pod holds (``contract.model.pod_resource_count``: the one rule); a pod the API server would not
    have taken counts as none."""
    try:
        return pod_resource_count(pod.get("spec") or {}, GPU_RESOURCE)
    except ValueError:
        return 0


def tolerates(tolerations: Sequence[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    """Whether one of `tolerations` tolerates `taint` (Kubernetes' matching rules)."""
    for t in tolerations:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        operator = t.get("operator") or "Equal"
        key = t.get("key") or ""
        if not key:
            if operator == "Exists":
                return True
            continue
        if key != taint.get("key"):
            continue
        if operator == "Exists" or (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def node_usable(
    node: Mapping[str, Any], node_selector: Mapping[str, str], tolerations: Sequence[Mapping[str, Any]]
) -> bool:
    """A node our pods can land on: Ready, schedulable, matching the nodeSelector, its hard taints tolerated."""
    spec = node.get("spec") or {}
    if spec.get("unschedulable"):
        return False
    conditions = (node.get("status") or {}).get("conditions") or []
    if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
        return False
    labels = (node.get("metadata") or {}).get("labels") or {}
    if any(labels.get(k) != v for k, v in node_selector.items()):
        return False
    hard = [t for t in spec.get("taints") or [] if t.get("effect") in ("NoSchedule", "NoExecute")]
    return all(tolerates(tolerations, t) for t in hard)


def terminal(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def free_gpus(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    node_selector: Mapping[str, str],
    tolerations: Sequence[Mapping[str, Any]],
) -> int:
    """Allocatable GPUs of the usable nodes minus what non-terminal pods bound to them request."""
    free: dict[str, int] = {}
    for n in nodes:
        if node_usable(n, node_selector, tolerations):
            allocatable = (n.get("status") or {}).get("allocatable") or {}
            free[str((n.get("metadata") or {}).get("name"))] = _quantity_int(allocatable.get(GPU_RESOURCE, 0))
    for p in pods:
        node_name = (p.get("spec") or {}).get("nodeName")
        if node_name in free and not terminal(p):
            free[node_name] -= pod_gpu_request(p)
    return sum(max(v, 0) for v in free.values())


def parse_instance_id(instance_id: str) -> tuple[str, str]:
    namespace, sep, name = instance_id.partition("/")
    if not sep or not namespace or not name or "/" in name:
        raise ValueError(f"instance id {instance_id!r} is not <namespace>/<pod name>")
    return namespace, name


# --- the shape of what the target cluster answers ----------------------------------------------------------------


def _check_meta(meta_value: object, field: str) -> None:
    meta = replies.opt_obj(meta_value, field)
    for key in ("name", "namespace", "resourceVersion", "deletionTimestamp"):
        replies.opt_text(meta.get(key), replies.join(field, key), max_len=1024)
    replies.string_map(meta.get("labels"), replies.join(field, "labels"))
    replies.string_map(meta.get("annotations"), replies.join(field, "annotations"), max_len=1024 * 1024)


def _check_refs(holder: Mapping[str, Any], keys: Sequence[str], field: str) -> None:
    for key in keys:
        replies.opt_obj(holder.get(key), replies.join(field, key))


def _check_container(value: object, field: str) -> None:
    join = replies.join
    c = replies.obj(value, field)
    for i, port in enumerate(replies.opt_items(c.get("ports"), join(field, "ports"))):
        where = join(join(field, "ports"), i)
        p = replies.obj(port, where)
        replies.opt_integer(p.get("containerPort"), join(where, "containerPort"), low=1, high=65535)
        replies.opt_text(p.get("protocol"), join(where, "protocol"), max_len=16)
        replies.opt_text(p.get("name"), join(where, "name"), max_len=63)
    resources = replies.opt_obj(c.get("resources"), join(field, "resources"))
    _check_refs(resources, ("requests", "limits"), join(field, "resources"))
    for i, env in enumerate(replies.opt_items(c.get("env"), join(field, "env"))):
        where = join(join(field, "env"), i)
        value_from = replies.opt_obj(replies.obj(env, where).get("valueFrom"), join(where, "valueFrom"))
        _check_refs(value_from, ("configMapKeyRef", "secretKeyRef"), join(where, "valueFrom"))
    for i, env_from in enumerate(replies.opt_items(c.get("envFrom"), join(field, "envFrom"))):
        where = join(join(field, "envFrom"), i)
        _check_refs(replies.obj(env_from, where), ("configMapRef", "secretRef"), where)


def _check_volume(value: object, field: str) -> None:
    join = replies.join
    vol = replies.obj(value, field)
    replies.opt_text(vol.get("name"), join(field, "name"), max_len=253)
    _check_refs(vol, ("configMap", "secret"), field)
    projected = replies.opt_obj(vol.get("projected"), join(field, "projected"))
    for i, src in enumerate(replies.opt_items(projected.get("sources"), join(field, "projected.sources"))):
        where = join(join(field, "projected.sources"), i)
        _check_refs(replies.obj(src, where), ("configMap", "secret", "serviceAccountToken"), where)


def _check_container_status(value: object, field: str) -> None:
    join = replies.join
    cs = replies.obj(value, field)
    if not isinstance(cs.get("ready", False), bool):
        raise replies.ReplyError(join(field, "ready"), f"expected a boolean, got {replies.describe(cs.get('ready'))}")
    state = replies.opt_obj(cs.get("state"), join(field, "state"))
    terminated = replies.opt_obj(state.get("terminated"), join(field, "state.terminated"))
    where = join(field, "state.terminated")
    replies.opt_integer(terminated.get("exitCode"), join(where, "exitCode"), low=-(2**31), high=2**31)
    replies.opt_text(terminated.get("finishedAt"), join(where, "finishedAt"), max_len=64)


def check_pod(value: object, field: str) -> dict[str, Any]:
    """The pod when every field the provider reads has its API type and a sane size; ReplyError naming one that
    does not (a stand-in server or a broken proxy must not turn into a traceback or a wrong instance)."""
    join = replies.join
    pod = replies.obj(value, field)
    _check_meta(pod.get("metadata"), join(field, "metadata"))
    spec_field = join(field, "spec")
    spec = replies.opt_obj(pod.get("spec"), spec_field)
    replies.opt_text(spec.get("nodeName"), join(spec_field, "nodeName"), max_len=253)
    for key in ("containers", "initContainers"):
        for i, c in enumerate(replies.opt_items(spec.get(key), join(spec_field, key))):
            _check_container(c, join(join(spec_field, key), i))
    for i, vol in enumerate(replies.opt_items(spec.get("volumes"), join(spec_field, "volumes"))):
        _check_volume(vol, join(join(spec_field, "volumes"), i))
    for i, pull in enumerate(replies.opt_items(spec.get("imagePullSecrets"), join(spec_field, "imagePullSecrets"))):
        replies.obj(pull, join(join(spec_field, "imagePullSecrets"), i))
    status_field = join(field, "status")
    status = replies.opt_obj(pod.get("status"), status_field)
    for key in ("phase", "reason", "message", "podIP", "startTime"):
        replies.opt_text(status.get(key), join(status_field, key), max_len=4096)
    for key in ("containerStatuses", "initContainerStatuses"):
        for i, cs in enumerate(replies.opt_items(status.get(key), join(status_field, key))):
            _check_container_status(cs, join(join(status_field, key), i))
    return pod


def check_node(value: object, field: str) -> dict[str, Any]:
    """The node when the fields `node_usable` and `free_gpus` read have their API types; ReplyError otherwise."""
    join = replies.join
    node = replies.obj(value, field)
    _check_meta(node.get("metadata"), join(field, "metadata"))
    spec = replies.opt_obj(node.get("spec"), join(field, "spec"))
    unschedulable = spec.get("unschedulable")
    if unschedulable is not None and not isinstance(unschedulable, bool):
        raise replies.ReplyError(
            join(field, "spec.unschedulable"), f"expected a boolean, got {replies.describe(unschedulable)}"
        )
    for i, taint in enumerate(replies.opt_items(spec.get("taints"), join(field, "spec.taints"))):
        where = join(join(field, "spec.taints"), i)
        t = replies.obj(taint, where)
        for key in ("key", "value", "effect"):
            replies.opt_text(t.get(key), join(where, key), max_len=1024)
    status = replies.opt_obj(node.get("status"), join(field, "status"))
    for i, cond in enumerate(replies.opt_items(status.get("conditions"), join(field, "status.conditions"))):
        where = join(join(field, "status.conditions"), i)
        c = replies.obj(cond, where)
        for key in ("type", "status"):
            replies.opt_text(c.get(key), join(where, key), max_len=1024)
    replies.opt_obj(status.get("allocatable"), join(field, "status.allocatable"))
    return node


def check_object(value: object, field: str) -> dict[str, Any]:
    """A ConfigMap or Secret: metadata, and ``data`` / ``binaryData`` as objects of strings."""
    obj = replies.obj(value, field)
    _check_meta(obj.get("metadata"), replies.join(field, "metadata"))
    for key in ("data", "binaryData"):
        replies.string_map(obj.get(key), replies.join(field, key), max_len=4 * 1024 * 1024)
    replies.opt_text(obj.get("type"), replies.join(field, "type"), max_len=256)
    return obj
