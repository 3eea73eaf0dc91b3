"""Another Kubernetes cluster as a burst provider: each burst pod becomes one pod there.

The source pod (the one the virtual node was given) is translated, not copied verbatim, because most of what ties it
to the source cluster means nothing in the target. The rules, all in `translate_pod`:

* **Namespace.** ``namespace_map[source namespace]``, else the same name. The target namespace must exist: the
  provider does not create namespaces (their quotas, RBAC and policies belong to whoever runs that cluster), and a
  missing one is a `ProviderError` naming it.
* **Name.** ``<source name>-<source uid>``. The uid (36 characters) is kept whole, so the target name is unique per
  source pod whatever happens to the rest; the source name has dots turned into dashes and is cut to the
  26 characters that fit in a 63-character DNS label, without trailing dashes. The instance id is
  ``<target namespace>/<target name>``.
* **Labels.** The source labels, plus ``burst.gpucluster.io/node`` (the virtual node: what `list_instances`
  selects), ``.../source-namespace``, ``.../source-name`` (cut to a valid label value) and ``.../source-uid``.
  The full source name is also kept in the annotation ``burst.gpucluster.io/source-name``; the tags are read
  back from labels and that annotation.
* **Annotations.** The source annotations without ``kubectl.kubernetes.io/*`` (last-applied configuration and
  the like), plus ``burst.gpucluster.io/gpu-type`` and ``burst.gpucluster.io/gpu-count``.
* **Spec.** ``nodeName``, ``affinity``, ``priorityClassName``/``priority``/``preemptionPolicy``,
  ``schedulerName``, ``readinessGates``, ``overhead``, ``ephemeralContainers`` and the deprecated
  ``serviceAccount`` are dropped; ``serviceAccountName`` becomes the configured one (``default``) and
  ``automountServiceAccountToken`` false; projected service-account token volumes (``kube-api-access-*`` and any
  projected volume with a ``serviceAccountToken`` source) are dropped with their volumeMounts; ``nodeSelector``
  and ``tolerations`` are replaced by the configured ones (the source's virtual-node toleration means nothing
  there); ``restartPolicy`` and everything else is kept.
* **ConfigMaps and Secrets** the pod references (env ``valueFrom``, ``envFrom``, volumes, projected volume
  sources, ``imagePullSecrets``) are read from the source cluster through a `SourceReader` and copied under the
  **same name** into the target namespace (created or replaced), labelled ``burst.gpucluster.io/copy=true`` and
  ``burst.gpucluster.io/node=<node>``. Same name means the pod spec needs no rewriting and replicas of one
  Deployment share one copy. An object of that name that this node did not copy is never overwritten (a
  `ProviderError` says so) and ``kube-root-ca.crt`` is never copied (every namespace has its own). The reader gives
  data only, so a Secret copy is Opaque unless its keys say registry credentials (``.dockerconfigjson``,
  ``.dockercfg``). A missing object that every reference marks ``optional`` (pull secrets always) is skipped.
  `delete_instance` deletes the pod, then every copy in that namespace that no live (not terminating) pod of the
  same node references any more. Creating copies and sweeping them are serialised within one provider object.

State of a target pod (`pod_state`): being deleted -> terminated; Pending -> creating; Running with every
container ready -> running (address = pod IP), Running otherwise -> creating; Succeeded -> exited (0);
Failed -> failed (exit code of the first terminated container that failed); Unknown (node lost) -> failed;
gone -> None.

Offers (`free_gpus`): for every configured GPU type the configured price, and as available GPUs the sum over the
target nodes that are Ready, schedulable, match the configured nodeSelector and whose NoSchedule/NoExecute taints
the configured tolerations tolerate, of allocatable ``nvidia.com/gpu`` minus the GPU requests of the
non-terminal pods bound to them; bounded by ``max_gpus`` minus the GPUs that burst pods (any node's) already
hold in the target cluster. The target cluster does not tell GPU types apart here: pin them with nodeSelector.

Errors from the API (status, reason, the server's message) and connection failures become `ProviderError`s
naming the provider and the call; the kubeconfig's contents never appear in them.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol

import urllib3
import yaml
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from .base import Instance, InstanceSpec, InstanceState, InstanceTags, Offer, Port, Provider, ProviderError

LABEL_PREFIX = "burst.gpucluster.io/"
NODE_LABEL = LABEL_PREFIX + "node"
SOURCE_NAMESPACE_LABEL = LABEL_PREFIX + "source-namespace"
SOURCE_NAME_LABEL = LABEL_PREFIX + "source-name"
SOURCE_UID_LABEL = LABEL_PREFIX + "source-uid"
COPY_LABEL = LABEL_PREFIX + "copy"
SOURCE_NAME_ANNOTATION = LABEL_PREFIX + "source-name"
GPU_TYPE_ANNOTATION = LABEL_PREFIX + "gpu-type"
GPU_COUNT_ANNOTATION = LABEL_PREFIX + "gpu-count"
GPU_RESOURCE = "nvidia.com/gpu"

#: A DNS label (what a pod name must be to serve as a hostname) is at most 63 characters.
MAX_NAME = 63
UID_LENGTH = 36
#: Every namespace carries its own cluster CA bundle under this name; copying the source's would be wrong.
NEVER_COPIED_CONFIGMAPS = frozenset({"kube-root-ca.crt"})
DROPPED_ANNOTATION_PREFIX = "kubectl.kubernetes.io/"
TOKEN_VOLUME_PREFIX = "kube-api-access-"
#: Pod spec fields that tie a pod to the source cluster (its nodes, classes, schedulers, conditions).
DROPPED_SPEC_FIELDS = (
    "nodeName",
    "affinity",
    "priorityClassName",
    "priority",
    "preemptionPolicy",
    "schedulerName",
    "readinessGates",
    "overhead",
    "ephemeralContainers",
    "serviceAccount",
)
DEFAULT_GRACE_PERIOD_SECONDS = 30
#: (connect, read) seconds for every API call, so a dead cluster cannot hang the service's threads.
DEFAULT_REQUEST_TIMEOUT = (5.0, 30.0)

_LABEL_VALUE_EDGE = re.compile(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$")

ObjectKind = Literal["ConfigMap", "Secret"]


class TranslationError(ValueError):
    """The source pod cannot be translated; the message says which field is wrong."""


class SourceReader(Protocol):
    """Reads the objects a pod references from the source cluster; None when absent.

    The shape of daemons/burst_provider/pods.py's ReferenceResolver, which the service's source cluster implements.
    """

    def config_map(self, namespace: str, name: str) -> Mapping[str, str] | None: ...

    def secret(self, namespace: str, name: str) -> Mapping[str, str] | None:
        """The Secret's data, base64-decoded."""
        ...


class SecretSource(Protocol):
    """The provider secrets (one value per key name); `get` of the kubeconfig secret returns its text."""

    def get(self, name: str) -> str: ...


class KubernetesSettingsLike(Protocol):
    """The ``kubernetes:`` block of a provider's settings (see daemons/burst_provider/settings.py)."""

    @property
    def kubeconfig_secret(self) -> str: ...

    @property
    def namespace_map(self) -> Mapping[str, str]: ...

    @property
    def node_selector(self) -> Mapping[str, str]: ...

    @property
    def tolerations(self) -> Sequence[Any]: ...


class GpuTypeLike(Protocol):
    @property
    def price_per_gpu_hour(self) -> float: ...


class ProviderSettingsLike(Protocol):
    """One entry of the burst settings' ``providers`` list, of kind kubernetes."""

    @property
    def name(self) -> str: ...

    @property
    def max_gpus(self) -> int: ...

    @property
    def gpu_types(self) -> Mapping[str, GpuTypeLike]: ...

    @property
    def kubernetes(self) -> KubernetesSettingsLike | None: ...


class KubernetesApiError(ProviderError):
    """A call to the target cluster's API failed; `status` is the HTTP status (None: not reached)."""

    def __init__(self, provider: str, call: str, detail: str, status: int | None) -> None:
        super().__init__(provider, call, detail)
        self.status = status


# --- pure translation ------------------------------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class ObjectRef:
    """A ConfigMap or Secret a pod references; `optional` only when every reference to it says so."""

    kind: ObjectKind
    name: str
    optional: bool = False


@dataclass(frozen=True)
class Translation:
    """The target pod and what has to be copied next to it."""

    namespace: str
    name: str
    pod: dict[str, Any]
    refs: tuple[ObjectRef, ...]


def target_pod_name(source_name: str, uid: str) -> str:
    """``<source name>-<uid>`` within 63 characters; the uid stays whole, so the name is unique per source pod."""
    if not uid:
        raise TranslationError("the source pod has no uid")
    room = MAX_NAME - len(uid) - 1
    prefix = source_name.lower().replace(".", "-")[: max(room, 0)].rstrip("-")
    name = f"{prefix}-{uid}" if prefix else uid
    return name[:MAX_NAME]


def label_value(value: str) -> str:
    """`value` cut to a valid label value: at most 63 characters, starting and ending alphanumeric."""
    return _LABEL_VALUE_EDGE.sub("", value[:MAX_NAME])


def is_token_volume(volume: Mapping[str, Any]) -> bool:
    """A service-account token volume: it would carry a source-cluster credential into the target."""
    if str(volume.get("name", "")).startswith(TOKEN_VOLUME_PREFIX):
        return True
    sources = (volume.get("projected") or {}).get("sources") or []
    return any("serviceAccountToken" in s for s in sources if isinstance(s, Mapping))


def _containers(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [c for key in ("initContainers", "containers") for c in spec.get(key) or [] if isinstance(c, dict)]


def referenced_objects(spec: Mapping[str, Any]) -> tuple[ObjectRef, ...]:
    """Every ConfigMap and Secret the pod spec references (env, envFrom, volumes, pull secrets), sorted."""
    found: dict[tuple[ObjectKind, str], bool] = {}

    def add(kind: ObjectKind, ref: Mapping[str, Any] | None, key: str = "name", optional: bool | None = None) -> None:
        if not ref or not ref.get(key):
            return
        opt = bool(ref.get("optional", False)) if optional is None else optional
        k = (kind, str(ref[key]))
        found[k] = found.get(k, True) and opt

    for c in _containers(spec):
        for env in c.get("env") or []:
            value_from = env.get("valueFrom") or {}
            add("ConfigMap", value_from.get("configMapKeyRef"))
            add("Secret", value_from.get("secretKeyRef"))
        for env_from in c.get("envFrom") or []:
            add("ConfigMap", env_from.get("configMapRef"))
            add("Secret", env_from.get("secretRef"))
    for vol in spec.get("volumes") or []:
        if is_token_volume(vol):
            continue
        add("ConfigMap", vol.get("configMap"))
        add("Secret", vol.get("secret"), key="secretName")
        for src in (vol.get("projected") or {}).get("sources") or []:
            add("ConfigMap", src.get("configMap"))
            add("Secret", src.get("secret"))
    for pull in spec.get("imagePullSecrets") or []:
        # A missing pull secret makes the kubelet try anonymously, so it never blocks the pod.
        add("Secret", pull, optional=True)
    return tuple(
        sorted(
            ObjectRef(kind, name, opt)
            for (kind, name), opt in found.items()
            if not (kind == "ConfigMap" and name in NEVER_COPIED_CONFIGMAPS)
        )
    )


def _without_token_volumes(spec: dict[str, Any]) -> None:
    dropped = {v.get("name") for v in spec.get("volumes") or [] if is_token_volume(v)}
    if not dropped:
        return
    spec["volumes"] = [v for v in spec.get("volumes") or [] if v.get("name") not in dropped]
    if not spec["volumes"]:
        del spec["volumes"]
    for c in _containers(spec):
        if "volumeMounts" in c:
            c["volumeMounts"] = [m for m in c["volumeMounts"] if m.get("name") not in dropped]
            if not c["volumeMounts"]:
                del c["volumeMounts"]


def translate_pod(
    source: Mapping[str, Any],
    tags: InstanceTags,
    *,
    namespace_map: Mapping[str, str],
    node_selector: Mapping[str, str],
    tolerations: Sequence[Mapping[str, Any]],
    service_account: str = "default",
    gpu_type: str = "",
    gpu_count: int = 0,
) -> Translation:
    """The target pod for a source pod (see the module docstring for every rule). Pure: touches no cluster."""
    meta = source.get("metadata")
    spec = source.get("spec")
    if not isinstance(meta, Mapping) or not isinstance(spec, Mapping):
        raise TranslationError("the source pod has no metadata or spec")
    if not _containers(spec):
        raise TranslationError(f"source pod {tags.namespace}/{tags.pod} has no containers")
    namespace = namespace_map.get(tags.namespace, tags.namespace)
    name = target_pod_name(tags.pod, tags.uid)
    labels = {
        **{str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
        NODE_LABEL: label_value(tags.node),
        SOURCE_NAMESPACE_LABEL: label_value(tags.namespace),
        SOURCE_NAME_LABEL: label_value(tags.pod),
        SOURCE_UID_LABEL: label_value(tags.uid),
    }
    annotations = {
        str(k): str(v)
        for k, v in (meta.get("annotations") or {}).items()
        if not str(k).startswith(DROPPED_ANNOTATION_PREFIX)
    }
    annotations[SOURCE_NAME_ANNOTATION] = tags.pod
    if gpu_type:
        annotations[GPU_TYPE_ANNOTATION] = gpu_type
    annotations[GPU_COUNT_ANNOTATION] = str(gpu_count)

    new_spec: dict[str, Any] = json.loads(json.dumps(spec))  # a deep copy that is plain JSON
    for key in DROPPED_SPEC_FIELDS:
        new_spec.pop(key, None)
    new_spec["serviceAccountName"] = service_account
    new_spec["automountServiceAccountToken"] = False
    _without_token_volumes(new_spec)
    new_spec.pop("nodeSelector", None)
    new_spec.pop("tolerations", None)
    if node_selector:
        new_spec["nodeSelector"] = dict(node_selector)
    if tolerations:
        new_spec["tolerations"] = [dict(t) for t in tolerations]

    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": annotations},
        "spec": new_spec,
    }
    return Translation(namespace=namespace, name=name, pod=pod, refs=referenced_objects(new_spec))


def secret_type_of(data: Mapping[str, str]) -> str:
    """The Secret type its keys imply: registry credentials must keep theirs for the kubelet to use them."""
    if ".dockerconfigjson" in data:
        return "kubernetes.io/dockerconfigjson"
    if ".dockercfg" in data:
        return "kubernetes.io/dockercfg"
    return "Opaque"


def copy_object(
    kind: ObjectKind, name: str, data: Mapping[str, str], namespace: str, tags: InstanceTags
) -> dict[str, Any]:
    """The target copy of a source ConfigMap or Secret: same name, same data, labelled as this node's copy."""
    if not name:
        raise TranslationError(f"a {kind} reference has no name")
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                COPY_LABEL: "true",
                NODE_LABEL: label_value(tags.node),
                SOURCE_NAMESPACE_LABEL: label_value(tags.namespace),
            },
            "annotations": {SOURCE_NAME_ANNOTATION: f"{tags.namespace}/{name}"},
        },
    }
    if kind == "ConfigMap":
        if data:
            body["data"] = {str(k): str(v) for k, v in data.items()}
        return body
    if data:
        body["data"] = {str(k): base64.b64encode(str(v).encode()).decode() for k, v in data.items()}
    body["type"] = secret_type_of(data)
    return body


# --- pure state and capacity -----------------------------------------------------------------------------------


def _timestamp(value: object) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


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
        if (t := _timestamp(((cs.get("state") or {}).get("terminated") or {}).get("finishedAt"))) is not None
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
        started_at=_timestamp(status.get("startTime")),
        finished_at=max(finished) if finished and state in (InstanceState.EXITED, InstanceState.FAILED) else None,
    )


def _quantity_int(value: object) -> int:
    """An integer resource quantity such as nvidia.com/gpu ("8"); anything else counts as 0."""
    try:
        return int(str(value))
    except ValueError:
        return 0


def pod_gpu_request(pod: Mapping[str, Any]) -> int:
    """GPUs a pod holds: the larger of its containers' sum and its largest init container (requests, else limits)."""
    spec = pod.get("spec") or {}

    def gpus(c: Mapping[str, Any]) -> int:
        res = c.get("resources") or {}
        value = (res.get("requests") or {}).get(GPU_RESOURCE, (res.get("limits") or {}).get(GPU_RESOURCE, 0))
        return _quantity_int(value)

    main = sum(gpus(c) for c in spec.get("containers") or [])
    init = max((gpus(c) for c in spec.get("initContainers") or []), default=0)
    return max(main, init)


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


def _terminal(pod: Mapping[str, Any]) -> bool:
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
        if node_name in free and not _terminal(p):
            free[node_name] -= pod_gpu_request(p)
    return sum(max(v, 0) for v in free.values())


def toleration_dict(toleration: object) -> dict[str, Any]:
    """A toleration from the settings (a mapping, or a model with `to_k8s` or `model_dump`) as API JSON."""
    if isinstance(toleration, Mapping):
        return {str(k): v for k, v in toleration.items() if v is not None}
    to_k8s = getattr(toleration, "to_k8s", None)
    if callable(to_k8s):
        return dict(to_k8s())
    dump = getattr(toleration, "model_dump", None)
    if callable(dump):
        return dict(dump(by_alias=True, exclude_none=True))
    raise TypeError(f"cannot read a toleration from {type(toleration).__name__}")


def parse_instance_id(instance_id: str) -> tuple[str, str]:
    namespace, sep, name = instance_id.partition("/")
    if not sep or not namespace or not name or "/" in name:
        raise ValueError(f"instance id {instance_id!r} is not <namespace>/<pod name>")
    return namespace, name


# --- the target cluster's API, typed -----------------------------------------------------------------------------


def api_client_from_kubeconfig(provider: str, text: str) -> Any:
    """An ApiClient for a kubeconfig's current context. Errors name what is wrong, never the contents."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise ProviderError(provider, "kubeconfig", f"not valid YAML{where}") from None
    if not isinstance(data, dict):
        raise ProviderError(provider, "kubeconfig", "not a kubeconfig (expected a YAML mapping)")
    configuration = k8s_client.Configuration()
    try:
        load: Callable[..., None] = k8s_config.load_kube_config_from_dict
        load(data, client_configuration=configuration)
    except (k8s_config.ConfigException, KeyError, TypeError, ValueError) as exc:
        raise ProviderError(provider, "kubeconfig", f"cannot be used: {type(exc).__name__}") from None
    return k8s_client.ApiClient(configuration)


class KubeApi:
    """The few CoreV1 calls the provider makes, returning API JSON; every failure is a `KubernetesApiError`."""

    def __init__(self, provider: str, api_client: Any, timeout: tuple[float, float]) -> None:
        self._provider = provider
        self._core = k8s_client.CoreV1Api(api_client)
        self._timeout = timeout
        self._host = str(getattr(getattr(api_client, "configuration", None), "host", "?"))

    def _raw(self, call: str, method: str, *args: Any, missing_ok: bool = False, **kwargs: Any) -> bytes | None:
        try:
            resp = getattr(self._core, method)(*args, _preload_content=False, _request_timeout=self._timeout, **kwargs)
        except ApiException as exc:
            if missing_ok and exc.status == 404:
                return None
            raise KubernetesApiError(self._provider, call, _api_detail(exc), exc.status) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            detail = f"cannot reach the API server at {self._host}: {type(exc).__name__}: {str(exc)[:300]}"
            raise KubernetesApiError(self._provider, call, detail, None) from None
        data = resp.data
        return data if isinstance(data, bytes) else str(data).encode()

    def _json(self, call: str, method: str, *args: Any, missing_ok: bool = False, **kwargs: Any) -> dict[str, Any]:
        raw = self._raw(call, method, *args, missing_ok=missing_ok, **kwargs)
        if raw is None:
            return {}
        try:
            parsed = json.loads(raw) if raw else {}
        except ValueError:
            raise KubernetesApiError(self._provider, call, "the API server's answer is not JSON", None) from None
        return parsed if isinstance(parsed, dict) else {}

    def read_pod(self, call: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self._json(call, "read_namespaced_pod", name, namespace, missing_ok=True) or None

    def create_pod(self, call: str, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self._json(call, "create_namespaced_pod", namespace, dict(body))

    def delete_pod(self, call: str, namespace: str, name: str, grace_seconds: int) -> None:
        self._raw(call, "delete_namespaced_pod", name, namespace, grace_period_seconds=grace_seconds, missing_ok=True)

    def list_pods(
        self, call: str, namespace: str | None = None, label_selector: str = "", field_selector: str = ""
    ) -> list[dict[str, Any]]:
        kwargs: dict[str, Any] = {"label_selector": label_selector, "field_selector": field_selector}
        if namespace is None:
            data = self._json(call, "list_pod_for_all_namespaces", **kwargs)
        else:
            data = self._json(call, "list_namespaced_pod", namespace, **kwargs)
        return list(data.get("items") or [])

    def list_nodes(self, call: str) -> list[dict[str, Any]]:
        return list(self._json(call, "list_node").get("items") or [])

    def namespace_exists(self, call: str, name: str) -> bool | None:
        """True or False; None when this identity may not read namespaces (the create then tells)."""
        try:
            return self._raw(call, "read_namespace", name, missing_ok=True) is not None
        except KubernetesApiError as exc:
            if exc.status == 403:
                return None
            raise

    def read_object(self, call: str, kind: ObjectKind, namespace: str, name: str) -> dict[str, Any] | None:
        return self._json(call, f"read_namespaced_{_method_suffix(kind)}", name, namespace, missing_ok=True) or None

    def create_object(self, call: str, kind: ObjectKind, namespace: str, body: Mapping[str, Any]) -> None:
        self._raw(call, f"create_namespaced_{_method_suffix(kind)}", namespace, dict(body))

    def replace_object(self, call: str, kind: ObjectKind, namespace: str, body: Mapping[str, Any]) -> None:
        name = body["metadata"]["name"]
        self._raw(call, f"replace_namespaced_{_method_suffix(kind)}", name, namespace, dict(body))

    def delete_object(self, call: str, kind: ObjectKind, namespace: str, name: str) -> None:
        self._raw(call, f"delete_namespaced_{_method_suffix(kind)}", name, namespace, missing_ok=True)

    def list_objects(self, call: str, kind: ObjectKind, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        data = self._json(call, f"list_namespaced_{_method_suffix(kind)}", namespace, label_selector=label_selector)
        return list(data.get("items") or [])

    def pod_log(self, call: str, namespace: str, name: str, container: str, tail: int | None) -> str:
        kwargs: dict[str, Any] = {}
        if container:
            kwargs["container"] = container
        if tail is not None:
            kwargs["tail_lines"] = tail
        raw = self._raw(call, "read_namespaced_pod_log", name, namespace, **kwargs)
        return (raw or b"").decode("utf-8", errors="replace")


def _method_suffix(kind: ObjectKind) -> str:
    return "config_map" if kind == "ConfigMap" else "secret"


def _api_detail(exc: ApiException) -> str:
    """Status, reason and the server's own message (a Status object's `message`), never request contents."""
    message = ""
    try:
        body = json.loads(exc.body) if exc.body else {}
        if isinstance(body, dict):
            message = str(body.get("message", ""))
    except (TypeError, ValueError):
        message = ""
    return f"HTTP {exc.status} {exc.reason}" + (f": {message[:500]}" if message else "")


# --- the provider ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterPlacement:
    """Where and how burst pods land in the target cluster."""

    namespace_map: Mapping[str, str]
    node_selector: Mapping[str, str]
    tolerations: tuple[Mapping[str, Any], ...]
    service_account: str = "default"


class KubernetesClusterProvider(Provider):
    """Runs burst pods as pods of another Kubernetes cluster (see the module docstring for the rules).

    ``KubernetesClusterProvider(settings, secrets)`` is the registry's constructor (the kubeconfig is the secret
    that ``settings.kubernetes.kubeconfigSecret`` names); `connect` builds one from plain values. The source
    cluster reader (for referenced ConfigMaps and Secrets) is given with `use_source` or ``source_reader=``.
    """

    def __init__(
        self,
        settings: ProviderSettingsLike,
        secrets: SecretSource,
        source_reader: SourceReader | None = None,
        *,
        grace_period_seconds: int = DEFAULT_GRACE_PERIOD_SECONDS,
        request_timeout: tuple[float, float] = DEFAULT_REQUEST_TIMEOUT,
    ) -> None:
        k = settings.kubernetes
        if k is None:
            raise ProviderError(settings.name, "settings", "kind kubernetes needs a kubernetes: block")
        try:
            kubeconfig = secrets.get(k.kubeconfig_secret)
        except LookupError:
            raise ProviderError(
                settings.name, "settings", f"the kubeconfig secret {k.kubeconfig_secret!r} is not available"
            ) from None
        self._setup(
            name=settings.name,
            api_client=api_client_from_kubeconfig(settings.name, kubeconfig),
            gpu_types={gpu: t.price_per_gpu_hour for gpu, t in settings.gpu_types.items()},
            max_gpus=settings.max_gpus,
            placement=ClusterPlacement(
                namespace_map=dict(k.namespace_map),
                node_selector=dict(k.node_selector),
                tolerations=tuple(toleration_dict(t) for t in k.tolerations),
            ),
            source_reader=source_reader,
            grace_period_seconds=grace_period_seconds,
            request_timeout=request_timeout,
        )

    @classmethod
    def from_settings(
        cls, settings: ProviderSettingsLike, secrets: SecretSource, source_reader: SourceReader | None = None
    ) -> KubernetesClusterProvider:
        """The same as the constructor, named for readers of the registry."""
        return cls(settings, secrets, source_reader)

    @classmethod
    def connect(
        cls,
        name: str,
        api: Any,
        gpu_types: Mapping[str, float],
        *,
        max_gpus: int,
        namespace_map: Mapping[str, str] | None = None,
        node_selector: Mapping[str, str] | None = None,
        tolerations: Sequence[object] = (),
        service_account: str = "default",
        source_reader: SourceReader | None = None,
        grace_period_seconds: int = DEFAULT_GRACE_PERIOD_SECONDS,
        request_timeout: tuple[float, float] = DEFAULT_REQUEST_TIMEOUT,
    ) -> KubernetesClusterProvider:
        """A provider from plain values: `api` is a kubernetes ApiClient or a kubeconfig's text, `gpu_types` maps
        our GPU type to its price per GPU-hour."""
        self = cls.__new__(cls)
        self._setup(
            name=name,
            api_client=api_client_from_kubeconfig(name, api) if isinstance(api, str) else api,
            gpu_types=gpu_types,
            max_gpus=max_gpus,
            placement=ClusterPlacement(
                namespace_map=dict(namespace_map or {}),
                node_selector=dict(node_selector or {}),
                tolerations=tuple(toleration_dict(t) for t in tolerations),
                service_account=service_account,
            ),
            source_reader=source_reader,
            grace_period_seconds=grace_period_seconds,
            request_timeout=request_timeout,
        )
        return self

    def _setup(
        self,
        *,
        name: str,
        api_client: Any,
        gpu_types: Mapping[str, float],
        max_gpus: int,
        placement: ClusterPlacement,
        source_reader: SourceReader | None,
        grace_period_seconds: int,
        request_timeout: tuple[float, float],
    ) -> None:
        self.name = name
        self._api = KubeApi(name, api_client, request_timeout)
        self._prices = dict(gpu_types)
        self._max_gpus = max_gpus
        self._placement = placement
        self._source = source_reader
        self._grace = grace_period_seconds
        # Copies are shared between pods: creating one pod's copies and sweeping unreferenced ones must not
        # interleave within this process.
        self._copies_lock = threading.Lock()

    def use_source(self, source_reader: SourceReader) -> None:
        """Read referenced ConfigMaps and Secrets through `source_reader` (the service's source cluster)."""
        self._source = source_reader

    def _error(self, call: str, detail: str) -> ProviderError:
        return ProviderError(self.name, call, detail)

    def translate(self, spec: InstanceSpec) -> Translation:
        """The target pod for `spec` under this provider's placement settings."""
        if not spec.pod:
            raise self._error("create_instance", f"{spec.tags.key()}: the source pod is missing from the request")
        try:
            return translate_pod(
                spec.pod,
                spec.tags,
                namespace_map=self._placement.namespace_map,
                node_selector=self._placement.node_selector,
                tolerations=self._placement.tolerations,
                service_account=self._placement.service_account,
                gpu_type=spec.gpu_type,
                gpu_count=spec.gpu_count,
            )
        except TranslationError as exc:
            raise self._error("create_instance", str(exc)) from None

    def create_instance(self, spec: InstanceSpec) -> Instance:
        call = "create_instance"
        t = self.translate(spec)
        if self._api.namespace_exists(call, t.namespace) is False:
            raise self._error(
                call, f"target namespace {t.namespace} (for source namespace {spec.tags.namespace}) does not exist"
            )
        with self._copies_lock:
            for ref in t.refs:
                self._copy(call, ref, spec.tags, t.namespace)
            try:
                created = self._api.create_pod(call, t.namespace, t.pod)
            except KubernetesApiError as exc:
                if exc.status != 409:
                    self._sweep_after_failure(call, t.namespace)
                    raise
                created = self._existing(call, t, spec.tags)
        inst = instance_from_pod(self.name, created)
        if inst is None:
            raise self._error(call, f"pod {t.namespace}/{t.name} came back without its tags")
        return inst

    def _sweep_after_failure(self, call: str, namespace: str) -> None:
        """Remove copies a refused pod would have used; the refusal, not a sweep problem, is what gets reported."""
        try:
            self._sweep_copies(call, namespace)
        except ProviderError:
            return

    def _existing(self, call: str, t: Translation, tags: InstanceTags) -> dict[str, Any]:
        """Creating again is idempotent: the pod of the same source uid is the instance."""
        pod = self._api.read_pod(call, t.namespace, t.name)
        found = tags_of(pod) if pod else None
        if pod is None or found is None or found.uid != tags.uid:
            raise self._error(call, f"pod {t.namespace}/{t.name} exists and belongs to something else")
        return pod

    def _read_source(self, call: str, ref: ObjectRef, namespace: str) -> Mapping[str, str] | None:
        if self._source is None:
            raise self._error(call, f"the pod references {ref.kind} {namespace}/{ref.name} but no source reader is set")
        try:
            if ref.kind == "ConfigMap":
                return self._source.config_map(namespace, ref.name)
            return self._source.secret(namespace, ref.name)
        except LookupError:
            return None
        except Exception as exc:  # the reader's client library raises its own types; name it, keep the message
            raise self._error(
                call, f"cannot read {ref.kind} {namespace}/{ref.name} from the source cluster: {type(exc).__name__}"
            ) from None

    def _copy(self, call: str, ref: ObjectRef, tags: InstanceTags, namespace: str) -> None:
        """Create or replace the target copy of one referenced object (never one this node did not copy)."""
        source = self._read_source(call, ref, tags.namespace)
        if source is None:
            if ref.optional:
                return
            raise self._error(call, f"{ref.kind} {tags.namespace}/{ref.name} referenced by the pod does not exist")
        try:
            body = copy_object(ref.kind, ref.name, source, namespace, tags)
        except TranslationError as exc:
            raise self._error(call, str(exc)) from None
        existing = self._api.read_object(call, ref.kind, namespace, ref.name)
        if existing is None:
            try:
                self._api.create_object(call, ref.kind, namespace, body)
                return
            except KubernetesApiError as exc:
                if exc.status != 409:
                    raise
            existing = self._api.read_object(call, ref.kind, namespace, ref.name) or {}
        labels = (existing.get("metadata") or {}).get("labels") or {}
        if labels.get(COPY_LABEL) != "true" or labels.get(NODE_LABEL) != label_value(tags.node):
            raise self._error(
                call,
                f"{ref.kind} {namespace}/{ref.name} exists in the target and is not this node's copy: not replaced",
            )
        if all(existing.get(k) == body.get(k) for k in ("data", "binaryData", "type")) and not body.get("stringData"):
            return
        body["metadata"]["resourceVersion"] = (existing.get("metadata") or {}).get("resourceVersion")
        self._api.replace_object(call, ref.kind, namespace, body)

    def get_instance(self, instance_id: str) -> Instance | None:
        namespace, name = self._parse("get_instance", instance_id)
        pod = self._api.read_pod("get_instance", namespace, name)
        return instance_from_pod(self.name, pod) if pod else None

    def delete_instance(self, instance_id: str) -> None:
        call = "delete_instance"
        namespace, name = self._parse(call, instance_id)
        self._api.delete_pod(call, namespace, name, self._grace)
        with self._copies_lock:
            self._sweep_copies(call, namespace)

    def _sweep_copies(self, call: str, namespace: str) -> None:
        """Delete this namespace's copies that no live pod of the node that copied them references any more."""
        live: set[tuple[str, str, str]] = set()
        for pod in self._api.list_pods(call, namespace, label_selector=NODE_LABEL):
            meta = pod.get("metadata") or {}
            if meta.get("deletionTimestamp") or _terminal(pod):
                continue
            node = (meta.get("labels") or {}).get(NODE_LABEL, "")
            live.update((node, r.kind, r.name) for r in referenced_objects(pod.get("spec") or {}))
        kinds: tuple[ObjectKind, ...] = ("ConfigMap", "Secret")
        for kind in kinds:
            for obj in self._api.list_objects(call, kind, namespace, f"{COPY_LABEL}=true"):
                meta = obj.get("metadata") or {}
                node = (meta.get("labels") or {}).get(NODE_LABEL, "")
                if (node, kind, meta.get("name", "")) not in live:
                    self._api.delete_object(call, kind, namespace, str(meta.get("name")))

    def list_instances(self, node: str) -> list[Instance]:
        call = "list_instances"
        selector = f"{NODE_LABEL}={label_value(node)}"
        pods = self._in_target_namespaces(call, lambda ns: self._api.list_pods(call, ns, label_selector=selector))
        found = (instance_from_pod(self.name, p) for p in pods)
        return sorted(
            (i for i in found if i is not None and i.tags.node == label_value(node)), key=lambda i: i.instance_id
        )

    def _in_target_namespaces(
        self, call: str, list_in: Callable[[str | None], list[dict[str, Any]]]
    ) -> list[dict[str, Any]]:
        """List across all namespaces, or across the mapped ones when this identity may not list cluster-wide."""
        try:
            return list_in(None)
        except KubernetesApiError as exc:
            if exc.status != 403 or not self._placement.namespace_map:
                raise
        return [p for ns in sorted(set(self._placement.namespace_map.values())) for p in list_in(ns)]

    def offers(self) -> list[Offer]:
        call = "offers"
        nodes = self._api.list_nodes(call)
        pods = self._api.list_pods(call, field_selector="status.phase!=Succeeded,status.phase!=Failed")
        free = free_gpus(nodes, pods, self._placement.node_selector, self._placement.tolerations)
        ours = sum(pod_gpu_request(p) for p in pods if NODE_LABEL in ((p.get("metadata") or {}).get("labels") or {}))
        available = max(0, min(free, self._max_gpus - ours))
        return [
            Offer(gpu_type=g, price_per_gpu_hour=price, available_gpus=available) for g, price in self._prices.items()
        ]

    def logs(self, instance_id: str, container: str, tail: int | None) -> str:
        namespace, name = self._parse("logs", instance_id)
        return self._api.pod_log("logs", namespace, name, container, tail)

    def _parse(self, call: str, instance_id: str) -> tuple[str, str]:
        try:
            return parse_instance_id(instance_id)
        except ValueError as exc:
            raise self._error(call, str(exc)) from None
