"""InferenceService under Pulumi's mocks: burstable tolerations (the virtual node yes, the burst taint never),
priority, GPU limits, the gpu-type annotation, PDB + Service always, HPA only when asked for, refused specs."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from components.cluster import GpuCluster, GpuClusterArgs
from components.config import load_stack_file
from components.inference import (
    GPU_TYPE_ANNOTATION,
    InferenceService,
    InferenceServiceArgs,
    InferenceServiceSpec,
)
from tests.support.pulumi_harness import Graph, deploy, secrets_of

ROOT = Path(__file__).resolve().parents[2]
BURST_KEY = "gpucluster.io/in-cluster-capacity"


def spec(**overrides: Any) -> InferenceServiceSpec:
    raw: dict[str, Any] = {
        "name": "sd-serve",
        "namespace": "inference",
        "image": "ghcr.io/example/sd-serve:1.0.0",
        "replicas": 8,
        "gpusPerReplica": 1,
        "gpuType": "H100",
        "port": 8080,
        "minAvailable": "75%",
        **overrides,
    }
    return InferenceServiceSpec.model_validate(raw)


def args(**overrides: Any) -> InferenceServiceArgs:
    base: dict[str, Any] = {
        "spec": spec(),
        "priority_class_name": "gpucluster-inference",
        "inference_namespaces": ["inference"],
    }
    return InferenceServiceArgs(**{**base, **overrides})


def build(a: InferenceServiceArgs) -> Graph:
    return deploy(lambda: InferenceService("svc", a))


@pytest.fixture(scope="module")
def graph() -> Graph:
    return build(args())


def _pod(graph: Graph) -> dict[str, Any]:
    return graph.one("kubernetes:apps/v1:Deployment", "svc-deployment").inputs["spec"]["template"]  # type: ignore[no-any-return]


def test_deployment_is_burstable_inference(graph: Graph) -> None:
    deployment = graph.one("kubernetes:apps/v1:Deployment", "svc-deployment")
    assert deployment.inputs["metadata"]["namespace"] == "inference"
    assert deployment.inputs["spec"]["replicas"] == 8
    template = _pod(graph)
    pod = template["spec"]
    assert pod["priorityClassName"] == "gpucluster-inference"
    assert {
        "key": "virtual-kubelet.io/provider",
        "operator": "Equal",
        "value": "gpucluster",
        "effect": "NoSchedule",
    } in pod["tolerations"]
    # a quarantined GPU still serves: every effect of the quarantine taint, any reason, no time limit
    assert {"key": "gpucluster.io/quarantine", "operator": "Exists"} in pod["tolerations"]
    for t in pod["tolerations"]:
        assert t["key"] != BURST_KEY, "an inference pod must never tolerate the burst taint"
        assert t["key"], "an empty-key toleration would tolerate the burst taint too"
    (container,) = pod["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert container["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    assert template["metadata"]["annotations"] == {GPU_TYPE_ANNOTATION: "H100"}
    assert deployment.inputs["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()


def test_pdb_and_service_select_the_pods(graph: Graph) -> None:
    labels = _pod(graph)["metadata"]["labels"]
    pdb = graph.one("kubernetes:policy/v1:PodDisruptionBudget", "svc-pdb")
    assert pdb.inputs["spec"]["minAvailable"] == "75%"
    assert pdb.inputs["spec"]["selector"]["matchLabels"].items() <= labels.items()
    service = graph.one("kubernetes:core/v1:Service", "svc-service")
    assert service.inputs["spec"]["type"] == "ClusterIP"
    assert service.inputs["spec"]["ports"] == [{"name": "http", "port": 8080, "targetPort": "http", "protocol": "TCP"}]
    assert service.inputs["spec"]["selector"].items() <= labels.items()
    assert not graph.of_type("kubernetes:autoscaling/v2:HorizontalPodAutoscaler")
    root = graph.one("gpucluster:inference:InferenceService", "svc")
    assert root.outputs["deployment"] == "sd-serve"
    assert root.outputs["podDisruptionBudget"] == "sd-serve"
    assert root.outputs.get("horizontalPodAutoscaler") is None
    for r in graph.resources:
        assert r is root or r.parent == root.urn


def test_hpa_when_asked_and_then_the_deployment_leaves_replicas_to_it() -> None:
    graph = build(args(spec=spec(hpa={"minReplicas": 4, "maxReplicas": 16, "targetCpuUtilization": 60})))
    hpa = graph.one("kubernetes:autoscaling/v2:HorizontalPodAutoscaler", "svc-hpa")
    assert hpa.inputs["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "sd-serve"}
    assert (hpa.inputs["spec"]["minReplicas"], hpa.inputs["spec"]["maxReplicas"]) == (4, 16)
    assert hpa.inputs["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"] == 60
    assert "replicas" not in graph.one("kubernetes:apps/v1:Deployment", "svc-deployment").inputs["spec"]


def test_hpa_on_the_request_rate_reads_the_services_metric_per_replica() -> None:
    hpa_ = {"minReplicas": 8, "maxReplicas": 12, "targetRequestsPerReplica": 2.5, "scaleDownStabilization": "30s"}
    spec_ = build(args(spec=spec(hpa=hpa_))).one("kubernetes:autoscaling/v2:HorizontalPodAutoscaler", "svc-hpa")
    hpa = spec_.inputs["spec"]
    # The Service's rate divided by the replica count, against 2.5 a replica; no CPU target unless asked.
    assert hpa["metrics"] == [
        {
            "type": "Object",
            "object": {
                "describedObject": {"apiVersion": "v1", "kind": "Service", "name": "sd-serve"},
                "metric": {"name": "requests_per_second"},
                "target": {"type": "AverageValue", "averageValue": "2500m"},
            },
        }
    ]
    assert hpa["behavior"] == {"scaleDown": {"stabilizationWindowSeconds": 30}}
    both = build(args(spec=spec(hpa={**hpa_, "targetCpuUtilization": 80})))
    metrics = both.one("kubernetes:autoscaling/v2:HorizontalPodAutoscaler", "svc-hpa").inputs["spec"]["metrics"]
    assert [m["type"] for m in metrics] == ["Object", "Resource"]
    # neither named: CPU at 70 %, and Kubernetes' own 5-minute scale-down window
    plain = build(args(spec=spec(hpa={"minReplicas": 2, "maxReplicas": 4})))
    plain_spec = plain.one("kubernetes:autoscaling/v2:HorizontalPodAutoscaler", "svc-hpa").inputs["spec"]
    assert plain_spec["metrics"][0]["resource"]["target"]["averageUtilization"] == 70
    assert plain_spec["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 300


def test_rollouts_add_before_they_remove_as_many_as_max_surge_says(graph: Graph) -> None:
    strategy = graph.one("kubernetes:apps/v1:Deployment", "svc-deployment").inputs["spec"]["strategy"]
    assert strategy == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": "25%"}}
    for surge in ("100%", 3):
        moved = build(args(spec=spec(maxSurge=surge)))
        rolling = moved.one("kubernetes:apps/v1:Deployment", "svc-deployment").inputs["spec"]["strategy"]
        assert rolling["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": surge}


def test_cpu_only_service_has_no_gpu_limit_and_default_gpu_type_applies() -> None:
    graph = build(args(spec=spec(gpusPerReplica=0, gpuType=None), default_gpu_type="L40S"))
    pod = _pod(graph)
    assert "nvidia.com/gpu" not in pod["spec"]["containers"][0]["resources"]["limits"]
    assert [t["key"] for t in pod["spec"]["tolerations"]] == ["virtual-kubelet.io/provider", "gpucluster.io/quarantine"]
    assert pod["metadata"]["annotations"] == {GPU_TYPE_ANNOTATION: "L40S"}
    no_type = build(args(spec=spec(gpuType=None)))
    assert _pod(no_type)["metadata"]["annotations"] == {}


def test_replicas_are_ready_only_when_their_server_says_so_over_http(graph: Graph) -> None:
    """An open port is not a loaded model: the readiness probe is an HTTP GET, which the burst provider runs
    against a rented replica too."""
    (container,) = _pod(graph)["spec"]["containers"]
    assert container["readinessProbe"] == {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 5}
    triton = build(args(spec=spec(readinessPath="/v2/health/ready")))
    assert _pod(triton)["spec"]["containers"][0]["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"


def test_replicas_drain_through_a_prestop_sleep_unless_told_not_to(graph: Graph) -> None:
    (container,) = _pod(graph)["spec"]["containers"]
    assert container["lifecycle"] == {"preStop": {"sleep": {"seconds": 5}}}
    at_once = build(args(spec=spec(drainSeconds=0)))
    assert "lifecycle" not in _pod(at_once)["spec"]["containers"][0]


def test_command_and_args_are_passed_through() -> None:
    graph = build(args(spec=spec(command=["python", "-m", "serve"], args=["--port", "8080"])))
    container = _pod(graph)["spec"]["containers"][0]
    assert container["command"] == ["python", "-m", "serve"]
    assert container["args"] == ["--port", "8080"]


@pytest.mark.parametrize(
    ("overrides", "field", "fragment"),
    [
        ({"image": "ghcr.io/example/sd-serve:latest"}, "image", "latest"),
        ({"image": "ghcr.io/example/sd-serve"}, "image", "not pinned"),
        ({"minAvailable": 8}, "minAvailable", "allows no eviction"),
        ({"minAvailable": "100%"}, "minAvailable", "allows no eviction"),
        ({"minAvailable": "150%"}, "minAvailable", "percentage"),
        ({"minAvailable": -1}, "minAvailable", "negative"),
        ({"maxSurge": 0}, "maxSurge", "could never progress"),
        ({"maxSurge": "0%"}, "maxSurge", "from '1%' to '100%'"),
        ({"maxSurge": "101%"}, "maxSurge", "from '1%' to '100%'"),
        ({"hpa": {"minReplicas": 8, "maxReplicas": 4}}, "hpa", "above maxReplicas"),
        (
            {"hpa": {"minReplicas": 1, "maxReplicas": 4, "targetRequestsPerReplica": 0}},
            "hpa.targetRequestsPerReplica",
            "greater than 0",
        ),
        (
            {"hpa": {"minReplicas": 1, "maxReplicas": 4, "scaleDownStabilization": "2h"}},
            "hpa.scaleDownStabilization",
            "1h",
        ),
        (
            {"hpa": {"minReplicas": 1, "maxReplicas": 4, "scaleDownStabilization": "soon"}},
            "hpa.scaleDownStabilization",
            "duration",
        ),
        ({"gpusPerReplica": 17}, "gpusPerReplica", "less than or equal to 16"),
        ({"resources": {"cpu": "lots"}}, "resources.cpu", "quantity"),
        ({"name": "SD_serve"}, "name", "DNS label"),
        ({"replica": 3}, "replica", "Extra inputs"),
        ({"readinessPath": "health"}, "readinessPath", "should match pattern"),
        ({"drainSeconds": 301}, "drainSeconds", "less than or equal to 300"),
        ({"readinessPath": "/he alth"}, "readinessPath", "should match pattern"),
    ],
)
def test_invalid_spec_names_the_field(overrides: dict[str, Any], field: str, fragment: str) -> None:
    with pytest.raises(ValidationError) as err:
        spec(**overrides)
    (error,) = err.value.errors()
    loc = ".".join(str(p) for p in error["loc"])
    # Field rules report at the field; the cross-field rules (minAvailable vs replicas, HPA bounds) name it.
    assert loc.startswith(field) or (loc == "" and field.split(".", maxsplit=1)[0] in error["msg"]), (loc, error["msg"])
    assert fragment in str(err.value)


def test_args_refuse_a_training_namespace_and_a_missing_priority_class() -> None:
    with pytest.raises(ValueError, match=r"InferenceServiceArgs\.spec\.namespace: 'team-vision' is not an inference"):
        args(spec=spec(namespace="team-vision"))
    with pytest.raises(ValueError, match=r"InferenceServiceArgs\.priority_class_name"):
        args(priority_class_name="")
    with pytest.raises(TypeError, match=r"InferenceServiceArgs\.spec: expected InferenceServiceSpec"):
        args(spec={"name": "x"})
    good = args()
    assert dataclasses.replace(good, default_gpu_type="L40S").gpu_type == "H100"  # the spec's own type wins


def test_local_stack_serves_sd_serve_after_its_priority_class() -> None:
    cfg = load_stack_file(ROOT / "stacks" / "Pulumi.local.yaml")
    graph = deploy(lambda: GpuCluster("sim", GpuClusterArgs(config=cfg, secrets=secrets_of(cfg))))
    svc = graph.one("gpucluster:inference:InferenceService", "sim-inference-inference-sd-serve")
    assert graph.parent_of(svc).type == "gpucluster:cluster:GpuCluster"
    deployment = graph.one("kubernetes:apps/v1:Deployment", "sim-inference-inference-sd-serve-deployment")
    assert "replicas" not in deployment.inputs["spec"]  # its HPA's to set, from 8 to 12
    hpa = graph.one("kubernetes:autoscaling/v2:HorizontalPodAutoscaler", "sim-inference-inference-sd-serve-hpa")
    assert (hpa.inputs["spec"]["minReplicas"], hpa.inputs["spec"]["maxReplicas"]) == (8, 12)
    assert graph.depends_on(
        deployment, graph.one("kubernetes:scheduling.k8s.io/v1:PriorityClass", "sim-queues-pc-inference")
    )
    assert graph.depends_on(deployment, graph.one("kubernetes:core/v1:Namespace", "sim-ns-inference"))
    assert graph.one("gpucluster:cluster:GpuCluster", "sim").outputs["inferenceServices"] == ["inference/sd-serve"]
