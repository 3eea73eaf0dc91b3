"""Shared helpers for the gpucluster policy pack: reading configs, finding pod specs, walking properties."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from pulumi_policy import EnforcementLevel, PolicyConfigSchema

Report = Callable[..., None]
MANDATORY = EnforcementLevel.MANDATORY

#: Kinds that embed a pod template, and where it sits.
_POD_SPEC_PATHS: dict[str, tuple[str, ...]] = {
    "kubernetes:core/v1:Pod": ("spec",),
    "kubernetes:apps/v1:Deployment": ("spec", "template", "spec"),
    "kubernetes:apps/v1:StatefulSet": ("spec", "template", "spec"),
    "kubernetes:apps/v1:DaemonSet": ("spec", "template", "spec"),
    "kubernetes:apps/v1:ReplicaSet": ("spec", "template", "spec"),
    "kubernetes:batch/v1:Job": ("spec", "template", "spec"),
    "kubernetes:batch/v1:CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}
WORKLOAD_TYPES = tuple(_POD_SPEC_PATHS)


def dig(obj: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def pod_spec(resource_type: str, props: Mapping[str, Any]) -> Mapping[str, Any] | None:
    path = _POD_SPEC_PATHS.get(resource_type)
    if path is None:
        return None
    spec = dig(props, *path)
    return spec if isinstance(spec, Mapping) else None


def containers(spec: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every container of a pod spec, with the list it came from."""
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(field) or []:
            if isinstance(c, Mapping):
                yield field, c


def object_ref(props: Mapping[str, Any], fallback: str) -> str:
    """``namespace/name`` of a Kubernetes object as the program gave it."""
    name = dig(props, "metadata", "name") or fallback
    namespace = dig(props, "metadata", "namespace")
    return f"{namespace}/{name}" if namespace else str(name)


def config_value(config: Mapping[str, Any], key: str, default: Any) -> Any:
    value = config.get(key)
    return default if value is None else value


def schema(**properties: dict[str, Any]) -> PolicyConfigSchema:
    return PolicyConfigSchema(properties=dict(properties))


def labels_of(props: Mapping[str, Any]) -> Mapping[str, str]:
    value = dig(props, "metadata", "labels")
    return value if isinstance(value, Mapping) else {}


def annotations_of(props: Mapping[str, Any]) -> Mapping[str, str]:
    value = dig(props, "metadata", "annotations")
    return value if isinstance(value, Mapping) else {}
