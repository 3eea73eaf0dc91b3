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
