"""MakeBeforeBreak under Pulumi's mocks: the AdmissionCheck, least-privilege RBAC (Roles where the objects live,
Events never cluster-wide), the settings document, the Deployment; every child parented; and the check listed on
every ClusterQueue while it is on, on none while it is off."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from components.cluster import GpuCluster, GpuClusterArgs
from components.config import load_stack_file, parse_stack_config, read_stack_file
from components.controller import ControllerArgs
from components.make_before_break import MakeBeforeBreak
from components.queues import cluster_queue_spec
from contract.controllers.make_before_break import SPEC, WORKLOAD_NAMESPACES
from contract.make_before_break_settings import MakeBeforeBreakSettings, parse_settings
from contract.queues_settings import covers_gpus
from contract.registry import MAKE_BEFORE_BREAK
from tests.support.pulumi_harness import Graph, Registered, deploy, secrets_of

ROOT = Path(__file__).resolve().parents[2]
RBAC = "kubernetes:rbac.authorization.k8s.io/v1"
CHECK = "kubernetes:kueue.x-k8s.io/v1beta2:AdmissionCheck"
CQ = "kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue"
TOKEN = "gpucluster:burst:MakeBeforeBreak"
APP = SPEC.app
METRICS_PORT = SPEC.metrics_port


def settings(**change: Any) -> MakeBeforeBreakSettings:
    return MakeBeforeBreakSettings(enabled=True, inference_namespaces=["inference", "serving"], **change)


def args(**change: Any) -> ControllerArgs:
    base: dict[str, Any] = {
        "settings": settings(),
        "workload_namespaces": ("team-a", "team-b"),
    }
    merged = {**base, **change}
    context = {WORKLOAD_NAMESPACES: merged.pop("workload_namespaces")}
    return ControllerArgs(spec=SPEC, context=context, **merged)


@pytest.fixture(scope="module")
def graph() -> Graph:
    return deploy(lambda: MakeBeforeBreak("mbb", args()))


def test_the_admission_check_names_the_controller(graph: Graph) -> None:
    check = graph.one(CHECK, "mbb-admission-check")
    assert check.inputs["metadata"]["name"] == "make-before-break"
    assert check.inputs["spec"] == {"controllerName": "gpucluster.io/make-before-break"}


def test_every_child_is_parented_to_the_component(graph: Graph) -> None:
    component = next(r for r in graph.resources if r.type == TOKEN)
    children = [r for r in graph.resources if r.custom]
    assert children
    assert all(c.parent == component.urn for c in children)
    assert component.outputs["admissionCheck"] == "make-before-break"


def test_the_cluster_role_reads_and_writes_only_what_is_cluster_scoped(graph: Graph) -> None:
    rules = graph.one(f"{RBAC}:ClusterRole", "mbb-clusterrole").inputs["rules"]
    by_resource = {(tuple(r["resources"]), tuple(r.get("resourceNames", ()))): r["verbs"] for r in rules}
    assert by_resource[(("workloads",), ())] == ["get", "list"]
    assert by_resource[(("workloads/status",), ())] == ["patch"]
    assert by_resource[(("admissionchecks",), ("make-before-break",))] == ["get"]
    assert by_resource[(("admissionchecks/status",), ("make-before-break",))] == ["patch"]
    assert by_resource[(("nodes",), ())] == ["get", "list", "patch"]
    assert by_resource[(("pods",), ())] == ["list"]
    flat = [(res, verb) for r in rules for res in r["resources"] for verb in r["verbs"]]
    assert not any(res in ("events", "deployments", "secrets") for res, _ in flat)
    assert not any(verb in ("*", "delete", "escalate", "bind", "impersonate") for _, verb in flat)
    assert ("pods", "patch") not in flat


def test_deployments_and_pods_are_written_only_in_the_inference_namespaces(graph: Graph) -> None:
    roles = {
        r.inputs["metadata"]["namespace"]: r for r in graph.of_type(f"{RBAC}:Role") if r.name.startswith("mbb-role-")
    }
    assert set(roles) == {"inference", "serving"}
    for role in roles.values():
        resources = {res for rule in role.inputs["rules"] for res in rule["resources"]}
        assert resources == {"pods", "deployments"}


def test_events_only_where_their_objects_live_and_the_lease_in_its_namespace(graph: Graph) -> None:
    events = [r for r in graph.of_type(f"{RBAC}:Role") if r.name.startswith("mbb-events-role-")]
    assert {r.inputs["metadata"]["namespace"] for r in events} == {
        "default",
        "team-a",
        "team-b",
        "inference",
        "serving",
    }
    assert all(r.inputs["rules"] == [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}] for r in events)
    lease = graph.one(f"{RBAC}:Role", "mbb-role")
    assert lease.inputs["metadata"]["namespace"] == "gpucluster-burst"
    named = [r for r in lease.inputs["rules"] if "resourceNames" in r]
    assert named == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "update"],
            "resourceNames": ["gpucluster-make-before-break"],
        }
    ]
    for binding in graph.of_type(f"{RBAC}:RoleBinding") + graph.of_type(f"{RBAC}:ClusterRoleBinding"):
        assert binding.inputs["subjects"] == [{"kind": "ServiceAccount", "name": APP, "namespace": "gpucluster-burst"}]


def test_the_settings_document_is_the_daemons(graph: Graph) -> None:
    cm = graph.one("kubernetes:core/v1:ConfigMap", "mbb-settings")
    doc = json.loads(cm.inputs["data"]["settings.json"])
    daemon = parse_settings(doc, "configmap")
    assert daemon == settings()
    assert (daemon.virtual_node_name, daemon.inference_namespaces) == ("gpu-burst", ["inference", "serving"])
    assert cm.inputs["metadata"]["labels"]["gpucluster.io/settings"] == "make-before-break"


def test_the_deployment_runs_the_controller_like_the_taint_controller(graph: Graph) -> None:
    dep = graph.one("kubernetes:apps/v1:Deployment", "mbb-deployment")
    spec = dep.inputs["spec"]
    assert spec["replicas"] == 2
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["python3", "-m", "daemons.make_before_break"]
    assert container["args"][:2] == ["--settings", "/etc/gpucluster/make-before-break/settings.json"]
    assert container["args"][2:] == ["--listen", f"$(POD_IP):{METRICS_PORT}"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["resources"]["limits"] == {"memory": "256Mi"}
    assert pod["serviceAccountName"] == APP
    check = graph.one(CHECK, "mbb-admission-check")
    cm = graph.one("kubernetes:core/v1:ConfigMap", "mbb-settings")
    assert graph.depends_on(dep, check)
    assert graph.depends_on(dep, cm)


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"settings": MakeBeforeBreakSettings()}, "disabled"),
        ({"workload_namespaces": ()}, "team namespaces"),
        ({"settings": settings(burst_taint_key="gpucluster.io/reservation")}, "burst taint key"),
        ({"workload_namespaces": ("inference",)}, "also inference namespaces"),
        ({"labels": {"bad key!": "x"}}, "labels key"),
    ],
)
def test_args_refuse_what_cannot_run(change: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        args(**change)


# --- wired into the cluster ----------------------------------------------------------------------------------


def _cluster(stack: str, *, bursting: bool = False, **section: Any) -> Graph:
    raw = read_stack_file(ROOT / "stacks" / f"Pulumi.{stack}.yaml")
    if bursting:  # prod as it runs once its provider secrets are set
        raw["burst"] = {**raw["burst"], "enabled": True}
        raw.update({"runpodApiKey": {"secure": "v1:c2VjcmV0"}, "eastKubeconfig": {"secure": "v1:c2VjcmV0"}})
    if section:
        raw["makeBeforeBreak"] = {**raw.get("makeBeforeBreak", {}), **section}
    cfg = parse_stack_config(copy.deepcopy(raw), stack)
    return deploy(lambda: GpuCluster(stack, GpuClusterArgs(config=cfg, secrets=secrets_of(cfg))))


def _document(graph: Graph, name: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(graph.one("kubernetes:core/v1:ConfigMap", name).inputs["data"]["settings.json"])
    return out


def _gpu_queues(graph: Graph) -> list[Registered]:
    """The ClusterQueues that can admit training: all but the queue of CPU-only work, which covers only pods."""
    queues = [cq for cq in graph.of_type(CQ) if covers_gpus(cq.inputs["spec"]["resourceGroups"])]
    assert len(queues) == len(graph.of_type(CQ)) - 1
    return queues


def test_prod_lists_the_check_on_every_cluster_queue_of_gpus() -> None:
    graph = _cluster("prod", bursting=True, enabled=True)
    queues = {cq.inputs["metadata"]["name"]: cq.inputs["spec"] for cq in graph.of_type(CQ)}
    assert len(queues) == 3
    for name, spec in queues.items():
        if name == "cpu-only":  # it admits no training: it covers no GPU
            assert "admissionChecksStrategy" not in spec
        else:
            assert spec["admissionChecksStrategy"] == {"admissionChecks": [{"name": "make-before-break"}]}
    (component,) = [r for r in graph.resources if r.type == TOKEN]
    assert graph.parent_of(component).type == "gpucluster:cluster:GpuCluster"
    (check,) = graph.of_type(CHECK)
    assert graph.parent_of(check).urn == component.urn
    namespaces = {r.inputs["metadata"]["name"] for r in graph.of_type("kubernetes:core/v1:Namespace")}
    assert "gpucluster-burst" in namespaces
    doc = _document(graph, "prod-make-before-break-settings")
    assert doc["virtualNodeName"] == "gpu-burst"
    assert doc["inferenceNamespaces"] == ["inference", "inference-canary"]


def test_local_runs_it_on_the_virtual_node_with_short_figures() -> None:
    assert load_stack_file(ROOT / "stacks" / "Pulumi.local.yaml").controller(MAKE_BEFORE_BREAK).enabled
    graph = _cluster("local")
    (check,) = graph.of_type(CHECK)
    assert check.inputs["spec"]["controllerName"] == "gpucluster.io/make-before-break"
    assert all(cq.inputs["spec"]["admissionChecksStrategy"] for cq in _gpu_queues(graph))
    doc = _document(graph, "local-make-before-break-settings")
    assert (doc["virtualNodeName"], doc["maxHold"], doc["interval"]) == ("gpu-burst", "60s", "2s")


def test_prod_as_shipped_runs_without_it_the_queues_lack_the_check() -> None:
    assert (
        not load_stack_file(ROOT / "stacks" / "Pulumi.prod.yaml").controller(MAKE_BEFORE_BREAK).enabled
    )  # bursting is off
    graph = _cluster("prod")
    assert graph.of_type(CHECK) == []
    assert all("admissionChecksStrategy" not in cq.inputs["spec"] for cq in graph.of_type(CQ))


def test_local_turned_on_gets_the_virtual_node_in_its_document() -> None:
    graph = _cluster("local", enabled=True, maxHold="90s")
    doc = _document(graph, "local-make-before-break-settings")
    assert (doc["virtualNodeName"], doc["maxHold"]) == ("gpu-burst", "90s")
    assert all(cq.inputs["spec"]["admissionChecksStrategy"] for cq in _gpu_queues(graph))


def test_draining_keeps_the_controller_and_takes_the_check_off_the_queues() -> None:
    graph = _cluster("local", enabled=True, draining=True)
    assert all("admissionChecksStrategy" not in cq.inputs["spec"] for cq in graph.of_type(CQ))
    controller = graph.one("kubernetes:apps/v1:Deployment", "local-make-before-break-deployment")
    assert controller.inputs["spec"]["replicas"] >= 1
    assert _document(graph, "local-make-before-break-settings")["draining"] is True


def test_draining_without_the_controller_is_refused() -> None:
    with pytest.raises(ValidationError, match="draining needs enabled: true"):
        MakeBeforeBreakSettings.model_validate({"enabled": False, "draining": True})
    assert MakeBeforeBreakSettings.model_validate({"enabled": True, "draining": True}).draining


def test_cluster_queue_spec_leaves_the_key_out_without_checks() -> None:
    cfg = load_stack_file(ROOT / "stacks" / "Pulumi.prod.yaml")
    q = next(iter(cfg.queues.values()))
    bare = cluster_queue_spec(q, cfg.cohort, cfg.flavors, ["team-a"])
    assert "admissionChecksStrategy" not in bare
    listed = cluster_queue_spec(q, cfg.cohort, cfg.flavors, ["team-a"], ("make-before-break",))
    assert listed == {**bare, "admissionChecksStrategy": {"admissionChecks": [{"name": "make-before-break"}]}}
