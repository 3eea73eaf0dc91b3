"""The controller against a real kube-apiserver (RBAC on) with Kueue's v1beta2 CRDs, as the least-privilege
ServiceAccount of :mod:`contract.controllers.make_before_break`: one gang, one node to empty, the room made and the
check Ready with podSetUpdates; and what that account is refused.

Nothing else runs (no scheduler, no controllers, no Kueue): the test plays the ReplicaSet controller and Kueue
by writing pods and statuses itself. Skipped, saying why, when the pinned tools or the Kueue module are absent.
"""

from __future__ import annotations

import copy
import functools
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from components.guardrails_policies import MakeBeforeBreakMarks
from components.guardrails_policies.controllers import (
    make_before_break_marks_pods_only_for_removal,
    make_before_break_moves_only_by_annotations,
    make_before_break_writes_only_its_check,
    make_before_break_writes_only_its_reservations,
)
from contract.constants import KUEUE_API
from contract.controllers.make_before_break import (
    DEPLOYMENT_ANNOTATIONS,
    POD_ANNOTATION,
    TEMPLATE_ANNOTATIONS,
    cluster_rules,
    inference_rules,
)
from contract.make_before_break_settings import CONTROLLER_NAME, FIELD_MANAGER, MakeBeforeBreakSettings
from contract.rbac import Grant, lease_rules
from daemons.make_before_break.client import KubeApi
from daemons.make_before_break.controller import Controller
from daemons.make_before_break.metrics import Metrics
from daemons.toolkit.lease import KubeLeaseApi, LeaderElector
from tests.support.admission import controller_inputs, install_rule, patch_as
from tests.support.apiserver import (
    ApiServer,
    admin_request,
    kueue_crds,
    ready_node,
    run_once,
    running_apiserver,
    service_account_client,
    stamp,
)
from tests.support.sim import tools_bin

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore:Unverified HTTPS request")]

KINDS = ("workloads", "admissionchecks", "resourceflavors", "clusterqueues", "localqueues")
SYSTEM, INFERENCE, TEAM = "gpucluster-system", "inference", "team-a"
KEY = "gpucluster.io/reservation"
GPU = "nvidia.com/gpu"
SETTINGS = MakeBeforeBreakSettings(namespace=SYSTEM, inference_namespaces=[INFERENCE], virtual_node_name="gpu-burst")
PULUMI = "pulumi-kubernetes-test"


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    work = tmp_path_factory.mktemp("mbb-apiserver")
    namespaces = (SYSTEM, INFERENCE, TEAM)
    with running_apiserver(work, authorization_mode="RBAC", crds=kueue_crds(*KINDS), namespaces=namespaces) as server:
        yield server


#: An admin call: the test plays the kubelet, the ReplicaSet controller, Kueue and Pulumi.
raw = admin_request


def pod(server: ApiServer, name: str, node_name: str, epoch: str | None = None, hash_: str = "abc12") -> None:
    meta: dict[str, Any] = {
        "name": name,
        "labels": {"app": "server", "pod-template-hash": hash_},
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": f"server-{hash_}",
                "uid": "7e57c0de-0000-4000-8000-000000000001",
                "controller": True,
            }
        ],
    }
    if epoch:
        meta["annotations"] = {"gpucluster.io/placement-epoch": epoch}
    body = {
        "metadata": meta,
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "s", "image": "server:1", "resources": {"limits": {GPU: "8"}}}],
        },
    }
    raw(server, "POST", f"/api/v1/namespaces/{INFERENCE}/pods", body)
    raw(
        server,
        "PATCH",
        f"/api/v1/namespaces/{INFERENCE}/pods/{name}/status",
        {"status": {"phase": "Running"}},
        "application/merge-patch+json",
    )


def deployment_status(server: ApiServer, ready: int, updated: int) -> None:
    live = raw(server, "GET", f"/apis/apps/v1/namespaces/{INFERENCE}/deployments/server")
    status = {
        "status": {
            "observedGeneration": live["metadata"]["generation"],
            "replicas": 2,
            "updatedReplicas": updated,
            "readyReplicas": ready,
            "availableReplicas": ready,
        }
    }
    raw(
        server,
        "PATCH",
        f"/apis/apps/v1/namespaces/{INFERENCE}/deployments/server/status",
        status,
        "application/merge-patch+json",
    )


NODE_N2 = "/api/v1/nodes/n2"
POD_PATH = f"/api/v1/namespaces/{INFERENCE}/pods/server-abc12-b"
WORKLOAD_PATH = f"/apis/{KUEUE_API}/namespaces/{TEAM}/workloads/job-train"
IMAGE = {"name": "s", "image": "registry.invalid/miner:1"}


def hold_to_its_fields(server: ApiServer, sa: KubeApi) -> None:
    """The stack's admission rules for the controller's ServiceAccount, in force before it runs."""
    inputs = controller_inputs(
        TEAM,
        make_before_break=MakeBeforeBreakMarks(
            user=f"system:serviceaccount:{SYSTEM}:mbb",
            reservation_key=KEY,
            check_name=SETTINGS.admission_check_name,
            deployment_annotations=DEPLOYMENT_ANNOTATIONS,
            template_annotations=TEMPLATE_ANNOTATIONS,
            pod_annotation=POD_ANNOTATION,
        ),
    )

    def post(path: str, body: dict[str, Any]) -> Any:
        return raw(server, "POST", path, body)

    relabel = {"metadata": {"labels": {"x": "y"}}}
    deployment = f"/apis/apps/v1/namespaces/{INFERENCE}/deployments/server"
    for rule, probe in (
        (make_before_break_writes_only_its_reservations, (NODE_N2, relabel)),
        (make_before_break_moves_only_by_annotations, (deployment, relabel)),
        (make_before_break_marks_pods_only_for_removal, (POD_PATH, relabel)),
        (make_before_break_writes_only_its_check, (f"{WORKLOAD_PATH}/status", {"status": {"clusterName": "x"}})),
    ):
        install_rule(post, rule(inputs), functools.partial(patch_as, sa, *probe))


#: The controller's ServiceAccount's rules, from its contract module.
GRANTS = (
    Grant("clusterrole", "mbb", cluster_rules(SETTINGS.admission_check_name)),
    Grant("role", "mbb", inference_rules(), INFERENCE),
    Grant("role", "mbb-lease", lease_rules(SETTINGS.lease_name), SYSTEM),
)


def test_the_room_is_made_and_the_check_goes_ready_as_the_least_privilege_account(
    kube: ApiServer, tmp_path: Path
) -> None:
    server = kube
    kueue = f"/apis/{KUEUE_API}"
    raw(
        server,
        "POST",
        f"{kueue}/resourceflavors",
        {
            "apiVersion": KUEUE_API,
            "kind": "ResourceFlavor",
            "metadata": {"name": "h100"},
            "spec": {"nodeLabels": {"gpu": "h100"}},
        },
    )
    raw(
        server,
        "POST",
        f"{kueue}/admissionchecks",
        {
            "apiVersion": KUEUE_API,
            "kind": "AdmissionCheck",
            "metadata": {"name": SETTINGS.admission_check_name},
            "spec": {"controllerName": CONTROLLER_NAME},
        },
    )
    for name in ("n1", "n2"):
        ready_node(server, name, 8, {"gpu": "h100"})
    ready_node(server, "gpu-burst", 64, {"type": "virtual-kubelet"})
    # The Deployment as Pulumi applies it: its own manager owns labels, the strategy and the template.
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "server", "namespace": INFERENCE, "labels": {"app": "server"}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "server"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": {"app": "server"}, "annotations": {"burst.gpucluster.io/gpu-type": "h100"}},
                "spec": {"containers": [{"name": "s", "image": "server:1", "resources": {"limits": {GPU: "8"}}}]},
            },
        },
    }
    raw(
        server,
        "PATCH",
        f"/apis/apps/v1/namespaces/{INFERENCE}/deployments/server",
        deployment,
        "application/apply-patch+yaml",
        fieldManager=PULUMI,
    )
    deployment_status(server, ready=2, updated=2)
    pod(server, "server-abc12-a", "n1")
    pod(server, "server-abc12-b", "n2")
    # The Workload, its quota reserved by Kueue with our check Pending.
    workload = {
        "apiVersion": KUEUE_API,
        "kind": "Workload",
        "metadata": {"name": "job-train", "namespace": TEAM},
        "spec": {
            "queueName": "training",
            "podSets": [
                {
                    "name": "workers",
                    "count": 1,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [{"name": "w", "image": "train:1", "resources": {"requests": {GPU: "8"}}}],
                        }
                    },
                }
            ],
        },
    }
    created = raw(server, "POST", f"{kueue}/namespaces/{TEAM}/workloads", workload)
    uid = created["metadata"]["uid"]
    status: dict[str, Any] = {
        "apiVersion": KUEUE_API,
        "kind": "Workload",
        "metadata": {"name": "job-train", "namespace": TEAM},
        "status": {
            "conditions": [
                {
                    "type": "QuotaReserved",
                    "status": "True",
                    "reason": "QuotaReserved",
                    "message": "Quota reserved in ClusterQueue training",
                    "lastTransitionTime": stamp(),
                }
            ],
            "admission": {
                "clusterQueue": "training",
                "podSetAssignments": [
                    {"name": "workers", "count": 1, "flavors": {GPU: "h100"}, "resourceUsage": {GPU: "8"}}
                ],
            },
            "admissionChecks": [
                {
                    "name": SETTINGS.admission_check_name,
                    "state": "Pending",
                    "message": "",
                    "lastTransitionTime": stamp(),
                }
            ],
        },
    }
    raw(
        server,
        "PATCH",
        f"{kueue}/namespaces/{TEAM}/workloads/job-train/status",
        status,
        "application/apply-patch+yaml",
        fieldManager="kueue-admission",
        force="true",
    )

    sa_client = service_account_client(server, SYSTEM, "mbb", GRANTS, tmp_path)
    hold_to_its_fields(server, KubeApi(sa_client))
    leases = KubeLeaseApi(sa_client)
    elector = LeaderElector(leases, SYSTEM, SETTINGS.lease_name, "test_1", lease_duration_s=15, renew_deadline_s=10)
    assert elector.try_acquire_or_renew()
    controller = Controller(SETTINGS, KubeApi(sa_client), Metrics(), is_leader=elector.is_leader, identity="test_1")

    first = controller.cycle()
    assert first.observed.problems == {}
    assert first.active == "set Active"
    assert [o.result for o in first.outcomes] == ["applied"] * len(first.outcomes), first.outcomes
    second = controller.cycle()
    assert [o.result for o in second.outcomes] == ["applied"] * len(second.outcomes), second.outcomes
    kinds = [o.kind for o in (*first.outcomes, *second.outcomes)]
    assert kinds.count("reserve-node") == 1
    assert "set-deletion-cost" in kinds
    assert "set-placement" in kinds

    reserved = raw(server, "GET", "/api/v1/nodes/n1")
    assert reserved["metadata"]["labels"][KEY] == uid
    assert {"key": KEY, "value": uid, "effect": "NoSchedule"} in reserved["spec"]["taints"]
    assert KEY not in raw(server, "GET", "/api/v1/nodes/n2")["metadata"]["labels"]
    marked = raw(server, "GET", f"/api/v1/namespaces/{INFERENCE}/pods/server-abc12-a")
    assert marked["metadata"]["annotations"]["controller.kubernetes.io/pod-deletion-cost"] == "-1000"
    live = raw(server, "GET", f"/apis/apps/v1/namespaces/{INFERENCE}/deployments/server")
    assert live["metadata"]["annotations"]["gpucluster.io/flips"] == uid
    assert live["metadata"]["annotations"]["gpucluster.io/flip-phase"] == "moved"
    template = live["spec"]["template"]["metadata"]["annotations"]
    epoch = template["gpucluster.io/placement-epoch"]
    assert template["burst.gpucluster.io/gpu-type"] == "h100"  # Pulumi's key kept
    managers = {m["manager"]: json.dumps(m.get("fieldsV1", {})) for m in live["metadata"]["managedFields"]}
    assert "gpucluster.io/placement-epoch" in managers[FIELD_MANAGER]
    assert "burst.gpucluster.io/gpu-type" not in managers[FIELD_MANAGER]  # took nothing of Pulumi's
    assert "f:replicas" not in managers[FIELD_MANAGER]
    assert "burst.gpucluster.io/gpu-type" in managers[PULUMI]
    assert "f:strategy" in managers[PULUMI]
    check = raw(server, "GET", f"{kueue}/admissionchecks/{SETTINGS.admission_check_name}")
    assert any(c["type"] == "Active" and c["status"] == "True" for c in check["status"]["conditions"])
    held = raw(server, "GET", f"{kueue}/namespaces/{TEAM}/workloads/job-train")["status"]["admissionChecks"][0]
    assert held["state"] == "Pending"
    assert held["message"].startswith("making room")

    # The rollout, played by hand: the replica on n1 is replaced on the virtual node, then removed.
    pod(server, "server-def34-c", "gpu-burst", epoch=epoch, hash_="def34")
    raw(server, "DELETE", f"/api/v1/namespaces/{INFERENCE}/pods/server-abc12-a", gracePeriodSeconds="0")
    deployment_status(server, ready=2, updated=1)
    third = controller.cycle()
    assert [o.kind for o in third.outcomes if o.result == "applied"] == ["check-ready"], third.outcomes
    entry = raw(server, "GET", f"{kueue}/namespaces/{TEAM}/workloads/job-train")["status"]["admissionChecks"][0]
    assert entry["state"] == "Ready"
    assert entry["podSetUpdates"] == [
        {
            "name": "workers",
            "nodeSelector": {KEY: uid},
            "tolerations": [{"key": KEY, "operator": "Equal", "value": uid, "effect": "NoSchedule"}],
        }
    ]
    assert controller.cycle().outcomes == ()  # applied: nothing left to do

    events = raw(server, "GET", "/api/v1/namespaces/default/events")["items"]
    assert any(e["reason"] == "NodeReserved" and e["involvedObject"]["name"] == "n1" for e in events)
    team = raw(server, "GET", f"/api/v1/namespaces/{TEAM}/events")["items"]
    assert {"MakingRoom", "RoomMade"} <= {e["reason"] for e in team if e["involvedObject"]["kind"] == "Workload"}
    kubectl = [str(tools_bin() / "kubectl"), "--kubeconfig", str(server.kubeconfig), "describe"]
    described = subprocess.run(
        [*kubectl, "workload", "job-train", "-n", TEAM], capture_output=True, text=True, check=True
    ).stdout
    assert "RoomMade" in described
    described = subprocess.run([*kubectl, "node", "n1"], capture_output=True, text=True, check=True).stdout
    assert "NodeReserved" in described

    # Least privilege: no Secret anywhere, no Deployment outside the inference namespaces.
    sa = KubeApi(sa_client)
    with pytest.raises(Exception, match="HTTP 403"):
        sa.list_all("/api/v1/secrets", "list secrets")
    with pytest.raises(Exception, match="HTTP 403"):
        sa.list_deployments(TEAM)
    # Its writes above passed the admission rules that hold it to its fields; anything more is refused by name.
    deployment_path = f"/apis/apps/v1/namespaces/{INFERENCE}/deployments/server"
    hostile: dict[str, tuple[str, dict[str, Any]]] = {
        "another node tainted NoExecute": (NODE_N2, {"spec": {"taints": [{"key": "x", "effect": "NoExecute"}]}}),
        "a node cordoned": (NODE_N2, {"spec": {"unschedulable": True}}),
        "a node relabelled": (NODE_N2, {"metadata": {"labels": {"gpu": "a100"}}}),
        "a Deployment scaled": (deployment_path, {"spec": {"replicas": 9}}),
        "a Deployment's image": (deployment_path, {"spec": {"template": {"spec": {"containers": [IMAGE]}}}}),
        "a Deployment's template labelled": (
            deployment_path,
            {"spec": {"template": {"metadata": {"labels": {"x": "y"}}}}},
        ),
        "a pod relabelled": (POD_PATH, {"metadata": {"labels": {"app": "other"}}}),
        "Kueue's own status": (f"{WORKLOAD_PATH}/status", {"status": {"clusterName": "elsewhere"}}),
    }
    for what, (path, body) in hostile.items():
        said = patch_as(sa, path, body)
        assert said is not None, f"{what}: the API server would take it"
        assert "gpucluster-make-before-break-" in said, (what, said)

    # Turned off, the way that leaves nothing behind: draining, as the same account under the same rules. The
    # training finishes; its room is released and the moved Deployment comes home; then nothing of ours is left.
    finished = copy.deepcopy(status)
    finished["status"]["conditions"].append(
        {
            "type": "Finished",
            "status": "True",
            "reason": "Succeeded",
            "message": "done",
            "lastTransitionTime": stamp(),
        }
    )
    finished["status"]["admissionChecks"] = [entry]
    path = f"{kueue}/namespaces/{TEAM}/workloads/job-train/status"
    raw(server, "PATCH", path, finished, "application/apply-patch+yaml", fieldManager="kueue-admission", force="true")
    ready_node(server, "n3", 8, {"gpu": "h100"})  # in-cluster room for the rented replica and its surge
    burst = {"spec": {"taints": [{"key": SETTINGS.burst_taint_key, "effect": "NoSchedule"}]}}
    raw(server, "PATCH", "/api/v1/nodes/gpu-burst", burst, "application/merge-patch+json")
    draining = SETTINGS.model_copy(update={"enabled": True, "draining": True})
    drain = Controller(draining, KubeApi(sa_client), Metrics(), is_leader=elector.is_leader, identity="test_1")
    undo = drain.cycle()
    assert [o.result for o in undo.outcomes] == ["applied"] * len(undo.outcomes), undo.outcomes
    assert ("release-node", "node/n1") in [(o.kind, o.target) for o in undo.outcomes]
    assert KEY not in raw(server, "GET", "/api/v1/nodes/n1")["metadata"].get("labels", {})
    assert undo.left is not None
    assert undo.left.deployments == 1
    home = drain.cycle()  # room in the cluster and the burst taint on: it starts home, the rented replica marked
    assert {o.kind for o in home.outcomes} == {"set-deletion-cost", "set-placement"}, home.outcomes
    phase = raw(server, "GET", deployment_path)["metadata"]["annotations"]["gpucluster.io/flip-phase"]
    assert phase == "returning"
    # The rollout home, by hand: a replica of the home template in the cluster, the rented one gone.
    pod(server, "server-abc12-c", "n3")
    raw(server, "DELETE", f"/api/v1/namespaces/{INFERENCE}/pods/server-def34-c", gracePeriodSeconds="0")
    deployment_status(server, ready=2, updated=2)
    done = drain.cycle()
    assert [(o.kind, o.result) for o in done.outcomes] == [("set-placement", "applied")], done.outcomes
    last = drain.cycle()
    assert last.outcomes == ()
    assert last.left is not None
    assert last.left.nothing, last.left
    annotations = raw(server, "GET", deployment_path)["metadata"].get("annotations", {})
    assert not {k for k in annotations if k.startswith("gpucluster.io/flip")}, annotations
    assert elector.release()


def written(server: ApiServer) -> dict[str, str]:
    """The resourceVersion of every object the controller may write or create (the server's own leases aside)."""
    paths = [
        "/api/v1/nodes",
        f"/api/v1/namespaces/{INFERENCE}/pods",
        f"/apis/apps/v1/namespaces/{INFERENCE}/deployments",
        f"/apis/{KUEUE_API}/workloads",
        f"/apis/{KUEUE_API}/admissionchecks",
        "/api/v1/events",
        f"/apis/coordination.k8s.io/v1/namespaces/{SYSTEM}/leases",
    ]
    out: dict[str, str] = {}
    for path in paths:
        for item in raw(server, "GET", path)["items"]:
            meta = item["metadata"]
            out[f"{path} {meta.get('namespace', '')}/{meta['name']}"] = meta["resourceVersion"]
    return out


def test_the_command_once_as_a_dry_run_reads_everything_and_writes_nothing(kube: ApiServer, tmp_path: Path) -> None:
    settings = tmp_path / "settings.yaml"
    settings.write_text(
        f"enabled: true\nnamespace: {SYSTEM}\ninferenceNamespaces: [{INFERENCE}]\nleaseName: once-test\n"
    )
    before = written(kube)
    proc = run_once("daemons.make_before_break", settings, kube.kubeconfig, "--dry-run")
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    assert result["unknown"] == {}
    assert result["leader"] is True
    assert all(o["result"] == "skipped" for o in result["outcomes"])
    left = result["leftBehind"]  # what an operator reads before enabled: false
    assert set(left) == {"nodes", "deployments", "pods"}
    assert all(isinstance(n, int) and n >= 0 for n in left.values())
    assert KubeLeaseApi(kube.api_client).get(SYSTEM, "once-test") is None
    assert written(kube) == before
