"""The make-before-break check on the simulated cluster, with the controllers ``make up`` runs.

A training gang that needs every in-cluster GPU: serving is moved to rented GPUs first and nothing is preempted;
Pulumi neither sees the flip as drift nor undoes it; with no rented capacity the gang is admitted by maxHold and
the Deployment goes back where it was, saying why; a workload deleted mid-flip leaves nothing reserved or moved;
a SIGKILLed leader is replaced and the cycle converges. Timings are printed, never asserted.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from components.config import load_stack_file
from contract.controllers.make_before_break import EPOCH_ANNOTATION, FLIPS_ANNOTATION
from contract.registry import MAKE_BEFORE_BREAK
from contract.registry import MAKE_BEFORE_BREAK as MAKE_BEFORE_BREAK_SPEC
from tests.support.local_stack import ROOT, LocalStack, wait_for
from tests.support.sim import load_sim_module

pytestmark = pytest.mark.integration

CFG = load_stack_file(ROOT / "stacks" / "Pulumi.local.yaml")
MBB = CFG.controller(MAKE_BEFORE_BREAK)
SERVICE = CFG.inference_services[0]
TEAM = CFG.teams[0]
assert CFG.burst is not None
FAKE = next(p.fake.url for p in CFG.burst.settings.providers if p.fake is not None)
flip = load_sim_module("flip")
controllers = load_sim_module("controllers")
#: The controller in the registry.
MBB_NAME = MAKE_BEFORE_BREAK_SPEC.name


def knobs(**values: Any) -> None:
    body = json.dumps(values).encode()
    req = urllib.request.Request(f"{FAKE}/admin/knobs", data=body, method="POST")
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=5):
        pass


def deployment(stack: LocalStack) -> dict[str, Any]:
    return stack.get("deployment", SERVICE.name, "-n", SERVICE.namespace)


def moved(stack: LocalStack) -> bool:
    d = deployment(stack)
    return bool((d["metadata"].get("annotations") or {}).get(FLIPS_ANNOTATION))


def left_over(stack: LocalStack) -> list[str]:
    """What a finished or abandoned flip must not leave: reserved nodes, a moved template, rented instances."""
    out = []
    reserved = [n["metadata"]["name"] for n in stack.items("nodes", "-l", MBB.reservation_key)]
    if reserved:
        out.append(f"reserved nodes {reserved}")
    d = deployment(stack)
    if EPOCH_ANNOTATION in (d["spec"]["template"]["metadata"].get("annotations") or {}):
        out.append("the Deployment's template still moved")
    if (d.get("status") or {}).get("readyReplicas", 0) != SERVICE.replicas:
        out.append(f"{d.get('status', {}).get('readyReplicas', 0)} of {SERVICE.replicas} Ready")
    live = flip.fake_cloud_stats(FAKE).get("liveInstances", -1)
    if live:
        out.append(f"{live} instances still billed")
    return out


def events(stack: LocalStack, namespace: str, kind: str, name: str) -> list[dict[str, Any]]:
    return [
        e
        for e in stack.items("events", "-n", namespace)
        if e["involvedObject"].get("kind") == kind and e["involvedObject"].get("name", "").startswith(name)
    ]


@pytest.fixture
def settled(local_stack: LocalStack) -> Iterator[LocalStack]:
    """No training Job, knobs at rest, every replica home before and after."""
    knobs(createFailureRate=0.0, deathRate=0.0, bootSeconds=5.0)
    local_stack.kubectl("delete", "job", flip.TRAINING_JOB, "-n", TEAM.namespace, "--ignore-not-found", "--wait=true")
    wait_for("nothing left of an earlier flip", lambda: not left_over(local_stack), timeout=240, interval=2)
    yield local_stack
    knobs(createFailureRate=0.0, deathRate=0.0, bootSeconds=5.0)
    local_stack.kubectl("delete", "job", flip.TRAINING_JOB, "-n", TEAM.namespace, "--ignore-not-found", "--wait=true")
    controllers.controller(MBB_NAME).start()
    wait_for("nothing left of the flip", lambda: not left_over(local_stack), timeout=240, interval=2)


def admitted(stack: LocalStack) -> dict[str, Any] | None:
    """The training Job's Workload once it is admitted."""
    for w in stack.items("workloads.kueue.x-k8s.io", "-n", TEAM.namespace):
        if flip.workload_state([w]) in ("admitted", "finished"):
            return w
    return None


def submit(stack: LocalStack, train_for: str = "40s") -> None:
    s = flip.setup_from_stack()
    stack.apply(flip.training_job(s, train_for))


def test_serving_moves_first_nothing_is_preempted_and_pulumi_leaves_the_flip_alone(
    settled: LocalStack, tmp_path: Path
) -> None:
    """One make-before-break cycle with requests through the Service the whole time: no request fails, the HPA
    (reading the Service's request rate through the metrics adapter) holds the service at its floor throughout, and
    pulumi neither sees nor undoes the flip. How the HPA scales out on rented GPUs under a load step mid-flip is the
    fourth cycle of ``benchmarks/bench_flip.py``: with the training run it needs to outlast the step, it costs
    minutes of the test budget."""
    stack = settled
    seen: dict[str, Any] = {}

    def during(phase: str, sampler: Any) -> None:
        if phase == "making_room":
            wait_for("the Deployment moved", lambda: moved(stack), timeout=60, interval=0.5)
            t0 = time.monotonic()
            preview = stack.pulumi("preview", "--stack", "local", "--expect-no-changes", check=False)
            seen["preview"] = (preview.returncode, preview.stdout[-2000:], time.monotonic() - t0)
        if phase == "flipped_out":
            up = stack.pulumi("up", "--stack", "local", "--yes", "--skip-preview", check=False)
            d = deployment(stack)
            seen["up"] = (up.returncode, up.stdout[-2000:])
            seen["after_up"] = (d["spec"]["template"]["metadata"].get("annotations") or {}).get(EPOCH_ANNOTATION)
            seen["external_after_up"] = sampler.take().ready_external

    hpa = SERVICE.hpa
    assert hpa is not None
    assert hpa.target_requests_per_replica is not None
    # 20 requests a second ask for 5 replicas: minReplicas keeps 8
    assert -(-flip.LOAD_RATE // int(hpa.target_requests_per_replica)) < hpa.min_replicas
    opts = flip.Options(
        path=flip.MAKE_BEFORE_BREAK,
        quiet=True,
        out=tmp_path,
        # Long enough for the pulumi up at flipped_out to finish while every replica is still rented.
        train_for="75s",
        during=during,
        load_rate=flip.LOAD_RATE,
    )
    tl, f = flip.run_cycle(opts)
    print("\n" + flip.timeline.side_by_side([f]))
    code, out, took = seen["preview"]
    assert code == 0, f"pulumi preview --expect-no-changes failed mid-flip:\n{out}"
    print(f"preview --expect-no-changes mid-flip: clean in {took:.0f}s")
    assert seen["up"][0] == 0, seen["up"][1]
    assert seen["after_up"], "pulumi up undid the flip (the template lost its placement epoch)"
    assert seen["external_after_up"] == SERVICE.replicas
    names = [m.name for m in tl.marks]
    assert names[:3] == ["submitted", "quota_reserved", "admitted"]
    assert "preempted" not in names
    assert names[-3:] == ["training_done", "returned", "external_gone"]
    # Every replica Ready the whole cycle; the gang ran on GPUs nothing used.
    assert f.min_ready == SERVICE.replicas
    assert f.seconds_below_desired == 0
    assert f.inference_preemptions == 0
    # Not one request failed: no replica took traffic before it could serve, none was cut off in flight.
    assert f.requests is not None
    assert f.requests.failed == 0, f.requests
    # The HPA held its floor the whole cycle, every replica of it rented while training ran.
    desired = {x.desired for x in tl.samples if x.desired}
    assert desired == {hpa.min_replicas}, desired
    assert max(x.ready_external for x in tl.samples) == SERVICE.replicas
    assert not left_over(stack)
    reasons = {e["reason"] for e in events(stack, SERVICE.namespace, "Deployment", SERVICE.name)}
    assert {"MovedForTraining", "PlacementHome"} <= reasons, reasons


def test_without_rented_capacity_training_is_admitted_by_max_hold_and_serving_stays_put(settled: LocalStack) -> None:
    stack = settled
    knobs(createFailureRate=1.0)  # every create refused: the replacements can never be Ready
    submit(stack, train_for="20s")
    t0 = time.monotonic()
    wl = wait_for("the gang admitted by maxHold", lambda: admitted(stack), timeout=MBB.max_hold_seconds + 60)
    print(f"\nadmitted {time.monotonic() - t0:.0f}s after submission (maxHold {MBB.max_hold})")
    (check,) = [c for c in wl["status"]["admissionChecks"] if c["name"] == MBB.admission_check_name]
    assert check["state"] == "Ready"
    assert "maxHold" in check["message"], check["message"]
    wl_events = events(stack, TEAM.namespace, "Workload", wl["metadata"]["name"])
    assert "FallbackMaxHold" in {e["reason"] for e in wl_events}
    # Nothing half-moved: the Deployment went back to its own template, and says why.
    wait_for(
        "the Deployment back on its own template",
        lambda: EPOCH_ANNOTATION not in (deployment(stack)["spec"]["template"]["metadata"].get("annotations") or {}),
        timeout=60,
    )
    describe = stack.kubectl("describe", "deployment", SERVICE.name, "-n", SERVICE.namespace)
    assert "MovedForTraining" in describe
    assert "could not leave" in describe or "PlacementHome" in describe, describe[-1500:]
    # Leave with the creates still refused: the preempted replicas come back in-cluster once the gang is gone, and
    # none is rented only to be brought home again at the descheduler's pace.
    stack.kubectl("delete", "job", flip.TRAINING_JOB, "-n", TEAM.namespace, "--ignore-not-found", "--wait=true")
    t1 = time.monotonic()
    wait_for("every replica home", lambda: not left_over(stack), timeout=240, interval=2)
    print(f"every replica home {time.monotonic() - t1:.0f}s after the gang left")
    knobs(createFailureRate=0.0)


def test_a_workload_deleted_mid_flip_leaves_nothing_reserved_or_moved(settled: LocalStack) -> None:
    stack = settled
    knobs(bootSeconds=20.0)  # the replacements take a while: delete while they boot
    submit(stack)
    wait_for("the Deployment moved", lambda: moved(stack), timeout=60, interval=0.5)
    assert stack.items("nodes", "-l", MBB.reservation_key)
    stack.kubectl("delete", "job", flip.TRAINING_JOB, "-n", TEAM.namespace, "--wait=true")
    t0 = time.monotonic()
    wait_for("nothing left of the abandoned flip", lambda: not left_over(stack), timeout=240, interval=2)
    print(f"\nabandoned flip cleaned up in {time.monotonic() - t0:.0f}s")


def test_a_killed_leader_is_replaced_and_the_cycle_converges(settled: LocalStack, tmp_path: Path) -> None:
    stack = settled
    controller = controllers.controller(MBB_NAME)
    killed: list[str] = []

    def during(phase: str, sampler: Any) -> None:
        if phase in ("making_room", "training_done"):
            lease = stack.get("lease", MBB.lease_name, "-n", MBB.namespace)
            leader = lease["spec"]["holderIdentity"]
            # SIGKILL: a pod's process is restarted by its kubelet, a local process once started again
            assert controller.kill(leader), leader
            killed.append(leader)
            time.sleep(3)
            controller.start()

    opts = flip.Options(path=flip.MAKE_BEFORE_BREAK, quiet=True, out=tmp_path, train_for="20s", during=during)
    _, f = flip.run_cycle(opts)
    print("\n" + flip.timeline.side_by_side([f]) + f"\nkilled: {killed}")
    assert len(killed) == 2
    assert f.training_admission_seconds is not None
    assert f.training_admission_seconds <= MBB.max_hold_seconds + MBB.lease_duration_seconds + 2 * MBB.interval_seconds
    assert f.min_ready == SERVICE.replicas
    assert f.inference_preemptions == 0
    assert not left_over(stack)
