"""The whole loop on the simulated cluster: training takes every GPU, inference bursts out, and comes back gradually.

One full cycle of ``sim/flip.py`` on the path without make-before-break (the check answered at once: training
preempts, the taint controller bursts, the descheduler brings replicas home), which stays the safety net, then a
short chaos run on the make-before-break path (3 SIGKILLs, failing and dying instances, Prometheus stopped for a
while). ``make bench`` prints the figures; here only the invariants are asserted: nothing is lost, nothing flaps,
nothing stays on rented GPUs. The make-before-break cycle itself: ``tests/daemons/make_before_break/test_on_sim.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from components.config import load_stack_file
from tests.support.local_stack import ROOT, LocalStack
from tests.support.sim import load_sim_module

pytestmark = pytest.mark.integration

CFG = load_stack_file(ROOT / "stacks" / "Pulumi.local.yaml")
flip = load_sim_module("flip")
chaos = load_sim_module("chaos")


def _min_available(replicas: int, min_available: int | str) -> int:
    if isinstance(min_available, int):
        return min_available
    return -(-replicas * int(min_available.rstrip("%")) // 100)


def test_one_flip_bursts_out_and_returns_gradually(local_stack: LocalStack, tmp_path: Path) -> None:
    service = CFG.inference_services[0]
    opts = flip.Options(path=flip.PREEMPT, quiet=True, out=tmp_path, train_for="15s")
    tl, figures = flip.run_cycle(opts)
    names = [m.name for m in tl.marks]
    assert names == [
        "submitted",
        "quota_reserved",
        "preempted",
        "admitted",
        "taint_removed",
        "flipped_out",
        "training_running",
        "training_done",
        "taint_added",
        "returned",
        "external_gone",
    ]
    assert figures.inference_preemptions > 0
    # Inference really ran on rented GPUs while training held the cluster.
    assert max(s.ready_external for s in tl.samples) == service.replicas
    assert figures.flip_out_seconds is not None
    # The return is gradual: never below what the PodDisruptionBudget allows, never a NoExecute taint.
    assert figures.min_ready_during_return >= _min_available(service.replicas, service.min_available)
    assert all(s.taint != "NoExecute" for s in tl.samples)
    # Two changes (remove, add) and no flapping; at the end everything is back and nothing is billed.
    assert (figures.taint_changes, figures.taint_flaps) == (2, 0)
    last = tl.samples[-1]
    assert (last.ready_in_cluster, last.ready_external, last.external_instances) == (service.replicas, 0, 0)


def test_the_flip_converges_under_kills_failures_and_a_prometheus_outage(
    local_stack: LocalStack, tmp_path: Path
) -> None:
    rc = chaos.run(
        ["--kills", "3", "--cycles", "1", "--prometheus-outage", "--train-for", "25s", "--out", str(tmp_path)]
    )
    report = json.loads((tmp_path / "report.json").read_text())
    assert rc == 0, report
    assert report["failures"] == []
    assert sum(report["kills"].values()) == 3
    assert report["outage_seconds"] > 0
    assert report["query_errors"] > 0, "the taint controller should have seen Prometheus fail"


def test_a_load_step_mid_flip_scales_the_service_out_on_rented_gpus_and_back(
    local_stack: LocalStack, tmp_path: Path
) -> None:
    """The HPA keeps working while every replica is rented: it reads the Service's request rate through the
    metrics adapter, asks for more replicas, they come up on the virtual node, and once the load falls it gives
    them back; no request fails on the way."""
    service = CFG.inference_services[0]
    hpa = service.hpa
    assert hpa is not None
    assert hpa.target_requests_per_replica is not None
    base, step = flip.LOAD_RATE, 24
    # 20 requests a second ask for 5 replicas (8 kept by minReplicas); 44 ask for 11.
    wanted = min(hpa.max_replicas, -(-(base + step) // int(hpa.target_requests_per_replica)))
    opts = flip.Options(
        path=flip.MAKE_BEFORE_BREAK,
        quiet=True,
        out=tmp_path,
        train_for="50s",
        load_rate=base,
        load_step=flip.LoadStep(step, 40),
    )
    tl, f = flip.run_cycle(opts)
    print("\n" + flip.timeline.side_by_side([f]))
    h = f.hpa
    assert h is not None
    assert h.base == hpa.min_replicas
    # the rate is measured over 10 s windows: the count lands within one replica of what 44 requests a second ask
    assert wanted - 1 <= h.max_desired <= hpa.max_replicas
    assert h.max_ready_external >= h.max_desired  # scaled out on rented GPUs: training held every in-cluster one
    assert h.scale_back_seconds is not None  # and back to minReplicas once the load fell
    assert tl.samples[-1].desired == hpa.min_replicas
    assert f.requests is not None
    assert f.requests.failed == 0, f.requests
    assert f.min_ready == hpa.min_replicas
