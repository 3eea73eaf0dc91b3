"""From a v1.Pod (as JSON) to the InstanceSpec a provider runs.

Everything a provider needs is resolved here, in the source cluster, before any provider is called: environment
references (ConfigMap and Secret keys, the pod's own name/namespace/uid) become literal values, so no provider ever
needs access to the source cluster. Whatever cannot be carried over raises :class:`PodTranslationError`, whose
message becomes the Failed pod's message.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Protocol

from contract.burst_settings import BurstSettings
from contract.constants import GPU_RESOURCE, GPU_TYPE_ANNOTATION
from contract.model import parse_quantity as _parse_quantity
from contract.model import pod_resource_count
from daemons.burst_provider.probes import ProbeSpecError, pod_probes
from daemons.burst_provider.providers.base import ContainerSpec, InstanceSpec, InstanceTags, Port

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"


class PodTranslationError(ValueError):
    """The pod cannot run on a provider as written; the message says which field or reference and why."""


class ReferenceResolver(Protocol):
    """Reads the objects a pod's environment refers to, in the source cluster. None: the object does not exist."""

    def config_map(self, namespace: str, name: str) -> dict[str, str] | None: ...

    def secret(self, namespace: str, name: str) -> dict[str, str] | None:
        """The Secret's data, already base64-decoded."""
        ...


def parse_quantity(value: object, where: str) -> float:
    """A Kubernetes quantity (``500m``, ``2``, ``16Gi``) as a number of base units."""
    text = str(value).strip()
    try:
        return float(_parse_quantity(text))
    except ValueError:
        raise PodTranslationError(f"{where}: {text!r} is not a quantity such as 500m or 16Gi") from None


def pod_identity(pod: Mapping[str, Any]) -> tuple[str, str, str]:
    """(namespace, name, uid); PodTranslationError when one is missing."""
    meta = pod.get("metadata") or {}
    ns, name, uid = meta.get("namespace") or "default", meta.get("name"), meta.get("uid")
    if not name or not uid:
        raise PodTranslationError("pod.metadata: name and uid are required")
    return str(ns), str(name), str(uid)


def _containers(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list((pod.get("spec") or {}).get("containers") or [])


def gpu_count(pod: Mapping[str, Any]) -> int:
    """GPUs the pod holds (``contract.model.pod_resource_count``: the one rule), to rent as many."""
    try:
        return pod_resource_count(pod.get("spec") or {}, GPU_RESOURCE)
    except ValueError as exc:
        raise PodTranslationError(str(exc)) from None


def gpu_type(pod: Mapping[str, Any], settings: BurstSettings) -> str:
    """The annotation, else the ``nvidia.com/gpu.product`` node selector, else the default type.

    A node-selector value that is not itself one of our GPU types (the GPU feature discovery label reads like
    ``NVIDIA-H100-80GB-HBM3``) maps to the one configured type whose name it contains.
    """
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if annotations.get(GPU_TYPE_ANNOTATION):
        return str(annotations[GPU_TYPE_ANNOTATION])
    product = ((pod.get("spec") or {}).get("nodeSelector") or {}).get(GPU_PRODUCT_LABEL)
    if product:
        known = settings.gpu_types()
        if product in known:
            return str(product)
        contained = [t for t in known if t.lower() in str(product).lower()]
        if len(contained) == 1:
            return contained[0]
        return str(product)
    return settings.virtual_node.default_gpu_type


def _field_ref(path: str, pod: Mapping[str, Any], where: str) -> str:
    meta = pod.get("metadata") or {}
    simple = {"metadata.name": "name", "metadata.namespace": "namespace", "metadata.uid": "uid"}
    if path in simple:
        return str(meta.get(simple[path]) or "")
    m = re.match(r"^metadata\.(labels|annotations)\['([^']+)'\]$", path)
    if m:
        return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
    if path == "spec.nodeName":
        return str((pod.get("spec") or {}).get("nodeName") or "")
    raise PodTranslationError(f"{where}: fieldRef {path!r} cannot be resolved for an external instance")


def _key_ref(kind: str, ref: Mapping[str, Any], namespace: str, resolver: ReferenceResolver, where: str) -> str | None:
    name, key, optional = ref.get("name"), ref.get("key"), bool(ref.get("optional"))
    data = resolver.config_map(namespace, str(name)) if kind == "ConfigMap" else resolver.secret(namespace, str(name))
    if data is None:
        if optional:
            return None
        raise PodTranslationError(f"{where}: {kind} {namespace}/{name} not found")
    if key not in data:
        if optional:
            return None
        raise PodTranslationError(f"{where}: key {key!r} not found in {kind} {namespace}/{name}")
    return data[str(key)]


def _env(
    c: Mapping[str, Any], i: int, pod: Mapping[str, Any], namespace: str, resolver: ReferenceResolver
) -> tuple[tuple[str, str], ...]:
    env: dict[str, str] = {}
    for j, src in enumerate(c.get("envFrom") or []):
        where = f"spec.containers[{i}].envFrom[{j}]"
        prefix = str(src.get("prefix") or "")
        for kind, field in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
            ref = src.get(field)
            if ref is None:
                continue
            name = str(ref.get("name"))
            data = resolver.config_map(namespace, name) if kind == "ConfigMap" else resolver.secret(namespace, name)
            if data is None:
                if ref.get("optional"):
                    continue
                raise PodTranslationError(f"{where}: {kind} {namespace}/{name} not found")
            env.update({prefix + k: v for k, v in data.items()})
    for j, var in enumerate(c.get("env") or []):
        where = f"spec.containers[{i}].env[{j}] ({var.get('name')})"
        source = var.get("valueFrom")
        if source is None:
            env[str(var["name"])] = str(var.get("value") or "")
            continue
        value: str | None
        if "configMapKeyRef" in source:
            value = _key_ref("ConfigMap", source["configMapKeyRef"], namespace, resolver, where)
        elif "secretKeyRef" in source:
            value = _key_ref("Secret", source["secretKeyRef"], namespace, resolver, where)
        elif "fieldRef" in source:
            value = _field_ref(str(source["fieldRef"].get("fieldPath")), pod, where)
        else:
            raise PodTranslationError(f"{where}: valueFrom {sorted(source)} is not supported on external instances")
        if value is not None:
            env[str(var["name"])] = value
    return tuple(env.items())


def _ports(c: Mapping[str, Any]) -> tuple[Port, ...]:
    return tuple(
        Port(port=int(p["containerPort"]), protocol=str(p.get("protocol") or "TCP"), name=str(p.get("name") or ""))
        for p in c.get("ports") or []
    )


def _requests(pod: Mapping[str, Any]) -> tuple[int, int]:
    cpu = 0.0
    memory = 0.0
    for i, c in enumerate(_containers(pod)):
        res = c.get("resources") or {}
        merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        if "cpu" in merged:
            cpu += parse_quantity(merged["cpu"], f"spec.containers[{i}].resources.requests.cpu")
        if "memory" in merged:
            memory += parse_quantity(merged["memory"], f"spec.containers[{i}].resources.requests.memory")
    return round(cpu * 1000), round(memory)


#: ``sleep N`` as an exec preStop hook commonly writes it (before Kubernetes had the sleep action).
_SLEEP_COMMANDS = (("sleep",), ("/bin/sleep",), ("/usr/bin/sleep",))
_SHELLS = ("sh", "/bin/sh", "bash", "/bin/bash")


def _exec_sleep(command: list[Any]) -> float | None:
    """N of an exec hook that only sleeps N seconds (``["sleep", "5"]``, ``["sh", "-c", "sleep 5"]``), else None."""
    words = [str(w) for w in command]
    if len(words) == 3 and words[0] in _SHELLS and words[1] == "-c":
        words = words[2].split()
    if len(words) == 2 and (words[0],) in _SLEEP_COMMANDS and re.fullmatch(r"\d{1,4}", words[1]):
        return float(words[1])
    return None


def prestop_sleep_seconds(pod: Mapping[str, Any]) -> float:
    """How long the pod keeps serving once told to stop: the longest preStop sleep of its containers
    (``lifecycle.preStop.sleep.seconds``, or an exec hook that only sleeps), within its grace period (30 s unset).

    The kubelet runs the hook before it stops the container and the endpoints mark the pod terminating meanwhile,
    so traffic leaves a replica before it goes. PodTranslationError for a hook that cannot run against a rented
    instance (any other exec command, httpGet, tcpSocket), naming the field.
    """
    spec = pod.get("spec") or {}
    grace = spec.get("terminationGracePeriodSeconds")
    longest = 0.0
    for i, c in enumerate(spec.get("containers") or []):
        hook = ((c.get("lifecycle") or {}).get("preStop")) or {}
        if not hook:
            continue
        where = f"spec.containers[{i}].lifecycle.preStop"
        seconds: float | None = None
        if isinstance(hook.get("sleep"), Mapping):
            value = hook["sleep"].get("seconds")
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                seconds = float(value)
        elif isinstance(hook.get("exec"), Mapping):
            seconds = _exec_sleep(list(hook["exec"].get("command") or []))
        if seconds is None:
            raise PodTranslationError(
                f"{where}: only a sleep (the sleep action, or an exec hook that runs nothing but sleep N) can be "
                "honoured on a rented instance"
            )
        longest = max(longest, seconds)
    if isinstance(grace, int) and not isinstance(grace, bool) and grace >= 0:
        longest = min(longest, float(grace))
    else:
        longest = min(longest, 30.0)
    return longest


def secret_env_sources(pod: Mapping[str, Any]) -> list[str]:
    """Where ``pod`` reads a Secret into a container's env (``secretKeyRef``, ``envFrom.secretRef``), by field."""
    out: list[str] = []
    spec = pod.get("spec") or {}
    for field in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(field) or []):
            for j, src in enumerate(c.get("envFrom") or []):
                if isinstance(src, Mapping) and src.get("secretRef") is not None:
                    out.append(f"spec.{field}[{i}].envFrom[{j}] (Secret {(src['secretRef'] or {}).get('name')})")
            for j, var in enumerate(c.get("env") or []):
                source = var.get("valueFrom") if isinstance(var, Mapping) else None
                if isinstance(source, Mapping) and source.get("secretKeyRef") is not None:
                    ref = source["secretKeyRef"] or {}
                    out.append(f"spec.{field}[{i}].env[{j}] {var.get('name')} (Secret {ref.get('name')})")
    return out


def translate_pod(
    pod: Mapping[str, Any], node: str, settings: BurstSettings, resolver: ReferenceResolver
) -> InstanceSpec:
    """The InstanceSpec for `pod`, every reference resolved; PodTranslationError names what cannot be carried."""
    namespace, name, uid = pod_identity(pod)
    spec = pod.get("spec") or {}
    if spec.get("initContainers"):
        raise PodTranslationError("spec.initContainers: init containers are not supported on external providers")
    containers = _containers(pod)
    if not containers:
        raise PodTranslationError("spec.containers: the pod has no containers")
    try:
        pod_probes(pod)  # run against the instance by the service: refuse what it cannot run
    except ProbeSpecError as exc:
        raise PodTranslationError(str(exc)) from None
    prestop_sleep_seconds(pod)  # likewise its preStop hook
    out = []
    for i, c in enumerate(containers):
        if not c.get("image"):
            raise PodTranslationError(f"spec.containers[{i}].image: required")
        out.append(
            ContainerSpec(
                name=str(c.get("name") or f"c{i}"),
                image=str(c["image"]),
                command=tuple(str(x) for x in c.get("command") or []),
                args=tuple(str(x) for x in c.get("args") or []),
                env=_env(c, i, pod, namespace, resolver),
                ports=_ports(c),
            )
        )
    count = gpu_count(pod)
    cpu_millis, memory_bytes = _requests(pod)
    return InstanceSpec(
        tags=InstanceTags(node=node, namespace=namespace, pod=name, uid=uid),
        gpu_type=gpu_type(pod, settings) if count > 0 else "",
        gpu_count=count,
        containers=tuple(out),
        cpu_millis=cpu_millis,
        memory_bytes=memory_bytes,
        pod=dict(pod),
    )
