"""The whole loop on the simulated cluster: training takes every GPU, inference bursts out, and comes back gradually.

One full cycle of ``sim/flip.py`` on the path without make-before-break (the check answered at once: training
preempts, the taint controller bursts, the descheduler brings replicas home), which stays the safety net. Once the
replicas run on rented GPUs, the taint controller's leader is killed (SIGKILL to its pod's process) and Prometheus is
stopped for a while: the taint must not change until Prometheus is back, and the cycle must still converge. Only the
invariants are asserted: nothing is lost, nothing flaps, nothing stays on rented GPUs. ``make bench`` prints the
figures, and runs the chaos scenario (``benchmarks/bench_chaos.py``: kills of every daemon the flip depends on, failing
and dying instances) on the make-before-break path, whose cycle itself is tested in
``tests/daemons/make_before_break/test_on_sim.py``.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from components.config import load_stack_file
from sim import chaos, controllers, flip, processes
from tests.support.local_stack import ROOT, LocalStack

pytestmark = pytest.mark.integration

CFG = load_stack_file(ROOT / "stacks" / "Pulumi.local.yaml")

#: How long Prometheus stays down once the replicas run on rented GPUs.
OUTAGE_SECONDS = 12.0


def _min_available(replicas: int, min_available: int | str) -> int:
    if isinstance(min_available, int):
        return min_available
    return -(-replicas * int(min_available.rstrip("%")) // 100)


def test_one_flip_bursts_out_returns_gradually_and_rides_out_a_killed_leader_and_a_prometheus_outage(
    local_stack: LocalStack, tmp_path: Path
) -> None:
    service = CFG.inference_services[0]
    taint = controllers.controller("taint-controller")
    assert CFG.burst is not None
    lease = CFG.burst.taint_controller.lease_name
    prometheus = processes.registry()["prometheus"]
    killed: list[str] = []
    outages: list[chaos.Outage] = []
    errors: list[BaseException] = []

    def faults(sampler: flip.Sampler) -> None:
        try:
            killed.extend(taint.kill(taint.leader(lease)))
            outages.append(chaos.prometheus_outage(prometheus, OUTAGE_SECONDS, sampler))
        except BaseException as e:  # the test's thread asserts there is none
            errors.append(e)

    threads: list[threading.Thread] = []

    def during(phase: str, sampler: flip.Sampler) -> None:
        if phase == "flipped_out":  # every replica Ready on rented GPUs, the burst taint off
            threads.append(threading.Thread(target=faults, args=(sampler,), name="faults", daemon=True))
            threads[-1].start()

    opts = flip.Options(path=flip.PREEMPT, quiet=True, out=tmp_path, train_for="15s", during=during)
    try:
        tl, figures = flip.run_cycle(opts)
    finally:
        for thread in threads:
            thread.join(timeout=OUTAGE_SECONDS + 60)
        if not prometheus.running():
            prometheus.start()
    assert not errors, errors
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
    # The leader's process was killed; while Prometheus was down its successor's queries failed, and the taint
    # stayed off (no data is no reason to move serving back).
    assert len(killed) == 1, killed
    (outage,) = outages
    assert outage.seconds >= OUTAGE_SECONDS
    assert outage.query_errors > 0, "the taint controller should have seen Prometheus fail"
    assert outage.taints == {""}, outage.taints
    # The kubelet restarted the killed process in place, and both replicas serve again.
    taint.start()
    assert taint.running()
