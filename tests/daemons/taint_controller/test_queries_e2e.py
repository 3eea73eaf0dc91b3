"""The default PromQL queries against real kube-state-metrics series (ksm from the pinned tools, Prometheus from
Debian), on objects in a real API server: the numbers the controller would see, and empty results with ksm down.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from components.taint_controller_settings import RESERVATION_TAINT_KEY, TaintControllerSettings
from daemons.taint_controller.prometheus import PrometheusClient, QueryError
from tests.daemons.taint_controller.conftest import ApiServer, free_port, wait_for
from tests.support.require import missing
from tests.support.sim import tools_bin

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore:Unverified HTTPS request")]

SETTINGS = TaintControllerSettings(node_name="gpu-burst", inference_namespaces=["inference", "serving"])
GPU = "nvidia.com/gpu"
RESERVATION = {"key": RESERVATION_TAINT_KEY, "value": "uid-1", "effect": "NoSchedule"}


def make_node(
    core: Any, name: str, gpus: int, *, unschedulable: bool = False, taints: list[dict[str, str]] | None = None
) -> None:
    spec: dict[str, Any] = {"unschedulable": unschedulable, "taints": taints or []}
    core.create_node(client.V1Node.model_validate({"metadata": {"name": name}, "spec": spec}))
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110", GPU: str(gpus)}
    core.patch_node_status(name, {"status": {"capacity": resources, "allocatable": resources}})


def make_pod(core: Any, ns: str, name: str, *, gpus: int, node: str | None, phase: str) -> None:
    limits = {GPU: str(gpus)} if gpus else {}
    spec: dict[str, Any] = {
        "containers": [
            {"name": "c", "image": "registry.example/app:1.0", "resources": {"limits": limits, "requests": limits}}
        ]
    }
    if node:
        spec["nodeName"] = node
    core.create_namespaced_pod(ns, client.V1Pod.model_validate({"metadata": {"name": name}, "spec": spec}))
    core.patch_namespaced_pod_status(name, ns, {"status": {"phase": phase}})


def prom_query(url: str, promql: str) -> list[dict[str, Any]]:
    q = urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=10) as r:
        return list(json.loads(r.read())["data"]["result"])


@pytest.fixture(scope="module")
def cluster(
    apiserver: ApiServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Objects in the API server, ksm watching them, Prometheus scraping ksm every second: (Prometheus URL, ksm)."""
    prometheus = shutil.which("prometheus")
    ksm_bin = tools_bin() / "kube-state-metrics"
    if prometheus is None or not ksm_bin.exists():
        missing("needs /usr/bin/prometheus (tools/install-debian-deps.sh) and kube-state-metrics (make tools)")
    core: Any = client.CoreV1Api(apiserver.api_client)
    for ns in ("inference", "serving", "research"):
        core.create_namespace(client.V1Namespace.model_validate({"metadata": {"name": ns}}))
    make_node(core, "gpu-a", 8)
    make_node(core, "gpu-b", 8, unschedulable=True)  # cordoned: neither its GPUs nor its pods count
    make_node(core, "gpu-burst", 16)  # the virtual node
    make_node(core, "cpu-1", 0)
    # Reserved for a waiting gang by make-before-break: neither its GPUs nor its pods are headroom.
    make_node(core, "gpu-c", 8, taints=[RESERVATION])
    # Another NoSchedule taint: still headroom.
    make_node(core, "gpu-d", 8, taints=[{"key": "example.com/other", "value": "x", "effect": "NoSchedule"}])
    make_pod(core, "research", "train-running", gpus=2, node="gpu-a", phase="Running")
    make_pod(core, "research", "train-bound-pending", gpus=1, node="gpu-a", phase="Pending")
    make_pod(core, "research", "train-done", gpus=4, node="gpu-a", phase="Succeeded")
    make_pod(core, "research", "train-cordoned", gpus=2, node="gpu-b", phase="Running")
    make_pod(core, "inference", "burst-running", gpus=1, node="gpu-burst", phase="Running")
    make_pod(core, "inference", "leaving-reserved", gpus=1, node="gpu-c", phase="Running")
    make_pod(core, "inference", "on-other-taint", gpus=1, node="gpu-d", phase="Running")
    make_pod(core, "inference", "waiting-1", gpus=1, node=None, phase="Pending")
    make_pod(core, "serving", "waiting-2", gpus=1, node=None, phase="Pending")
    make_pod(core, "inference", "bound-pending", gpus=0, node="cpu-1", phase="Pending")
    make_pod(core, "research", "waiting-elsewhere", gpus=1, node=None, phase="Pending")

    work = tmp_path_factory.mktemp("prom")
    ksm_port, prom_port = free_port(), free_port()
    ksm_log = (work / "ksm.log").open("w")
    ksm = subprocess.Popen(
        [
            str(ksm_bin),
            f"--kubeconfig={apiserver.kubeconfig}",
            "--resources=nodes,pods",
            "--host=127.0.0.1",
            f"--port={ksm_port}",
            "--telemetry-host=127.0.0.1",
            f"--telemetry-port={free_port()}",
        ],
        stdout=ksm_log,
        stderr=subprocess.STDOUT,
    )
    (work / "prometheus.yml").write_text(
        json.dumps(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "scrape_configs": [
                    {
                        "job_name": "kube-state-metrics",
                        "honor_labels": True,
                        "static_configs": [{"targets": [f"127.0.0.1:{ksm_port}"]}],
                    }
                ],
            }
        )
    )
    prom_log = (work / "prometheus.log").open("w")
    prom = subprocess.Popen(
        [
            prometheus,
            f"--config.file={work / 'prometheus.yml'}",
            f"--storage.tsdb.path={work / 'data'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        ],
        stdout=prom_log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{prom_port}"
    try:
        wait_for(
            "ksm series in Prometheus",
            lambda: (
                len(prom_query(url, 'kube_pod_status_phase{pod="waiting-elsewhere",phase="Pending"} == 1')) == 1
                and len(prom_query(url, 'kube_node_status_allocatable{resource="nvidia_com_gpu"}')) >= 5
                and len(prom_query(url, f'kube_node_spec_taint{{key="{RESERVATION_TAINT_KEY}"}}')) == 1
            ),
        )
        yield url, ksm
    finally:
        for proc in (prom, ksm):
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        ksm_log.close()
        prom_log.close()


def test_headroom_counts_schedulable_real_nodes_minus_bound_live_requests(cluster: tuple[str, Any]) -> None:
    url, _ = cluster
    promql = SETTINGS.render_query(SETTINGS.headroom_query)
    # gpu-a 8 + gpu-d 8 + cpu-1 0 (gpu-b cordoned, gpu-c reserved, gpu-burst virtual) minus 2 Running + 1 bound
    # Pending on gpu-a and 1 Running on gpu-d; neither the reserved gpu-c nor its pod counts
    assert PrometheusClient(url, 5).query(promql).single_value() == 12


def test_headroom_without_the_reservation_leave_out_would_count_the_reserved_node(cluster: tuple[str, Any]) -> None:
    """The same query without its reservation clauses sees gpu-c: the leave-out is what keeps it out."""
    url, _ = cluster
    clause = f' unless on(node) kube_node_spec_taint{{key="{RESERVATION_TAINT_KEY}"}}'
    assert clause in SETTINGS.headroom_query
    promql = SETTINGS.render_query(SETTINGS.headroom_query.replace(clause, ""))
    assert PrometheusClient(url, 5).query(promql).single_value() == 12 + 8 - 1


def test_pending_counts_unbound_pending_pods_in_inference_namespaces(cluster: tuple[str, Any]) -> None:
    url, _ = cluster
    promql = SETTINGS.render_query(SETTINGS.pending_query)
    assert (
        PrometheusClient(url, 20 / 3).query(promql).single_value() == 2
    )  # waiting-1, waiting-2 (a fractional timeout is accepted)


def test_nothing_pending_is_zero_not_empty(cluster: tuple[str, Any]) -> None:
    url, _ = cluster
    only_research = TaintControllerSettings(inference_namespaces=["empty-ns"])
    assert PrometheusClient(url, 5).query(only_research.render_query(only_research.pending_query)).single_value() == 0


def test_no_gpu_pods_at_all_is_full_headroom(apiserver: ApiServer, cluster: tuple[str, Any]) -> None:
    """Only the requests side falls back to zero: with every GPU pod gone the headroom is the allocatable."""
    url, _ = cluster
    core: Any = client.CoreV1Api(apiserver.api_client)
    for pod in core.list_pod_for_all_namespaces().items:
        if any((c.resources.limits or {}).get(GPU) not in (None, "0") for c in pod.spec.containers):
            core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0)
    gone = 'count(kube_pod_container_resource_requests{resource="nvidia_com_gpu"})'
    wait_for("GPU requests gone", lambda: prom_query(url, gone) == [])
    promql = SETTINGS.render_query(SETTINGS.headroom_query)
    assert PrometheusClient(url, 5).query(promql).single_value() == 16  # gpu-a 8 + gpu-d 8 + cpu-1 0


def test_every_schedulable_node_reserved_is_zero_headroom_not_unknown(
    apiserver: ApiServer, cluster: tuple[str, Any]
) -> None:
    url, _ = cluster
    core: Any = client.CoreV1Api(apiserver.api_client)
    for name in ("gpu-a", "gpu-d", "cpu-1"):
        core.patch_node(name, {"spec": {"taints": [RESERVATION]}})
    reserved = f'count(kube_node_spec_taint{{key="{RESERVATION_TAINT_KEY}"}})'
    wait_for("every node reserved", lambda: [r["value"][1] for r in prom_query(url, reserved)] == ["4"])
    promql = SETTINGS.render_query(SETTINGS.headroom_query)
    assert PrometheusClient(url, 5).query(promql).single_value() == 0


def test_both_queries_are_empty_with_ksm_down(cluster: tuple[str, Any]) -> None:
    """Runs last in this module: it stops ksm. The staleness markers of failed scrapes empty the series."""
    url, ksm = cluster
    ksm.terminate()
    ksm.wait(timeout=20)
    promql = SETTINGS.render_query(SETTINGS.headroom_query)
    wait_for("ksm series gone", lambda: prom_query(url, promql) == [])
    for query in (SETTINGS.headroom_query, SETTINGS.pending_query):
        with pytest.raises(QueryError) as info:
            PrometheusClient(url, 5).query(SETTINGS.render_query(query)).single_value()
        assert info.value.reason == "empty"
