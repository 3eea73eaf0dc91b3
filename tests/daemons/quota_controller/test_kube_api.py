"""The quota controller against a real kube-apiserver (RBAC on) with Kueue's v1beta2 CRDs, as the least-privilege
ServiceAccount of :mod:`contract.controllers.quota_controller`: the queues follow a cordoned, a quarantined and a
deleted node and come back; Pulumi's next apply (which leaves the ignored field out) keeps the controller's numbers;
what that account is refused.

Nothing else runs (no scheduler, no Kueue): the test plays Pulumi and the node lifecycle by writing objects itself.
Skipped, saying why, when the pinned tools or the Kueue module are absent.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from components.guardrails_policies.controllers import quota_controller_writes_only_quotas
from contract.constants import ACCEPTED_LABEL, CLUSTER_EVENTS_NAMESPACE, KUEUE_API, QUARANTINE_TAINT_KEY
from contract.controllers.quota_controller import EVENT_RULES, cluster_rules
from contract.quota_controller_settings import FIELD_MANAGER, QuotaControllerSettings, resource_groups
from contract.rbac import Grant, lease_rules
from contract.registry import QUOTA_CONTROLLER
from daemons.quota_controller.client import KubeApi
from daemons.quota_controller.controller import Controller
from daemons.quota_controller.decide import Quota, live_quotas
from daemons.quota_controller.metrics import Metrics
from daemons.quota_controller.translate import queue_view
from daemons.toolkit.kube import KubeError
from daemons.toolkit.lease import KubeLeaseApi, LeaderElector
from tests.support.admission import controller_inputs, install_rule
from tests.support.apiserver import (
    ApiServer,
    admin_request,
    kueue_crds,
    ready_node,
    run_once,
    running_apiserver,
    service_account_client,
)

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore:Unverified HTTPS request")]

KINDS = ("resourceflavors", "clusterqueues")
SYSTEM = "gpucluster-capacity"
GPU = "nvidia.com/gpu"
PULUMI = "pulumi-kubernetes-test"
MERGE = "application/merge-patch+json"
FLAVORS = [("h100", GPU)]
SHARES = {"pretraining": ({"h100": 24}, {"h100": 8}), "evaluation": ({"h100": 8}, {})}
#: Unbounded shrinking, so one cycle follows capacity exactly; the bounds have their own step below.
SETTINGS = QuotaControllerSettings.model_validate(
    {
        "namespace": SYSTEM,
        "minShare": 0.0,
        "maxShrinkShare": 1.0,
        "flavors": [{"name": "h100", "nodeLabels": {"gpu": "h100"}, "declaredGpus": 32}],
        "clusterQueues": [
            {"name": name, "quota": quota, "borrowingLimit": limit} for name, (quota, limit) in SHARES.items()
        ],
    }
)


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    work = tmp_path_factory.mktemp("quota-apiserver")
    with running_apiserver(work, authorization_mode="RBAC", crds=kueue_crds(*KINDS), namespaces=[SYSTEM]) as server:
        yield server


def admin(server: ApiServer) -> KubeApi:
    return KubeApi(server.api_client)


raw = admin_request


def node(server: ApiServer, name: str) -> None:
    ready_node(server, name, 8, {"gpu": "h100", ACCEPTED_LABEL: "true"})


def pulumi_apply(server: ApiServer, name: str, *, with_groups: bool) -> None:
    """What the Kubernetes provider sends: the whole queue at creation; without the ignored field later."""
    quota, limit = SHARES[name]
    spec: dict[str, Any] = {"cohortName": "research", "queueingStrategy": "BestEffortFIFO"}
    if with_groups:
        spec["resourceGroups"] = resource_groups(FLAVORS, quota, limit)
    body = {"apiVersion": KUEUE_API, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}
    path = f"/apis/{KUEUE_API}/clusterqueues/{name}?fieldManager={PULUMI}&force=true"
    raw(server, "PATCH", path, body, "application/apply-patch+yaml")


def quotas(server: ApiServer, name: str) -> dict[str, Quota] | None:
    return live_quotas(queue_view(raw(server, "GET", f"/apis/{KUEUE_API}/clusterqueues/{name}")))


#: The controller's ServiceAccount's rules, from its contract module.
GRANTS = (
    Grant("clusterrole", "quota", cluster_rules([q.name for q in SETTINGS.cluster_queues])),
    Grant("role", "quota-events", EVENT_RULES, CLUSTER_EVENTS_NAMESPACE),
    Grant("role", "quota-lease", lease_rules(SETTINGS.lease_name), SYSTEM),
)


QUEUE_PATH = f"/apis/{KUEUE_API}/clusterqueues/pretraining"


def hold_to_quotas(server: ApiServer, sa: KubeApi) -> None:
    """The stack's admission rule for the quota controller's ServiceAccount, in force before the controller runs."""
    inputs = controller_inputs(
        controller_users={QUOTA_CONTROLLER.name: f"system:serviceaccount:{SYSTEM}:quota"},
    )

    def probe() -> str | None:
        try:
            moved = {"spec": {"cohortName": "elsewhere"}}
            sa.request("PATCH", f"{QUEUE_PATH}?dryRun=All", "probe", body=moved, content_type=MERGE)
        except KubeError as exc:
            return str(exc)
        return None

    install_rule(lambda path, body: raw(server, "POST", path, body), quota_controller_writes_only_quotas(inputs), probe)


def events(server: ApiServer) -> list[tuple[str, str, str]]:
    items = raw(server, "GET", f"/api/v1/namespaces/{CLUSTER_EVENTS_NAMESPACE}/events")["items"]
    return [(e["involvedObject"]["name"], e["reason"], e["message"]) for e in items]


def test_queues_follow_healthy_capacity_as_the_least_privilege_account(kube: ApiServer, tmp_path: Path) -> None:
    server = kube
    for i in range(4):
        node(server, f"h100-node-{i}")
    for name in SHARES:
        pulumi_apply(server, name, with_groups=True)
    sa_client = service_account_client(server, SYSTEM, "quota", GRANTS, tmp_path)
    hold_to_quotas(server, KubeApi(sa_client))
    elector = LeaderElector(
        KubeLeaseApi(sa_client), SYSTEM, SETTINGS.lease_name, "test_1", lease_duration_s=15, renew_deadline_s=10
    )
    elector.try_acquire_or_renew()
    controller = Controller(SETTINGS, KubeApi(sa_client), Metrics(), is_leader=elector.is_leader, identity="test_1")

    # full capacity: nothing to write
    assert controller.cycle().outcomes == ()

    # one node cordoned, one quarantined: 16 of 32 GPUs
    raw(server, "PATCH", "/api/v1/nodes/h100-node-1", {"spec": {"unschedulable": True}}, "application/merge-patch+json")
    taint = {"key": QUARANTINE_TAINT_KEY, "value": "gpu-temperature", "effect": "NoExecute"}
    raw(server, "PATCH", "/api/v1/nodes/h100-node-2", {"spec": {"taints": [taint]}}, "application/merge-patch+json")
    result = controller.cycle()
    assert sorted((o.queue, o.result) for o in result.outcomes) == [
        ("evaluation", "applied"),
        ("pretraining", "applied"),
    ]
    assert quotas(server, "pretraining") == {"h100": Quota(12, 4)}
    assert quotas(server, "evaluation") == {"h100": Quota(4)}
    said = [e for e in events(server) if e[1] == "QuotaFollowsCapacity"]
    assert ("pretraining", "QuotaFollowsCapacity") in {(q, r) for q, r, _ in said}
    message = next(m for q, _, m in said if q == "pretraining")
    assert "h100 24 (borrowing 8) -> 12 (borrowing 4)" in message
    assert "h100-node-1 cordoned, h100-node-2 quarantined" in message

    # the controller owns the field now; Pulumi's next apply leaves it out (ignoreChanges) and keeps the numbers
    managers = raw(server, "GET", f"/apis/{KUEUE_API}/clusterqueues/pretraining")["metadata"]["managedFields"]
    owners = [m["manager"] for m in managers if "f:resourceGroups" in json.dumps(m.get("fieldsV1", {}))]
    assert owners == [FIELD_MANAGER]
    pulumi_apply(server, "pretraining", with_groups=False)
    assert quotas(server, "pretraining") == {"h100": Quota(12, 4)}

    # a node deleted: 8 of 32
    raw(server, "DELETE", "/api/v1/nodes/h100-node-3")
    controller.cycle()
    assert quotas(server, "pretraining") == {"h100": Quota(6, 2)}
    assert quotas(server, "evaluation") == {"h100": Quota(2)}

    # uncordoned, out of quarantine, a new node: the stack's numbers again
    raw(
        server, "PATCH", "/api/v1/nodes/h100-node-1", {"spec": {"unschedulable": False}}, "application/merge-patch+json"
    )
    raw(server, "PATCH", "/api/v1/nodes/h100-node-2", {"spec": {"taints": None}}, "application/merge-patch+json")
    node(server, "h100-node-3")
    controller.cycle()
    assert quotas(server, "pretraining") == {"h100": Quota(24, 8)}
    assert quotas(server, "evaluation") == {"h100": Quota(8)}

    # the shipped bounds: three of four nodes falsely NotReady-looking (cordoned) shrink a quarter a cycle, to half
    bounded = Controller(
        SETTINGS.model_copy(update={"min_share": 0.5, "max_shrink_share": 0.25}),
        KubeApi(sa_client),
        Metrics(),
        is_leader=elector.is_leader,
        identity="test_1",
    )
    for i in (1, 2, 3):
        raw(
            server,
            "PATCH",
            f"/api/v1/nodes/h100-node-{i}",
            {"spec": {"unschedulable": True}},
            "application/merge-patch+json",
        )
    steps = []
    for _ in range(3):
        bounded.cycle()
        steps.append(quotas(server, "pretraining"))
    assert steps == [{"h100": Quota(18, 2)}, {"h100": Quota(12, 2)}, {"h100": Quota(12, 2)}]
    limited = [m for q, r, m in events(server) if r == "QuotaShrinkLimited" and q == "pretraining"]
    assert limited, "no Warning Event said the shrink was bounded"
    for i in (1, 2, 3):
        raw(
            server,
            "PATCH",
            f"/api/v1/nodes/h100-node-{i}",
            {"spec": {"unschedulable": False}},
            "application/merge-patch+json",
        )
    bounded.cycle()
    assert quotas(server, "pretraining") == {"h100": Quota(24, 8)}

    # what the account may not do: write nodes, or any queue that is not the stack's
    sa = KubeApi(sa_client)
    with pytest.raises(KubeError, match="403"):
        sa.request(
            "PATCH",
            "/api/v1/nodes/h100-node-0",
            "patch node",
            body={"spec": {"unschedulable": True}},
            content_type="application/merge-patch+json",
        )
    with pytest.raises(KubeError, match="403"):
        sa.apply_resource_groups("someone-elses", resource_groups(FLAVORS, {"h100": 1}, {}))
    with pytest.raises(KubeError, match="403"):
        sa.request("GET", f"/apis/{KUEUE_API}/resourceflavors", "list flavors")
    # and, on its own queues, anything but the quantities (the admission rule; RBAC cannot name fields)
    rule = "gpucluster-quota-controller-writes-only-quotas"
    for what, body in {
        "another cohort": {"spec": {"cohortName": "elsewhere"}},
        "preemption within the queue": {"spec": {"preemption": {"withinClusterQueue": "LowerPriority"}}},
        "a label": {"metadata": {"labels": {"x": "y"}}},
    }.items():
        with pytest.raises(KubeError, match=rule):
            sa.request("PATCH", QUEUE_PATH, what, body=body, content_type="application/merge-patch+json")
    with pytest.raises(KubeError, match=f"{rule}.*only the quantities"):
        sa.apply_resource_groups("pretraining", resource_groups([*FLAVORS, ("a100", GPU)], {"h100": 8, "a100": 8}, {}))
    elector.release()


def test_the_command_once_as_a_dry_run_reads_everything_and_writes_nothing(kube: ApiServer, tmp_path: Path) -> None:
    raw(kube, "PATCH", "/api/v1/nodes/h100-node-0", {"spec": {"unschedulable": True}}, "application/merge-patch+json")
    before = quotas(kube, "evaluation")
    settings = tmp_path / "settings.json"
    settings.write_text(SETTINGS.to_json())
    proc = run_once("daemons.quota_controller", settings, kube.kubeconfig, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["capacity"]["h100"]["out"] == {"h100-node-0": "cordoned"}
    assert out["quotas"]["evaluation"]["h100"]["nominalQuota"] == 6
    assert [u["result"] for u in out["updates"]] == ["skipped", "skipped"]
    assert quotas(kube, "evaluation") == before
