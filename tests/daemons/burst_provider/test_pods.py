"""Pod -> InstanceSpec: GPU type and count, containers, resolved environment, clear failures."""

from __future__ import annotations

from typing import Any

import pytest

from daemons.burst_provider.pods import (
    PodTranslationError,
    gpu_count,
    gpu_type,
    parse_quantity,
    prestop_sleep_seconds,
    translate_pod,
)
from daemons.burst_provider.providers.base import Port
from tests.daemons.burst_provider.support import FakeSource, make_pod, make_settings, provider_entry

SETTINGS = make_settings(
    provider_entry("a"),
    {**provider_entry("b"), "gpuTypes": {"A100": {"pricePerGpuHour": 1.0}, "H100": {"pricePerGpuHour": 2.0}}},
)


def test_gpu_type_annotation_wins_over_node_selector_and_default() -> None:
    pod = make_pod(annotations={"burst.gpucluster.io/gpu-type": "A100"})
    pod["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "H100"}
    assert gpu_type(pod, SETTINGS) == "A100"
    del pod["metadata"]["annotations"]["burst.gpucluster.io/gpu-type"]
    assert gpu_type(pod, SETTINGS) == "H100"
    del pod["spec"]["nodeSelector"]
    assert gpu_type(pod, SETTINGS) == "H100"  # defaultGpuType


def test_gpu_product_label_maps_to_the_configured_type_it_names() -> None:
    pod = make_pod()
    pod["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    assert gpu_type(pod, SETTINGS) == "A100"
    pod["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "Tesla-T4"}
    assert gpu_type(pod, SETTINGS) == "Tesla-T4"  # unknown: left as is, selection then finds no provider


def test_gpu_count_sums_container_limits() -> None:
    pod = make_pod(gpus=2)
    second = dict(pod["spec"]["containers"][0], name="sidecar", resources={"limits": {"nvidia.com/gpu": 1}})
    pod["spec"]["containers"].append(second)
    assert gpu_count(pod) == 3
    assert gpu_count(make_pod(gpus=0)) == 0


def test_cpu_only_pod_has_no_gpu_type() -> None:
    spec = translate_pod(make_pod(gpus=0), "gpu-burst", SETTINGS, FakeSource())
    assert spec.gpu_count == 0
    assert spec.gpu_type == ""


def test_translation_carries_containers_resources_ports_and_tags() -> None:
    spec = translate_pod(make_pod(gpus=2), "gpu-burst", SETTINGS, FakeSource())
    assert spec.tags.key() == "inference/web-1/uid-web-1"
    assert spec.tags.node == "gpu-burst"
    assert spec.gpu_type == "H100"
    assert spec.gpu_count == 2
    assert spec.cpu_millis == 500
    assert spec.memory_bytes == 2**30
    (c,) = spec.containers
    assert (c.name, c.image, c.command, c.args) == (
        "server",
        "registry.example.com/serve:1.0",
        ("serve",),
        ("--port", "8080"),
    )
    assert c.ports == (Port(port=8080, protocol="TCP", name="http"),)
    assert spec.pod["metadata"] == make_pod(gpus=2)["metadata"]


def test_env_references_are_resolved() -> None:
    source = FakeSource()
    source.config_maps[("inference", "cfg")] = {"MODEL": "sd-xl", "EXTRA": "1"}
    source.secrets[("inference", "tok")] = {"token": "s3cret"}
    env: list[dict[str, Any]] = [
        {"name": "LITERAL", "value": "x"},
        {"name": "MODEL", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "MODEL"}}},
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "tok", "key": "token"}}},
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
        {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
        {"name": "OPT", "valueFrom": {"configMapKeyRef": {"name": "absent", "key": "k", "optional": True}}},
    ]
    pod = make_pod(env=env)
    pod["spec"]["containers"][0]["envFrom"] = [{"configMapRef": {"name": "cfg"}, "prefix": "CFG_"}]
    spec = translate_pod(pod, "gpu-burst", SETTINGS, source)
    assert dict(spec.containers[0].env) == {
        "CFG_MODEL": "sd-xl",
        "CFG_EXTRA": "1",
        "LITERAL": "x",
        "MODEL": "sd-xl",
        "TOKEN": "s3cret",
        "POD": "web-1",
        "NS": "inference",
        "UID": "uid-web-1",
        "APP": "web",
    }


@pytest.mark.parametrize(
    ("var", "message"),
    [
        ({"valueFrom": {"configMapKeyRef": {"name": "missing", "key": "k"}}}, "ConfigMap inference/missing not found"),
        (
            {"valueFrom": {"secretKeyRef": {"name": "tok", "key": "other"}}},
            "key 'other' not found in Secret inference/tok",
        ),
        ({"valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}, "fieldRef 'status.podIP'"),
        ({"valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}}, "not supported"),
    ],
)
def test_unresolvable_references_name_themselves(var: dict[str, Any], message: str) -> None:
    source = FakeSource()
    source.secrets[("inference", "tok")] = {"token": "x"}
    pod = make_pod(env=[{"name": "V", **var}])
    with pytest.raises(PodTranslationError, match=r"spec\.containers\[0\]\.env\[0\] \(V\)") as err:
        translate_pod(pod, "gpu-burst", SETTINGS, source)
    assert message in str(err.value)


def test_init_containers_are_refused() -> None:
    pod = make_pod()
    pod["spec"]["initContainers"] = [{"name": "fetch", "image": "busybox:1"}]
    with pytest.raises(PodTranslationError, match="init containers are not supported"):
        translate_pod(pod, "gpu-burst", SETTINGS, FakeSource())


def test_bad_quantities_are_refused() -> None:
    assert parse_quantity("16Gi", "x") == 16 * 2**30
    assert parse_quantity("250m", "x") == pytest.approx(0.25)
    pod = make_pod()
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "1.5"
    with pytest.raises(PodTranslationError, match="whole number"):
        gpu_count(pod)
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "lots"
    with pytest.raises(PodTranslationError, match="not a quantity"):
        gpu_count(pod)


@pytest.mark.parametrize(
    ("lifecycle", "grace", "seconds"),
    [
        ({"preStop": {"sleep": {"seconds": 5}}}, None, 5.0),
        ({"preStop": {"exec": {"command": ["sleep", "10"]}}}, None, 10.0),
        ({"preStop": {"exec": {"command": ["/bin/sh", "-c", "sleep 7"]}}}, None, 7.0),
        ({"preStop": {"sleep": {"seconds": 60}}}, None, 30.0),  # within the default grace period
        ({"preStop": {"sleep": {"seconds": 60}}}, 45, 45.0),
        (None, None, 0.0),
    ],
)
def test_the_prestop_sleep_a_rented_replica_drains_for(lifecycle: Any, grace: int | None, seconds: float) -> None:
    pod = make_pod()
    if lifecycle is not None:
        pod["spec"]["containers"][0]["lifecycle"] = lifecycle
    if grace is not None:
        pod["spec"]["terminationGracePeriodSeconds"] = grace
    assert prestop_sleep_seconds(pod) == seconds


def test_a_prestop_hook_that_cannot_run_remotely_is_refused_by_field() -> None:
    pod = make_pod()
    pod["spec"]["containers"][0]["lifecycle"] = {"preStop": {"exec": {"command": ["/drain.sh"]}}}
    with pytest.raises(PodTranslationError, match=r"spec.containers\[0\].lifecycle.preStop: only a sleep"):
        prestop_sleep_seconds(pod)
