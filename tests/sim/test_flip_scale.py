"""The flip at production scale, without a cluster: the scale stacks of benchmarks/stacks/ are valid and shaped as
the scale bench needs, and sim/flip.py reads every inference service, sizes the gang and scales its timeouts."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from components.config import load_stack_file
from contract.constants import HOSTNAME_LABEL, IB_BLOCK_LABEL, IB_LEAF_LABEL
from contract.registry import QUOTA_CONTROLLER
from daemons.make_before_break.metrics import Metrics
from tests.support.sim import load_sim_module

flip = load_sim_module("flip")
ROOT = Path(__file__).resolve().parents[2]
SCALE_STACKS = {"scale96": (96, 64), "scale512": (512, 384)}


@pytest.mark.parametrize("name", sorted(SCALE_STACKS))
def test_a_scale_stack_is_valid_and_shaped_for_the_bench(name: str) -> None:
    path = ROOT / "benchmarks" / "stacks" / f"Pulumi.{name}.yaml"
    nodes, _ = SCALE_STACKS[name]
    cfg = load_stack_file(path)
    assert [(f.node_count, f.gpus_per_node) for f in cfg.flavors] == [(nodes, 8)]
    services = cfg.inference_services
    assert len(services) == 4
    assert sum(s.replicas for s in services) == 64
    assert all(s.gpus_per_replica == 1 for s in services)
    providers = cfg.burst.settings.providers
    assert [(p.name, p.kind) for p in providers] == [("fake-a", "fake")]
    assert providers[0].max_gpus >= 2 * sum(s.replicas for s in services)  # a rollout surges 100 %
    raw = yaml.safe_load(path.read_text())
    # No secret; the salt keeps `pulumi up --config-file` from writing one into the file (sim/lib.sh).
    assert raw["encryptionsalt"].startswith("v1:")
    assert not any(isinstance(v, dict) and "secure" in v for v in raw["config"].values())


def test_the_scale_stacks_are_not_in_stacks() -> None:
    """Every stacks/Pulumi.*.yaml is checked and previewed against the local sim; the scale ones stay apart."""
    assert not any((ROOT / "stacks" / f"Pulumi.{name}.yaml").exists() for name in SCALE_STACKS)


def test_setup_sums_every_service_and_the_gang_is_sized(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUCLUSTER_SIM_STACK", str(ROOT / "benchmarks" / "stacks" / "Pulumi.scale96.yaml"))
    s = flip.setup_from_stack()
    assert (s.replicas, s.nodes, s.gpus_per_node) == (64, 96, 8)
    assert [x.name for x in s.services] == ["sd-serve", "sd-serve-xl", "upscaler", "safety-check"]
    assert s.inference_namespaces == ("inference",)
    job = flip.training_job(s, "60s", 64)
    assert (job["spec"]["parallelism"], job["spec"]["completions"]) == (64, 64)
    # placed by the topology with make-before-break on: the gang tolerates the reservation of the nodes Kueue pins
    assert s.topology
    assert s.make_before_break
    assert job["spec"]["template"]["spec"]["tolerations"] == [
        {"key": "gpucluster.io/reservation", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert flip.training_job(s, "60s")["spec"]["parallelism"] == 96  # default: every node of the flavor
    assert flip.displaced_fit_in_cluster(s, 64)
    assert not flip.displaced_fit_in_cluster(s, 96)
    with pytest.raises(flip.ScenarioError, match="does not fit"):
        flip.gang_size(s, 97)
    pod = {"metadata": {"namespace": "inference", "labels": {"app.kubernetes.io/name": "upscaler"}}}
    assert flip.of_services(s, pod)
    assert not flip.of_services(s, {"metadata": {"namespace": "inference", "labels": {"app.kubernetes.io/name": "x"}}})


def test_the_local_stack_keeps_its_one_service_and_whole_cluster_gang(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUCLUSTER_SIM_STACK", raising=False)
    s = flip.setup_from_stack()
    assert (s.service, s.selector, s.replicas, s.nodes) == ("sd-serve", "app.kubernetes.io/name=sd-serve", 8, 4)
    assert flip.training_job(s, "60s")["spec"]["parallelism"] == 4
    assert not flip.displaced_fit_in_cluster(s, 4)  # the gang takes every node: the replicas burst
    assert flip.Options().step_timeout == 600
    assert flip.Options(timeout=100, timeout_scale=3).step_timeout == 300


def _scale_bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("scale_flip", ROOT / "benchmarks" / "scale_flip.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["scale_flip"] = module  # dataclasses resolve their module's annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def test_the_scale_bench_reads_the_leaders_decision_time_from_metrics_and_log(tmp_path: Path) -> None:
    bench = _scale_bench()
    metrics = Metrics()
    metrics.is_leader.set(1)
    for seconds in (0.002, 0.004):
        metrics.decide_seconds.observe(seconds)
    metrics.cycle_seconds.observe(0.3)
    leader, before = bench.parse_metrics(metrics.render().decode())
    assert leader
    metrics.decide_seconds.observe(0.02)
    _, after = bench.parse_metrics(metrics.render().decode())
    delta = after["decide_seconds"].minus(before["decide_seconds"])
    assert delta.count == 1
    assert delta.total == pytest.approx(0.02)
    assert delta.slowest_within() == 0.025
    # A restarted controller began its counters again: what it counted since is the figure.
    assert before["decide_seconds"].minus(after["decide_seconds"]) == before["decide_seconds"]

    line = {"msg": "cycle", "leader": True, "decide_seconds": 0.0125, "cycle_seconds": 0.5}
    standby = {**line, "leader": False, "decide_seconds": 9.0}
    logs = {"mbb-a": "not json\n" + json.dumps(line) + "\n" + json.dumps(standby) + "\n", "mbb-b": ""}
    worst = bench.slowest_logged(logs)
    assert worst == {"decide_seconds": 0.0125, "cycle_seconds": 0.5}


def test_the_scale_bench_says_where_a_scale_stopped() -> None:
    bench = _scale_bench()
    result = bench.ScaleResult(bench.SCALES["scale512"], stopped="make up", reason="timed out after 5400s", machine="m")
    report = result.report()
    assert "512 nodes x 8 GPUs (4096 GPUs)" in report
    assert "stopped at: make up" in report
    assert "reason: timed out after 5400s" in report
    env = bench.SCALES["scale96"].env()
    assert env["GPUCLUSTER_STACK"] == "scale96"
    assert Path(env["GPUCLUSTER_SIM_STACK"]) == ROOT / "benchmarks" / "stacks" / "Pulumi.scale96.yaml"


def test_the_capacity_stack_has_four_queues_sharing_the_whole_flavor() -> None:
    cfg = load_stack_file(ROOT / "benchmarks" / "stacks" / "Pulumi.capacity96.yaml")
    (flavor,) = cfg.flavors
    assert (flavor.node_count, flavor.capacity) == (96, 768)
    assert len(cfg.queues) == 4
    assert sum(q.quota[flavor.name] for q in cfg.queues.values()) == flavor.capacity
    assert cfg.controller(QUOTA_CONTROLLER).enabled
    assert {t.cluster_queue for t in cfg.teams} == set(cfg.queues)


# --- gangs placed with and without the topology (benchmarks/scale_placement.py) ---------------------------------


def test_the_scale_stacks_place_by_a_topology_on_the_sims_fabric() -> None:
    bench = _scale_bench()
    for name in SCALE_STACKS:
        cfg = load_stack_file(ROOT / "benchmarks" / "stacks" / f"Pulumi.{name}.yaml")
        topology = cfg.topology_of(cfg.flavors[0])
        assert topology is not None
        assert topology.node_labels == [IB_BLOCK_LABEL, IB_LEAF_LABEL, HOSTNAME_LABEL]
        scale = bench.SCALES[name]
        assert scale.env()["GPUCLUSTER_SIM_FABRIC"] == "8x4"
        assert scale.placement_sizes
        assert max(scale.placement_sizes) <= scale.nodes


def test_the_placement_bench_queues_both_ways_and_counts_the_domains_a_gang_spans() -> None:
    bench = _scale_bench()
    placement = bench.scale_placement
    cfg = load_stack_file(ROOT / "benchmarks" / "stacks" / "Pulumi.scale96.yaml")
    objects = {(o["kind"], o["metadata"]["name"]): o for o in placement.bench_objects(cfg)}
    assert objects[("ResourceFlavor", "bench-topology")]["spec"]["topologyName"] == "ib-fabric"
    assert "topologyName" not in objects[("ResourceFlavor", "bench-scheduler")]["spec"]
    # both queues hold every GPU of the flavor and list no admission check: make-before-break stays out
    for mode in placement.MODES:
        cq = objects[("ClusterQueue", f"bench-{mode}")]["spec"]
        assert cq["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] == 768
        assert "admissionChecksStrategy" not in cq
    tas = placement.gang_job(cfg, "g", "topology", 8, placement.annotation_for(cfg, "topology", None, False))
    annotations = tas["spec"]["template"]["metadata"]["annotations"]
    assert annotations["kueue.x-k8s.io/podset-preferred-topology"] == IB_LEAF_LABEL
    assert (tas["spec"]["parallelism"], tas["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]) == (8, "topology")
    plain = placement.gang_job(cfg, "g", "scheduler", 8, placement.annotation_for(cfg, "scheduler", None, False))
    assert not [k for k in plain["spec"]["template"]["metadata"]["annotations"] if k.startswith("kueue.x-k8s.io/")]
    assert placement.annotation_for(cfg, "topology", "block", True) == (
        "kueue.x-k8s.io/podset-required-topology",
        IB_BLOCK_LABEL,
    )
    with pytest.raises(ValueError, match="no level 'rack'"):
        placement.annotation_for(cfg, "topology", "rack", True)

    levels = [IB_BLOCK_LABEL, IB_LEAF_LABEL, HOSTNAME_LABEL]
    labels = {
        f"n{i}": {IB_BLOCK_LABEL: f"b{i // 4}", IB_LEAF_LABEL: f"l{i // 2}", HOSTNAME_LABEL: f"n{i}"} for i in range(8)
    }
    assert placement.span_of(["n0", "n1"], labels, levels) == [1, 1, 2]
    assert placement.span_of(["n0", "n3", "n7"], labels, levels) == [2, 3, 3]
    assert placement.span_of(["n0", "gone"], labels, levels) == [2, 2, 2]  # a node without labels is its own domain
    spans = [
        placement.Span("scheduler", 2, ((IB_BLOCK_LABEL, 2), (IB_LEAF_LABEL, 2)), 1.0),
        placement.Span("topology", 2, ((IB_BLOCK_LABEL, 1), (IB_LEAF_LABEL, 1)), 1.0),
    ]
    rows = placement.table(spans, levels[:2])
    assert rows[0].split()[:2] == ["gang", "nodes"]
    assert rows[1].split() == ["2", "2", "|", "1", "2", "|", "1"]
    result = bench.ScaleResult(bench.SCALES["scale96"], placement=spans, levels=tuple(levels[:2]))
    assert "placement: domains a gang spans, kube-scheduler alone | Kueue's topology (8x4 fabric" in result.report()
