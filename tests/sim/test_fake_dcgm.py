"""The fake dcgm-exporter maps pods onto GPUs the way dcgm-exporter 4.2.0 does: ``pod``, ``namespace``,
``container`` on the GPUs a container holds, the pod's labels sanitised with dcgm-exporter's own rule, GPUs kept for
the container's life, nothing on a GPU nobody holds."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from components.telemetry.dashboard import DCGM_JOB_LABEL
from contract.constants import TRAINING_JOB_LABEL
from contract.dcgm import HOST_LABELS
from sim.fake_dcgm import FABRIC_BACKGROUND, FABRIC_BYTES_PER_TENSOR, HCAS, Allocator, Fleet, Gpu, sanitize_label_name


def pod(
    name: str,
    node: str,
    gpus: int,
    *,
    uid: str = "",
    created: str = "2026-12-01T10:00:00Z",
    phase: str = "Running",
    labels: dict[str, str] | None = None,
    namespace: str = "team-a",
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or f"uid-{name}",
            "creationTimestamp": created,
            "labels": labels or {},
        },
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": "trainer", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}},
                {"name": "sidecar", "resources": {}},
            ],
        },
        "status": {"phase": phase},
    }


def test_containers_get_the_lowest_free_gpus_of_their_node_and_keep_them() -> None:
    a = Allocator({"n0": 4, "n1": 4}, pod_labels=False)
    held = a.update(
        [pod("p1", "n0", 2, created="2026-12-01T10:00:00Z"), pod("p2", "n0", 2, created="2026-12-01T10:01:00Z")]
    )
    assert {k: v.name for k, v in held.items()} == {("n0", 0): "p1", ("n0", 1): "p1", ("n0", 2): "p2", ("n0", 3): "p2"}
    # p1 ends: p2 keeps GPUs 2 and 3 (the device plugin does not move a running container), p3 takes 0 and 1
    held = a.update([pod("p2", "n0", 2), pod("p3", "n0", 2, created="2026-12-01T10:05:00Z")])
    assert {k: v.name for k, v in held.items()} == {("n0", 0): "p3", ("n0", 1): "p3", ("n0", 2): "p2", ("n0", 3): "p2"}


def test_only_running_pods_on_our_nodes_asking_for_gpus_hold_any() -> None:
    a = Allocator({"n0": 2}, pod_labels=False)
    held = a.update(
        [
            pod("pending", "n0", 1, phase="Pending"),
            pod("elsewhere", "cpu-node", 1),
            pod("no-gpu", "n0", 0),
            pod("greedy", "n0", 8),  # more than the node has: it gets what there is
        ]
    )
    assert {k: v.name for k, v in held.items()} == {("n0", 0): "greedy", ("n0", 1): "greedy"}
    assert {v.container for v in held.values()} == {"trainer"}


def test_pod_labels_are_sanitised_as_dcgm_exporter_does_and_only_when_asked() -> None:
    labels = {TRAINING_JOB_LABEL: "llm", "jobset.sigs.k8s.io/jobset-name": "llm", "app.kubernetes.io/name": "x"}
    with_labels = Allocator({"n0": 1}, pod_labels=True).update([pod("p", "n0", 1, labels=labels)])
    assert dict(with_labels[("n0", 0)].labels) == {
        "gpucluster_io_training_job": "llm",
        "jobset_sigs_k8s_io_jobset_name": "llm",
        "app_kubernetes_io_name": "x",
    }
    assert Allocator({"n0": 1}, pod_labels=False).update([pod("p", "n0", 1, labels=labels)])[("n0", 0)].labels == ()
    assert sanitize_label_name("a.b/c-d_e9") == "a_b_c_d_e9"


def test_the_dashboards_job_label_is_what_the_exporter_makes_of_the_pods_label() -> None:
    """The dashboard reads DCGM_JOB_LABEL; the exporter derives it from the pod label with its own rule."""
    assert sanitize_label_name(TRAINING_JOB_LABEL) == DCGM_JOB_LABEL


def test_a_pod_label_named_like_an_attribute_is_written_twice_as_dcgm_exporter_does() -> None:
    pods = [pod("llm-node-0-0", "n0", 1, labels={"pod": "not-the-name"})]
    fleet = Fleet([Gpu("n0", 0, "H100")], lambda: pods, pod_labels=True)
    line = next(x for x in fleet.exposition().splitlines() if x.startswith("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{"))
    assert 'pod="not-the-name"' in line
    assert 'pod="llm-node-0-0"' in line  # a duplicate label name: Prometheus refuses the scrape, as it would


def test_the_exposition_carries_the_holder_on_its_gpus_only() -> None:
    pods = [pod("llm-node-0-0", "n0", 1, labels={TRAINING_JOB_LABEL: "llm"})]
    fleet = Fleet([Gpu("n0", 0, "H100"), Gpu("n0", 1, "H100")], lambda: pods, pod_labels=True)
    samples = {
        s.labels["gpu"]: s.labels
        for f in text_string_to_metric_families(fleet.exposition())
        if f.name == "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"
        for s in f.samples
    }
    assert samples["0"]["pod"] == "llm-node-0-0"
    assert (samples["0"]["namespace"], samples["0"]["container"]) == ("team-a", "trainer")
    assert samples["0"]["gpucluster_io_training_job"] == "llm"
    assert not {"pod", "namespace", "container", "gpucluster_io_training_job"} & set(samples["1"])


def test_a_failing_pod_list_serves_the_gpus_unmapped() -> None:
    def fail() -> list[dict[str, Any]]:
        raise OSError("connection refused")

    fleet = Fleet([Gpu("n0", 0, "H100")], fail, pod_labels=True)
    text = fleet.exposition()
    assert 'gpu="0"' in text
    assert "pod=" not in text


def test_a_pods_load_shows_on_the_gpus_it_holds_and_only_while_listed() -> None:
    pods = [pod("llm-node-0-0", "n0", 1)]
    fleet = Fleet([Gpu("n0", 0, "H100"), Gpu("n0", 1, "H100")], lambda: pods)

    def values(metric: str) -> dict[str, float]:
        return {
            s.labels["gpu"]: s.value
            for f in text_string_to_metric_families(fleet.exposition())
            if f.name == metric
            for s in f.samples
        }

    load = {"namespace": "team-a", "pod": "llm-node-0-0", "util": 100, "tensorActive": 0.0}
    assert fleet.set_loads({"pods": [{**load, "tensorActive": 0.45, "util": 97}]}) is None
    assert values("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE") == {"0": 0.45, "1": 0.0}
    assert values("DCGM_FI_DEV_GPU_UTIL") == {"0": 97.0, "1": 0.0}
    assert fleet.set_loads({"pods": [load]}) is None  # hung: busy, tensor cores idle
    assert (values("DCGM_FI_DEV_GPU_UTIL")["0"], values("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")["0"]) == (100.0, 0.0)
    assert fleet.set_loads({"pods": []}) is None
    assert values("DCGM_FI_DEV_GPU_UTIL") == {"0": 0.0, "1": 0.0}


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ({}, "expected"),
        ({"pods": [{"namespace": "a", "pod": "b", "util": 50}]}, "exactly"),
        ({"pods": [{"namespace": "a", "pod": "b", "util": "x", "tensorActive": 0}]}, "numbers"),
        ({"pods": [{"namespace": "a", "pod": "b", "util": 101, "tensorActive": 0}]}, "0-100"),
        ({"pods": [{"namespace": "a", "pod": "b", "util": 1, "tensorActive": 1.5}]}, "0-1"),
    ],
)
def test_a_bad_load_is_refused_naming_what(body: dict[str, Any], problem: str) -> None:
    fleet = Fleet([Gpu("n0", 0, "H100")])
    assert problem in (fleet.set_loads(body) or "")


def test_fabric_traffic_follows_the_gangs_tensor_activity_and_a_hang_moves_only_the_background() -> None:
    """The fake fabric exporter: a computing pod's node exchanges gradients, a hung one moves what an idle port does."""
    now = [0.0]
    pods = [pod("llm-node-0-0", "n0", 2)]
    gpus = [Gpu(n, i, "H100") for n in ("n0", "n1") for i in range(2)]
    fleet = Fleet(gpus, lambda: pods, clock=lambda: now[0])

    def moved() -> dict[str, float]:
        """Bytes each node transmitted, over its HCAs."""
        out: dict[str, float] = {}
        for f in text_string_to_metric_families(fleet.fabric_exposition()):
            for smp in f.samples:
                if smp.name == "gpucluster_fabric_infiniband_port_transmit_data_bytes_total":
                    out[smp.labels["node"]] = out.get(smp.labels["node"], 0.0) + smp.value
        return out

    before = moved()
    assert (
        fleet.set_loads({"pods": [{"namespace": "team-a", "pod": "llm-node-0-0", "util": 97, "tensorActive": 0.45}]})
        is None
    )
    now[0] += 10
    computing = {n: v - before[n] for n, v in moved().items()}
    # two GPUs at 0.45 on n0; n1 holds nothing: the background of its four ports alone
    assert computing["n0"] == pytest.approx(
        10 * (2 * 0.45 * FABRIC_BYTES_PER_TENSOR + len(HCAS) * FABRIC_BACKGROUND), rel=1e-6
    )
    assert computing["n1"] == pytest.approx(10 * len(HCAS) * FABRIC_BACKGROUND, rel=1e-6)
    assert (
        fleet.set_loads({"pods": [{"namespace": "team-a", "pod": "llm-node-0-0", "util": 100, "tensorActive": 0.0}]})
        is None
    )
    mark = moved()
    now[0] += 10
    hung = {n: v - mark[n] for n, v in moved().items()}
    assert hung["n0"] == pytest.approx(10 * len(HCAS) * FABRIC_BACKGROUND, rel=1e-6)


@pytest.mark.parametrize("host_label", HOST_LABELS)
def test_the_node_is_written_under_the_host_label_asked_for(host_label: str) -> None:
    fleet = Fleet([Gpu("n0", 0, "H100")], host_label=host_label)
    (family,) = [f for f in text_string_to_metric_families(fleet.exposition()) if f.name == "DCGM_FI_DEV_GPU_TEMP"]
    (sample,) = family.samples
    assert sample.labels[host_label] == "n0"
    assert not set(HOST_LABELS) - {host_label} & set(sample.labels)


def test_a_host_label_no_exporter_writes_is_refused() -> None:
    with pytest.raises(ValueError, match="host_label 'node'"):
        Fleet([Gpu("n0", 0, "H100")], host_label="node")
