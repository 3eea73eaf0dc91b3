"""The default PromQL queries against real kube-state-metrics series (ksm from the pinned tools, Prometheus from
Debian), on objects in a real API server: the numbers the controller would see, and empty results with ksm down.
A second API server holds a cluster that mixes H100 and L40S nodes, for the queries by GPU type and the decision
the controller takes on their real answers.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from contract.constants import GPU_TYPE_ANNOTATION, QUARANTINE_TAINT_EFFECT, QUARANTINE_TAINT_KEY, RESERVATION_KEY
from contract.taint_controller_queries import (
    KSM_ANNOTATIONS_ALLOWLIST,
    KSM_LABELS_ALLOWLIST,
    KSM_OPT_IN_METRICS,
    fresh,
)
from contract.taint_controller_settings import TaintControllerSettings
from daemons.taint_controller.controller import REASON_REMOVED, Controller
from daemons.taint_controller.decide import Action, Decider, Thresholds
from daemons.taint_controller.kube import Taint
from daemons.taint_controller.metrics import Metrics
from daemons.toolkit.prometheus import PrometheusClient, QueryError
from tests.daemons.taint_controller.conftest import ApiServer, free_port, wait_for
from tests.daemons.taint_controller.fakes import FakeEvents, FakeNodes
from tests.daemons.toolkit.fakes import Clock
from tests.support.apiserver import create_namespaces, running_apiserver, stop_processes
from tests.support.require import missing
from tests.support.sim import tools_bin

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore:Unverified HTTPS request")]

SETTINGS = TaintControllerSettings(node_name="gpu-burst", inference_namespaces=["inference", "serving"])
GPU = "nvidia.com/gpu"
RESERVATION = {"key": RESERVATION_KEY, "value": "uid-1", "effect": "NoSchedule"}
QUARANTINE = {"key": QUARANTINE_TAINT_KEY, "value": "gpu-temperature", "effect": QUARANTINE_TAINT_EFFECT}
PRODUCT = "nvidia.com/gpu.product"
H100, L40S = "NVIDIA-H100-80GB-HBM3", "NVIDIA-L40S"


def make_node(
    core: Any,
    name: str,
    gpus: int,
    *,
    unschedulable: bool = False,
    taints: list[dict[str, str]] | None = None,
    product: str | None = None,
) -> None:
    spec: dict[str, Any] = {"unschedulable": unschedulable, "taints": taints or []}
    labels = {PRODUCT: product} if product else {}
    core.create_node(client.V1Node.model_validate({"metadata": {"name": name, "labels": labels}, "spec": spec}))
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110", GPU: str(gpus)}
    core.patch_node_status(name, {"status": {"capacity": resources, "allocatable": resources}})


def make_pod(
    core: Any,
    ns: str,
    name: str,
    *,
    gpus: int,
    node: str | None,
    phase: str,
    gpu_type: str | None = None,
    product: str | None = None,
) -> None:
    """A pod asking for ``gpu_type`` by its annotation and/or for ``product`` by its nodeSelector."""
    limits = {GPU: str(gpus)} if gpus else {}
    spec: dict[str, Any] = {
        "containers": [
            {"name": "c", "image": "registry.example/app:1.0", "resources": {"limits": limits, "requests": limits}}
        ]
    }
    if node:
        spec["nodeName"] = node
    if product:
        spec["nodeSelector"] = {PRODUCT: product}
    meta: dict[str, Any] = {"name": name}
    if gpu_type:
        meta["annotations"] = {GPU_TYPE_ANNOTATION: gpu_type}
    core.create_namespaced_pod(ns, client.V1Pod.model_validate({"metadata": meta, "spec": spec}))
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
    create_namespaces(apiserver, "inference", "serving", "research")
    core: Any = client.CoreV1Api(apiserver.api_client)
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

    with ksm_and_prometheus(apiserver.kubeconfig, tmp_path_factory.mktemp("prom")) as (url, ksm):
        wait_for(
            "ksm series in Prometheus",
            lambda: (
                len(prom_query(url, 'kube_pod_status_phase{pod="waiting-elsewhere",phase="Pending"} == 1')) == 1
                and len(prom_query(url, 'kube_node_status_allocatable{resource="nvidia_com_gpu"}')) >= 5
                and len(prom_query(url, f'kube_node_spec_taint{{key="{RESERVATION_KEY}"}}')) == 1
            ),
        )
        yield url, ksm


@contextmanager
def ksm_and_prometheus(kubeconfig: Path, work: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """ksm watching the API server with the flags the README asks for, Prometheus scraping it every second."""
    prometheus = shutil.which("prometheus")
    ksm_bin = tools_bin() / "kube-state-metrics"
    if prometheus is None or not ksm_bin.exists():
        missing("needs /usr/bin/prometheus (tools/install-debian-deps.sh) and kube-state-metrics (make tools)")
    ksm_port, prom_port = free_port(), free_port()
    ksm_log = (work / "ksm.log").open("w")
    ksm = subprocess.Popen(
        [
            str(ksm_bin),
            f"--kubeconfig={kubeconfig}",
            "--resources=nodes,pods",
            f"--metric-labels-allowlist={KSM_LABELS_ALLOWLIST}",
            f"--metric-annotations-allowlist={KSM_ANNOTATIONS_ALLOWLIST}",
            f"--metric-opt-in-list={KSM_OPT_IN_METRICS}",
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
    try:
        yield f"http://127.0.0.1:{prom_port}", ksm
    finally:
        stop_processes(prom, ksm, timeout=20)
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
    clause = " unless on(node) " + fresh(f'kube_node_spec_taint{{key="{RESERVATION_KEY}"}}')
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
    reserved = f'count(kube_node_spec_taint{{key="{RESERVATION_KEY}"}})'
    wait_for("every node reserved", lambda: [r["value"][1] for r in prom_query(url, reserved)] == ["4"])
    promql = SETTINGS.render_query(SETTINGS.headroom_query)
    assert PrometheusClient(url, 5).query(promql).single_value() == 0


# --- a cluster that mixes GPU types (its own API server) ----------------------------------------------------------

TYPED = TaintControllerSettings(
    node_name="gpu-burst", inference_namespaces=["inference"], gpu_types=["H100", "L40S"], high_mark=4, low_mark=1
)


@pytest.fixture(scope="module")
def typed_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any]]:
    """Prod's shape: idle H100s, full L40S, L40S inference Pending; a quarantined H100 with a replica still on it.
    (Prometheus URL, CoreV1Api)."""
    work = tmp_path_factory.mktemp("typed")
    (work / "api").mkdir()
    with running_apiserver(work / "api", namespaces=("inference", "research")) as api:
        core: Any = client.CoreV1Api(api.api_client)
        make_node(core, "h100-a", 8, product=H100)  # idle
        make_node(core, "h100-q", 8, product=H100, taints=[QUARANTINE])  # quarantined: no headroom either side
        make_node(core, "l40s-a", 8, product=L40S)  # full
        make_node(core, "l40s-r", 8, product=L40S, taints=[RESERVATION])
        make_node(core, "l40s-c", 8, product=L40S, unschedulable=True)
        make_node(core, "t4-a", 8, product="Tesla-T4")  # a GPU of no configured type: the whole cluster's only
        make_node(core, "mixed-a", 4, product="H100-or-L40S")  # names two types: neither
        make_node(core, "gpu-burst", 16)
        make_pod(core, "research", "train-l40s", gpus=8, node="l40s-a", phase="Running")
        make_pod(core, "inference", "serve-quarantined", gpus=1, node="h100-q", phase="Running", gpu_type="H100")
        make_pod(core, "research", "train-t4", gpus=1, node="t4-a", phase="Running")
        # Pending inference: two L40S by annotation, one H100 by nodeSelector only, one L40S whose annotation
        # wins over its H100 nodeSelector, one asking for no type; one L40S outside the inference namespaces.
        make_pod(core, "inference", "l40s-1", gpus=1, node=None, phase="Pending", gpu_type="L40S")
        make_pod(core, "inference", "l40s-2", gpus=1, node=None, phase="Pending", gpu_type="L40S")
        make_pod(core, "inference", "h100-by-selector", gpus=1, node=None, phase="Pending", product=H100)
        make_pod(
            core, "inference", "annotation-wins", gpus=1, node=None, phase="Pending", gpu_type="L40S", product=H100
        )
        make_pod(core, "inference", "untyped", gpus=1, node=None, phase="Pending")
        make_pod(core, "research", "l40s-elsewhere", gpus=1, node=None, phase="Pending", gpu_type="L40S")
        # On the virtual node: one L40S and one H100 replica and one of no type running, a failed L40S one.
        make_pod(core, "inference", "out-l40s", gpus=1, node="gpu-burst", phase="Running", gpu_type="L40S")
        make_pod(core, "inference", "out-h100", gpus=1, node="gpu-burst", phase="Running", gpu_type="H100")
        make_pod(core, "inference", "out-untyped", gpus=1, node="gpu-burst", phase="Running")
        make_pod(core, "inference", "out-failed", gpus=1, node="gpu-burst", phase="Failed", gpu_type="L40S")
        with ksm_and_prometheus(api.kubeconfig, work) as (url, _):
            wait_for(
                "ksm series in Prometheus",
                lambda: (
                    len(prom_query(url, "kube_node_labels")) == 8
                    and len(prom_query(url, 'kube_pod_status_phase{pod="out-failed",phase="Failed"} == 1')) == 1
                    and len(prom_query(url, "kube_pod_nodeselectors")) == 13
                    and len(prom_query(url, f'kube_node_spec_taint{{key="{QUARANTINE_TAINT_KEY}"}}')) == 1
                ),
            )
            yield url, core


def rows(url: str, query: str, settings: TaintControllerSettings = TYPED) -> dict[str, float]:
    return PrometheusClient(url, 5).query(settings.render_query(query)).by_label("gpu_type")


def test_headroom_by_type_counts_each_types_free_gpus(typed_cluster: tuple[str, Any]) -> None:
    """H100: h100-a's 8 (h100-q quarantined). L40S: l40s-a full, l40s-r reserved, l40s-c cordoned: 0, not absent."""
    url, _ = typed_cluster
    assert rows(url, TYPED.headroom_by_type_query) == {"H100": 8, "L40S": 0}


def test_the_whole_cluster_leaves_quarantined_nodes_out(typed_cluster: tuple[str, Any]) -> None:
    """h100-a 8 + t4-a 7 + mixed-a 4; without the quarantine clause h100-q's 8 - 1 would count."""
    url, _ = typed_cluster
    assert rows(url, TYPED.headroom_query) == {"": 19}
    clause = " unless on(node) " + fresh(f'kube_node_spec_taint{{key="{QUARANTINE_TAINT_KEY}"}}')
    assert clause in TYPED.headroom_query
    assert rows(url, TYPED.headroom_query.replace(clause, "")) == {"": 19 + 8 - 1}
    assert rows(url, TYPED.headroom_by_type_query.replace(clause, ""))["H100"] == 8 + 8 - 1


def test_pending_by_type_reads_the_annotation_then_the_node_selector(typed_cluster: tuple[str, Any]) -> None:
    url, _ = typed_cluster
    assert rows(url, TYPED.pending_by_type_query) == {"H100": 1, "L40S": 3}
    assert rows(url, TYPED.pending_query) == {"": 5}  # the untyped one too; research's not


def test_burst_counts_live_pods_on_the_virtual_node_by_type(typed_cluster: tuple[str, Any]) -> None:
    url, _ = typed_cluster
    assert rows(url, TYPED.burst_query) == {"": 3, "H100": 1, "L40S": 1}  # the Failed one is not out


def test_without_gpu_types_the_rows_by_type_are_empty(typed_cluster: tuple[str, Any]) -> None:
    """No gpuTypes: the placeholders expand to an empty vector, and the burst query keeps only its total."""
    url, _ = typed_cluster
    plain = TaintControllerSettings(node_name="gpu-burst", inference_namespaces=["inference"])
    assert rows(url, plain.headroom_by_type_query, plain) == {}
    assert rows(url, plain.pending_by_type_query, plain) == {}
    assert rows(url, plain.burst_query, plain) == {"": 3}


def test_idle_h100s_do_not_hold_back_pending_l40s_inference(typed_cluster: tuple[str, Any]) -> None:
    """The controller on the real answers: L40S has no room for its Pending replicas, so the taint comes off though
    the whole cluster has 19 free GPUs (at once: l40s-r is reserved for a gang); without gpuTypes it stays on."""
    url, _ = typed_cluster

    def ticks(settings: TaintControllerSettings) -> tuple[list[str | None], FakeEvents, Metrics]:
        clock, events = Clock(), FakeEvents()
        metrics = Metrics(wall_clock=clock.wall)
        nodes = FakeNodes("gpu-burst", [Taint(settings.taint_key, "NoSchedule", "true")])
        controller = Controller(
            settings,
            PrometheusClient(url, 5),
            nodes,
            events,
            metrics,
            is_leader=lambda: True,
            clock=clock,
            wall_clock=clock.wall,
        )
        changes = []
        for _ in range(5):  # 0 .. 120 s
            changes.append(controller.tick().changed)
            clock.advance(30)
        return changes, events, metrics

    changes, events, metrics = ticks(TYPED)
    assert changes == ["remove"] + [None] * 4
    assert events.reasons() == [REASON_REMOVED]
    assert events.events[0][2].startswith("L40S: headroom 0 < lowMark 1 with 3 inference pods pending and 1 nodes")
    sample = metrics.registry.get_sample_value
    assert sample("gpucluster_taint_controller_headroom_by_type_gpus", {"gpu_type": "H100"}) == 8
    assert sample("gpucluster_taint_controller_pending_inference_by_type_pods", {"gpu_type": "L40S"}) == 3
    assert sample("gpucluster_taint_controller_burst_inference_pods", {}) == 3

    plain = TYPED.model_copy(update={"gpu_types": []})
    changes, events, _ = ticks(plain)
    assert changes == [None] * 5  # 19 free GPUs in all: the one pool sees room, and the taint stays
    assert events.events == []


def test_a_type_with_room_and_pods_out_still_waits_for_the_other(typed_cluster: tuple[str, Any]) -> None:
    """With the L40S replicas scheduled (nothing Pending), H100 has room but L40S, where a replica is out, has
    none: the taint does not go on."""
    url, core = typed_cluster
    for name in ("l40s-1", "l40s-2", "h100-by-selector", "annotation-wins", "untyped"):
        core.delete_namespaced_pod(name, "inference", grace_period_seconds=0)
    wait_for("nothing pending", lambda: rows(url, TYPED.pending_query) == {"": 0})
    decider = Decider(Thresholds(high_mark=4, low_mark=1, hold_add_s=0, hold_remove_s=0))
    headroom = {**rows(url, TYPED.headroom_by_type_query), **rows(url, TYPED.headroom_query)}
    pending = {**rows(url, TYPED.pending_by_type_query), **rows(url, TYPED.pending_query)}
    decision = decider.decide(0, headroom, pending, False, burst=rows(url, TYPED.burst_query))
    assert (decision.action, decision.reason, decision.gpu_type) == (Action.HOLD, "nothing-pending", "L40S")
    # Once the L40S replica is back in-cluster, H100's room is where the rest come home: the taint goes on.
    core.delete_namespaced_pod("out-l40s", "inference", grace_period_seconds=0)
    wait_for("L40S home", lambda: "L40S" not in rows(url, TYPED.burst_query))
    decision = decider.decide(1, headroom, pending, False, burst=rows(url, TYPED.burst_query))
    assert (decision.action, decision.gpu_type) == (Action.ADD, "H100")


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
