"""The controller against a real kube-apiserver (RBAC on) as the least-privilege ServiceAccount of
:mod:`contract.controllers.quarantine`: the one patch is accepted whole, the ledger is created and updated by
server-side apply, Events land where the API server takes them, a deleted node stays in the ledger; and what that
account is refused. Prometheus is the in-memory fake (the signals are not what is under test here)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from contract.controllers.quarantine import CLUSTER_RULES, NODE_EVENT_RULES, namespace_rules
from contract.quarantine_settings import LEDGER_NAME, QuarantineSettings
from contract.rbac import Grant
from daemons.quarantine.controller import Controller
from daemons.quarantine.kube import KubeApi
from daemons.quarantine.metrics import Metrics
from daemons.toolkit.kube import KubeError
from tests.daemons.quarantine.fakes import FakeQuerier
from tests.support.apiserver import ApiServer, admin_request, running_apiserver, service_account_client

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore:Unverified HTTPS request")]

NS = "gpucluster-capacity"
H100 = {"gpu.example/type": "h100"}
SETTINGS = QuarantineSettings.model_validate({"namespace": NS, "flavors": [{"name": "h100", "nodeLabels": H100}]})


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    work = tmp_path_factory.mktemp("quarantine-apiserver")
    with running_apiserver(work, authorization_mode="RBAC", namespaces=[NS]) as server:
        yield server


admin = admin_request


#: The controller's ServiceAccount's rules, from its contract module.
GRANTS = (
    Grant("clusterrole", "q", CLUSTER_RULES),
    Grant("role", "q-events", NODE_EVENT_RULES, "default"),
    Grant("role", "q", namespace_rules(SETTINGS.lease_name), NS),
)


def test_quarantine_ledger_and_events_as_the_least_privilege_account(kube: ApiServer, tmp_path: Path) -> None:
    for i in range(10):
        taints = [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}] if i == 3 else []
        admin(
            kube,
            "POST",
            "/api/v1/nodes",
            {"metadata": {"name": f"gpu-{i}", "labels": H100}, "spec": {"taints": taints}},
        )
    admin(kube, "POST", "/api/v1/nodes", {"metadata": {"name": "cpu-0"}})
    api = KubeApi(service_account_client(kube, NS, "q", GRANTS, tmp_path))
    prom = FakeQuerier()
    prom.fire("gpu-3", gpu="1", UUID="GPU-b")
    prom.fire("gpu-5", alert="GpuXidError")  # one node of ten per hour: refused by the breaker
    prom.fire("cpu-0")
    controller = Controller(SETTINGS, prom, api, Metrics(), is_leader=lambda: True, identity="q-0")

    result = controller.cycle()
    assert result.quarantined == ("gpu-3",)
    assert result.ledger_written
    node = admin(kube, "GET", "/api/v1/nodes/gpu-3")
    # appended to what was there (the API server's own not-ready taint included), nothing else touched
    taints = node["spec"]["taints"]
    assert taints[0] == {"key": "nvidia.com/gpu", "effect": "NoSchedule"}
    assert [t for t in taints if t["key"] == "gpucluster.io/quarantine"] == [
        {"key": "gpucluster.io/quarantine", "value": "gpu-temperature", "effect": "NoExecute"}
    ]
    assert node["metadata"]["labels"]["gpucluster.io/quarantined"] == "true"
    assert node["metadata"]["annotations"]["gpucluster.io/quarantine-reason"] == (
        "firing: GpuTemperatureHigh (gpu=1, UUID=GPU-b)"
    )
    assert "gpucluster.io/quarantine" not in json.dumps(admin(kube, "GET", "/api/v1/nodes/gpu-5")["spec"])
    ledger = admin(kube, "GET", f"/api/v1/namespaces/{NS}/configmaps/{LEDGER_NAME}")
    assert set(ledger["data"]) == {"gpu-3"}
    assert [m["manager"] for m in ledger["metadata"]["managedFields"]] == ["gpucluster-quarantine"]
    events = admin(kube, "GET", "/api/v1/namespaces/default/events")["items"]
    assert sorted(e["reason"] for e in events) == ["NodeQuarantined", "QuarantineBreakerOpen"]

    # quarantined then deleted: the ledger keeps it, applied again by the same manager
    admin(kube, "DELETE", "/api/v1/nodes/gpu-3")
    prom.samples = []
    assert controller.cycle().ledger_written
    ledger = admin(kube, "GET", f"/api/v1/namespaces/{NS}/configmaps/{LEDGER_NAME}")
    assert "deleted" in json.loads(ledger["data"]["gpu-3"])

    # what the account may not do
    for method, path in (
        ("DELETE", "/api/v1/nodes/gpu-4"),
        ("GET", "/api/v1/pods"),
        ("GET", f"/api/v1/namespaces/{NS}/secrets"),
        ("GET", f"/api/v1/namespaces/{NS}/configmaps/other"),
    ):
        with pytest.raises(KubeError, match=r"403|not found"):
            api.request(method, path, f"{method} {path}")
