"""The source pod -> the target pod, and the ConfigMap and Secret copies next to it. Pure: touches no cluster.

The source pod (the one the virtual node was given) is translated, not copied verbatim, because most of what ties it
to the source cluster means nothing in the target. The rules, all in `translate_pod`:

* **Pod Security baseline.** A pod asking for what ``baseline`` refuses (host namespaces, hostPath, host ports, a
  privileged container, capabilities beyond baseline's, unconfined seccomp or AppArmor) is refused with the fields
  named, never copied: the home cluster's inference namespaces enforce baseline, the target's policy is not ours.
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
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from contract.guardrails_settings import BASELINE_CAPABILITIES
from daemons.burst_provider.providers.base import InstanceTags

LABEL_PREFIX = "burst.gpucluster.io/"
NODE_LABEL = LABEL_PREFIX + "node"
SOURCE_NAMESPACE_LABEL = LABEL_PREFIX + "source-namespace"
SOURCE_NAME_LABEL = LABEL_PREFIX + "source-name"
SOURCE_UID_LABEL = LABEL_PREFIX + "source-uid"
COPY_LABEL = LABEL_PREFIX + "copy"
SOURCE_NAME_ANNOTATION = LABEL_PREFIX + "source-name"
GPU_TYPE_ANNOTATION = LABEL_PREFIX + "gpu-type"
GPU_COUNT_ANNOTATION = LABEL_PREFIX + "gpu-count"

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

_LABEL_VALUE_EDGE = re.compile(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$")

ObjectKind = Literal["ConfigMap", "Secret"]


class TranslationError(ValueError):
    """The source pod cannot be translated; the message says which field is wrong."""


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


def beyond_baseline(spec: Mapping[str, Any]) -> list[str]:
    """What of a pod spec the Pod Security ``baseline`` standard refuses, by field: host namespaces, hostPath
    volumes, host ports, privileged containers, capabilities beyond baseline's, unconfined seccomp or AppArmor."""
    out = [f"spec.{f}" for f in ("hostNetwork", "hostPID", "hostIPC") if spec.get(f) is True]
    out += [
        f"spec.volumes[{i}] hostPath"
        for i, v in enumerate(spec.get("volumes") or [])
        if isinstance(v, Mapping) and v.get("hostPath") is not None
    ]
    contexts = [("spec.securityContext", spec.get("securityContext") or {})]
    for field in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(field) or []):
            if not isinstance(c, Mapping):
                continue
            where = f"spec.{field}[{i}]"
            sc = c.get("securityContext") or {}
            contexts.append((f"{where}.securityContext", sc))
            if isinstance(sc, Mapping) and sc.get("privileged") is True:
                out.append(f"{where}.securityContext.privileged")
            added = (sc.get("capabilities") or {}).get("add") or [] if isinstance(sc, Mapping) else []
            extra = sorted(str(a) for a in added if str(a) not in BASELINE_CAPABILITIES)
            if extra:
                out.append(f"{where}.securityContext.capabilities.add {extra}")
            out += [
                f"{where}.ports[{j}].hostPort"
                for j, p in enumerate(c.get("ports") or [])
                if isinstance(p, Mapping) and p.get("hostPort")
            ]
    for where, sc in contexts:
        if not isinstance(sc, Mapping):
            continue
        for profile in ("seccompProfile", "appArmorProfile"):
            if (sc.get(profile) or {}).get("type") == "Unconfined":
                out.append(f"{where}.{profile} Unconfined")
    return out


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
    beyond = beyond_baseline(spec)
    if beyond:
        shown = ", ".join(beyond[:5]) + (f" and {len(beyond) - 5} more" if len(beyond) > 5 else "")
        raise TranslationError(
            f"source pod {tags.namespace}/{tags.pod} asks for what the Pod Security baseline refuses ({shown}): the "
            "provider does not carry it into another cluster"
        )
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
