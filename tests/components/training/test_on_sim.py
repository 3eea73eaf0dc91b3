"""Let it crash on the simulated cluster: a job submitted with ``gpucluster submit``, restarted in place by JobSet
and Kueue, stopped at its restart bound by the interruption accounting, and counted whatever kills that daemon.

The real JobSet controller, Kueue, make-before-break, the quarantine and the interruption accounting run as
``make up`` starts them; failures are injected the way the program or the node would fail (``sim/fake_trainer``'s
``fail_pod``, ``sim/node_faults``). Timings are printed, never asserted beyond generous bounds.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.config import load_stack_file
from contract.constants import (
    HOSTNAME_LABEL,
    IB_LEAF_LABEL,
    PODSET_REQUIRED_TOPOLOGY,
    RESUME_CONFIGMAP,
    VERIFIED_ANNOTATION_PREFIX,
)
from contract.controllers.checkpoint_verifier import CHECK_OF_LABEL, KIND_LABEL
from contract.registry import CHECKPOINT_VERIFIER, MAKE_BEFORE_BREAK, STALL_DETECTOR
from contract.times import unix_seconds
from daemons.make_before_break.topology_assignment import pods_per_node
from tests.support.local_stack import ROOT, LocalStack, condition, wait_for
from tests.support.sim import load_sim_module

pytestmark = pytest.mark.integration

CFG = load_stack_file(ROOT / "stacks" / "Pulumi.local.yaml")
NS = "team-vision"
SELECTOR = "gpucluster.io/training-job"
faults = load_sim_module("node_faults")
processes = load_sim_module("processes")
controllers = load_sim_module("controllers")
trainer = load_sim_module("fake_trainer")
claims = load_sim_module("claims")
checkpoint_faults = load_sim_module("checkpoint_faults")
REAL_NODE = load_sim_module("node").NODE_NAME
#: The jobs of the tests about crashes play no load on their GPUs (idle, as a hang looks): their own stallAfter keeps
#: the stall detector off them for longer than any test runs.
STILL_FOR_THE_TEST = "1h"


def spec_file(
    tmp: Path, name: str, *, nodes: int = 1, per_hour: int = 6, stall_after: str | None = STILL_FOR_THE_TEST
) -> Path:
    doc: dict[str, Any] = {
        "name": name,
        "team": "vision",
        "image": "registry.invalid/trainer:sim",
        "command": ["train"],
        "nodes": nodes,
        "gpusPerNode": 8,
        "priority": "research-default",
        "maxRestartsPerHour": per_hour,
        # kwok would end a Job's pod after 10 s: these run until a test ends them.
        "podAnnotations": {"sim.gpucluster.io/run-for": "1000h"},
    }
    if stall_after is not None:
        doc["stallAfter"] = stall_after
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def submit(stack: LocalStack, spec: Path) -> str:
    out = stack.run(
        str(ROOT / ".venv" / "bin" / "python"),
        *("-m", "components.training", "submit", str(spec), "--stack", str(ROOT / "stacks" / "Pulumi.local.yaml")),
        *("--kubeconfig", str(stack.kubeconfig)),
    )
    return out.stdout


def jobset(stack: LocalStack, name: str) -> dict[str, Any]:
    return stack.get("jobset", "-n", NS, name)


def workload(stack: LocalStack, name: str) -> dict[str, Any]:
    (w,) = [
        w
        for w in stack.items("workloads", "-n", NS)
        if any(o.get("name") == name for o in w["metadata"].get("ownerReferences") or [])
    ]
    return w


def gang(stack: LocalStack, name: str, attempt: int) -> list[dict[str, Any]]:
    """The pods of the attempt, once every one is Running."""
    pods = stack.items("pods", "-n", NS, "-l", f"jobset.sigs.k8s.io/jobset-name={name}")
    current = [
        p
        for p in pods
        if p["metadata"]["labels"].get("jobset.sigs.k8s.io/restart-attempt") == str(attempt)
        and p["status"].get("phase") == "Running"
        and not p["metadata"].get("deletionTimestamp")
    ]
    return current


def running(stack: LocalStack, name: str, attempt: int, nodes: int, timeout: float = 120) -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = wait_for(
        f"{name} attempt {attempt}: {nodes} pods Running",
        lambda: p if len(p := gang(stack, name, attempt)) == nodes else None,
        timeout=timeout,
        interval=0.5,
    )
    return pods


def fail_program(stack: LocalStack, pod: dict[str, Any]) -> None:
    api = load_kube_config(stack)
    trainer.fail_pod(api, NS, pod["metadata"]["name"], exit_code=1)


def load_kube_config(stack: LocalStack) -> Any:
    from daemons.toolkit.kube import load_kube_config as load  # noqa: PLC0415

    return load(str(stack.kubeconfig))


def events(stack: LocalStack, name: str, reason: str) -> list[dict[str, Any]]:
    return [
        e
        for e in stack.items("events", "-n", NS, "--field-selector", f"involvedObject.name={name}")
        if e.get("reason") == reason
    ]


def forget_checkpoints(stack: LocalStack) -> None:
    """A job of a name an earlier test used starts afresh: its checkpoints, reports and the verifier's records go
    (an operator may take a record away, never write one), and its check Jobs."""
    stack.kubectl("delete", "jobs", "-n", NS, "-l", CHECK_OF_LABEL, "--ignore-not-found", "--wait=true")
    annotations = stack.get("pvc", "-n", NS, "checkpoints")["metadata"].get("annotations") or {}
    stale = [
        f"{k}-"
        for k in annotations
        if k.startswith(("checkpoint.gpucluster.io/", "progress.gpucluster.io/", VERIFIED_ANNOTATION_PREFIX))
    ]
    if stale:
        stack.kubectl("annotate", "pvc", "checkpoints", "-n", NS, *stale)
    for job in volume(stack).iterdir():
        shutil.rmtree(job)


def volume(stack: LocalStack) -> Path:
    """The directory of this machine behind the team's checkpoints claim (sim/claims.py)."""
    bound = wait_for(
        "the checkpoints claim bound",
        lambda: stack.get("pvc", "-n", NS, "checkpoints")["spec"].get("volumeName"),
        timeout=60,
        interval=0.5,
    )
    directory = claims.host_directory(stack.get("pv", bound))
    assert directory is not None, "the checkpoints claim's volume is no directory of this machine: make up again"
    return directory


def report(stack: LocalStack, job: str, step: int, *, corruption: str | None = None) -> str:
    """What the job's save does: the checkpoint on the team's volume, then its report on the claim (as rank 0)."""
    checkpoint_faults.save_checkpoint(volume(stack) / job, step, corruption=corruption)
    stamp = trainer.rfc3339(time.time())
    stack.kubectl("annotate", "pvc", "checkpoints", "-n", NS, f"checkpoint.gpucluster.io/{job}={stamp}", "--overwrite")
    return stamp


def verifier_record(stack: LocalStack, job: str) -> dict[str, Any] | None:
    annotations = stack.get("pvc", "-n", NS, "checkpoints")["metadata"].get("annotations") or {}
    text = annotations.get(f"{VERIFIED_ANNOTATION_PREFIX}{job}")
    return json.loads(text) if text else None


def checked(stack: LocalStack, job: str, reported: str, timeout: float = 120) -> dict[str, Any]:
    """The verifier's record once it holds the check of the report ``reported``."""
    found: dict[str, Any] = wait_for(
        f"{job}'s checkpoint reported at {reported} checked by the verifier",
        lambda: r if (r := verifier_record(stack, job)) is not None and r["last"]["reported"] == reported else None,
        timeout=timeout,
        interval=1.0,
    )
    return found


@pytest.fixture
def clean(local_stack: LocalStack) -> Iterator[LocalStack]:
    accounting = controllers.controller("interruptions")
    accounting.start()
    local_stack.kubectl(
        *("delete", "jobsets", "-n", NS, "-l", SELECTOR, "--ignore-not-found", "--wait=true", "--timeout=90s")
    )
    forget_checkpoints(local_stack)
    yield local_stack
    local_stack.kubectl(
        *("delete", "jobsets", "-n", NS, "-l", SELECTOR, "--ignore-not-found", "--wait=true", "--timeout=90s")
    )
    for node in stack_nodes(local_stack):
        if node["metadata"]["labels"].get("gpucluster.io/quarantined"):
            faults.release(node["metadata"]["name"])
    accounting.start()


def stack_nodes(stack: LocalStack) -> list[dict[str, Any]]:
    return stack.items("nodes", "-l", "gpucluster.io/flavor")


def test_a_gang_held_to_one_leaf_runs_on_the_nodes_kueue_assigned_and_exactly_those_are_reserved(
    clean: LocalStack, tmp_path: Path
) -> None:
    """The local stack's flavor is placed by its topology (2 leaves of 2 nodes): a 2-node gang required on one leaf
    gets Kueue's assignment of 2 nodes of one leaf, make-before-break reserves exactly those (moving the serving
    replicas off them), and the pods run there, pinned by Kueue's ungater."""
    stack = clean
    doc = yaml.safe_load(spec_file(tmp_path, "tas-leaf", nodes=2).read_text())
    doc["topology"] = {"required": "leaf"}
    spec = tmp_path / "tas-leaf.yaml"
    spec.write_text(yaml.safe_dump(doc))
    t0 = time.monotonic()
    submit(stack, spec)
    pods = running(stack, "tas-leaf", 0, 2, timeout=240)
    took = time.monotonic() - t0
    w = workload(stack, "tas-leaf")
    (assignment,) = w["status"]["admission"]["podSetAssignments"]
    assigned = pods_per_node(assignment["topologyAssignment"])
    labels = {n["metadata"]["name"]: n["metadata"]["labels"] for n in stack_nodes(stack)}
    assert sum(assigned.values()) == 2
    assert len({labels[n][IB_LEAF_LABEL] for n in assigned}) == 1, assigned
    assert {p["spec"]["nodeName"] for p in pods} == set(assigned)
    for p in pods:
        assert p["spec"]["nodeSelector"][HOSTNAME_LABEL] == p["spec"]["nodeName"]
        assert p["metadata"]["annotations"][PODSET_REQUIRED_TOPOLOGY] == IB_LEAF_LABEL
    uid = w["metadata"]["uid"]
    reserved = {name for name, lb in labels.items() if lb.get(CFG.controller(MAKE_BEFORE_BREAK).reservation_key) == uid}
    assert reserved == set(assigned)
    print(f"\n2-node gang on leaf {labels[next(iter(assigned))][IB_LEAF_LABEL]} ({sorted(assigned)}) in {took:.0f}s")


def test_a_program_fault_restarts_the_gang_in_place_keeping_its_quota_and_a_node_fault_moves_it(
    clean: LocalStack, tmp_path: Path
) -> None:
    stack = clean
    out = submit(stack, spec_file(tmp_path, "crash-in-place"))
    assert f"kubectl get jobset -n {NS} crash-in-place" in out
    t0 = time.monotonic()
    first = running(stack, "crash-in-place", 0, 1, timeout=150)
    print(f"submitted -> gang Running: {time.monotonic() - t0:.1f} s")
    js = jobset(stack, "crash-in-place")
    # The package's wiring reached the pods: the claims, the account that may report checkpoints, the interval.
    spec = first[0]["spec"]
    assert {v["persistentVolumeClaim"]["claimName"] for v in spec["volumes"] if "persistentVolumeClaim" in v} == {
        "checkpoints",
        "datasets",
    }
    assert spec["serviceAccountName"] == "gpucluster-trainer"
    env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    assert (
        env["GPUCLUSTER_CHECKPOINT_INTERVAL_SECONDS"]
        == js["metadata"]["annotations"]["gpucluster.io/checkpoint-interval-seconds"]
    )
    w0 = workload(stack, "crash-in-place")
    node0 = first[0]["spec"]["nodeName"]

    # The program's fault: the whole gang restarts in place, the Workload stays admitted, nothing queues again.
    t0 = time.monotonic()
    fail_program(stack, first[0])
    again = running(stack, "crash-in-place", 1, 1)
    print(f"program fault -> gang Running again: {time.monotonic() - t0:.1f} s")
    status = jobset(stack, "crash-in-place")["status"]
    assert (status["restarts"], status.get("restartsCountTowardsMax", 0)) == (1, 1)
    w1 = workload(stack, "crash-in-place")
    assert w1["metadata"]["uid"] == w0["metadata"]["uid"]
    assert condition(w1, "Admitted") == "True"
    assert not (w1["status"].get("schedulingStats") or {}).get("evictions")
    assert again[0]["spec"]["nodeName"] == node0  # on the machine it had

    # The node's fault: its node is quarantined, the gang restarts elsewhere, and it does not count.
    t0 = time.monotonic()
    faults.quarantine(node0)
    moved = running(stack, "crash-in-place", 2, 1)
    print(f"node quarantined -> gang Running on another node: {time.monotonic() - t0:.1f} s")
    assert moved[0]["spec"]["nodeName"] != node0
    status = jobset(stack, "crash-in-place")["status"]
    assert (status["restarts"], status.get("restartsCountTowardsMax", 0)) == (2, 1)
    assert workload(stack, "crash-in-place")["metadata"]["uid"] == w0["metadata"]["uid"]

    # The accounting saw both, with their causes.
    def ledger() -> list[dict[str, Any]] | None:
        text = jobset(stack, "crash-in-place")["metadata"].get("annotations", {}).get("gpucluster.io/interruptions")
        if not text:
            return None
        items = json.loads(text).get("items") or []
        return items if len(items) >= 2 else None

    items = wait_for("the interruption ledger holds both", ledger, timeout=30)
    assert [i["cause"] for i in items][:2] == ["program", "node"], json.dumps(items, indent=1)


def test_a_crash_loop_stops_at_the_restart_bound_with_an_event_that_says_why(clean: LocalStack, tmp_path: Path) -> None:
    stack = clean
    submit(stack, spec_file(tmp_path, "crash-loop", per_hour=2))
    for attempt in range(3):
        pods = running(stack, "crash-loop", attempt, 1, timeout=150)
        fail_program(stack, pods[0])
    (event,) = wait_for("RestartBoundReached", lambda: events(stack, "crash-loop", "RestartBoundReached"), timeout=60)
    print(f"bound event: {event['message']}")
    assert event["type"] == "Warning"
    assert "3 restarts in the last hour" in event["message"]
    assert "--type merge" in event["message"]
    wait_for(
        "the Workload deactivated", lambda: workload(stack, "crash-loop")["spec"].get("active") is False, timeout=30
    )
    # Kueue stops it: its pods go and its quota is free.
    wait_for(
        "the gang gone", lambda: not stack.items("pods", "-n", NS, "-l", "jobset.sigs.k8s.io/jobset-name=crash-loop")
    )


def test_kill_9_of_the_accounting_loses_no_interruption(clean: LocalStack, tmp_path: Path) -> None:
    stack = clean
    submit(stack, spec_file(tmp_path, "crash-kill", per_hour=20))
    pods = running(stack, "crash-kill", 0, 1, timeout=150)
    accounting = controllers.controller("interruptions")
    assert accounting.kill(), "no replica of the accounting to kill"  # SIGKILL: nothing is flushed
    accounting.stop()  # and it stays down while the gang restarts twice
    fail_program(stack, pods[0])
    pods = running(stack, "crash-kill", 1, 1)
    fail_program(stack, pods[0])
    running(stack, "crash-kill", 2, 1)
    accounting.start()

    def recorded() -> list[dict[str, Any]] | None:
        text = jobset(stack, "crash-kill")["metadata"].get("annotations", {}).get("gpucluster.io/interruptions")
        items = (json.loads(text).get("items") or []) if text else []
        return items if len(items) == 2 else None

    items = wait_for("both restarts that happened while it was down", recorded, timeout=60)
    assert [i["cause"] for i in items] == ["program", "program"]


def test_the_checkpoint_report_bounds_the_work_lost_and_measured_reliability_sets_the_next_interval(
    clean: LocalStack, tmp_path: Path
) -> None:
    """Each attempt saves a real checkpoint and reports it; once the verifier has passed it, the program crashes a
    few seconds later: that is the work each crash loses, no more."""
    stack = clean
    submit(stack, spec_file(tmp_path, "crash-report", per_hour=20))
    expected = []
    for attempt in range(3):
        pods = running(stack, "crash-report", attempt, 1, timeout=150)
        reported = report(stack, "crash-report", 100 * (attempt + 1))
        assert checked(stack, "crash-report", reported)["last"]["ok"]
        time.sleep(2.0)
        expected.append(time.time() - unix_seconds(reported))
        fail_program(stack, pods[0])
    running(stack, "crash-report", 3, 1)

    def ledger() -> list[dict[str, Any]] | None:
        text = jobset(stack, "crash-report")["metadata"].get("annotations", {}).get("gpucluster.io/interruptions")
        items = (json.loads(text).get("items") or []) if text else []
        return items if len(items) == 3 else None

    items = wait_for("three interruptions on the books", ledger, timeout=60)
    lost = [i["workLost"] for i in items]
    print(f"work lost per interruption: {lost}; since each verified report: {[round(e, 1) for e in expected]}")
    assert all(abs(w - e) <= 3.0 for w, e in zip(lost, expected, strict=True)), (lost, expected)

    def measured() -> dict[str, str] | None:
        cm = stack.get("configmap", "-n", CFG.training.reliability_namespace, "gpucluster-training-reliability")
        data: dict[str, str] = cm.get("data") or {}
        return (
            data if int(data.get("interruptions", "0")) >= 3 and float(data.get("nodeMtbiSeconds", "0")) > 0 else None
        )

    data = wait_for("the reliability ConfigMap with three interruptions", measured, timeout=60)
    out = submit(stack, spec_file(tmp_path, "crash-next"))
    print(f"reliability {data}; next submission: {out.splitlines()[1]}")
    assert "source measured" in out


def test_a_checkpoint_counts_once_the_verifier_read_it_and_a_corrupt_one_never_does(
    clean: LocalStack, tmp_path: Path
) -> None:
    """The verifier runs as the stack's Deployment; each report becomes a check Job of the team's queue whose pod runs
    on the real node, mounts the team's volume read-only and reads the checkpoint the job saved there. A good one
    counts; a truncated shard is refused (the record keeps the good one, a Warning Event on the claim, the alert
    fires), and a crash then loses the work since the good one, not since the refused report."""
    stack = clean
    ns = CFG.controller(CHECKPOINT_VERIFIER).namespace
    stack.kubectl("rollout", "status", "-n", ns, "deployment/gpucluster-checkpoint-verifier", "--timeout=120s")
    submit(stack, spec_file(tmp_path, "verified", per_hour=20))
    (pod,) = running(stack, "verified", 0, 1)
    good = report(stack, "verified", 100)
    first = checked(stack, "verified", good)
    assert first["last"]["ok"], first
    assert (first["verified"]["step"], first["verified"]["reported"]) == (100, good)
    checks = stack.items("pods", "-n", NS, "-l", f"{CHECK_OF_LABEL}=verified,!{KIND_LABEL}")
    assert {p["spec"]["nodeName"] for p in checks} == {REAL_NODE}
    assert all(v["persistentVolumeClaim"]["readOnly"] for p in checks for v in p["spec"]["volumes"])
    (check_job,) = stack.items("jobs", "-n", NS, "-l", f"{CHECK_OF_LABEL}=verified,!{KIND_LABEL}")  # not its drill
    # queued apart from the GPU queues, in the team namespace's LocalQueue of CPU-only work, and admitted there
    cpu_queue = CFG.kueue.cpu_queue.name
    assert check_job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == cpu_queue
    (workload,) = [
        w
        for w in stack.items("workloads.kueue.x-k8s.io", "-n", NS)
        if any(o.get("uid") == check_job["metadata"]["uid"] for o in w["metadata"].get("ownerReferences") or [])
    ]
    assert workload["status"]["admission"]["clusterQueue"] == cpu_queue
    assert events(stack, "checkpoints", "CheckpointVerified")
    # its first verified checkpoint is drilled at once: read whole by a drill pod on the real node
    drill = wait_for(
        "the verified checkpoint drilled",
        lambda: (r or {}).get("drill") if (r := verifier_record(stack, "verified")) else None,
        timeout=120,
        interval=1.0,
    )
    assert (drill["ok"], drill["step"], drill["problems"]) == (True, 100, []), drill
    assert drill["bytes"] > 10_000
    assert events(stack, "checkpoints", "CheckpointRestoreDrilled")

    bad = report(stack, "verified", 200, corruption="truncated shard")
    second = checked(stack, "verified", bad)
    assert not second["last"]["ok"], second
    assert "truncated-shard" in second["last"]["problems"]
    assert second["verified"]["step"] == 100  # a restart resumes from the good one
    (rejected,) = [e for e in events(stack, "checkpoints", "CheckpointRejected") if "verified:" in e["message"]]
    assert "resumes from step 100" in rejected["message"]
    firing = 'ALERTS{alertname="CheckpointVerificationFailed",alertstate="firing",job="verified"}'
    wait_for("CheckpointVerificationFailed firing", lambda: prometheus_values(firing) or None, timeout=60)
    # what a restart is told (its pods' GPUCLUSTER_RESUME_FILE): the good one, never the refused one
    entry = json.loads(stack.get("configmap", "-n", NS, RESUME_CONFIGMAP)["data"]["verified.json"])
    assert (entry["step"], entry["directory"]) == (100, "/checkpoints/verified/step-100"), entry

    crashed = time.time()
    fail_program(stack, pod)
    running(stack, "verified", 1, 1)
    item = wait_for("the crash on the books", lambda: _ledger_items(stack, "verified") or None, timeout=60)[0]
    since_good, since_bad = crashed - unix_seconds(good), crashed - unix_seconds(bad)
    print(
        f"\nwork lost {item['workLost']:.1f}s: since the verified report {since_good:.1f}s, "
        f"since the refused one {since_bad:.1f}s"
    )
    assert abs(item["workLost"] - since_good) <= 3.0, (item, since_good, since_bad)


def test_a_hung_gang_is_restarted_in_place_by_the_stall_detector_and_counted_as_a_hang(
    clean: LocalStack, tmp_path: Path
) -> None:
    """The silent failure end to end: the fake trainer's load reaches the GPUs its pods hold (the fake dcgm-exporter's
    pod mapping) and its nodes' fabric counters; a hang keeps every pod Running, the GPUs busy with idle tensor cores
    and the fabric quiet; the stall detector restarts the gang in place after the stack's stallAfter, says why on the
    JobSet, and the interruption accounting counts a hang."""
    dcgm = load_sim_module("fake_dcgm")
    processes.registry()["fake-dcgm"].start()  # (re)started if it runs older code
    stack = clean
    # The stall detector runs as the pods of the stack's own Deployment, on the simulated cluster's real node.
    ns = CFG.controller(STALL_DETECTOR).namespace
    stack.kubectl("rollout", "status", "-n", ns, "deployment/gpucluster-stall-detector", "--timeout=120s")
    nodes = {
        p["spec"]["nodeName"]
        for p in stack.items("pods", "-n", ns, "-l", "app.kubernetes.io/name=gpucluster-stall-detector")
    }
    assert nodes == {REAL_NODE}
    submit(stack, spec_file(tmp_path, "hangs", stall_after=None))
    (pod,) = running(stack, "hangs", 0, 1)
    play = trainer.FakeTrainer(
        load_kube_config(stack),
        NS,
        time.time,
        load=lambda pods: dcgm.admin("/admin/load", {"pods": pods}),
        progress_every=2.0,
    )
    job = f'gpucluster_io_training_job="hangs",namespace="{NS}"'

    def gpus_at(tensor: float) -> list[float] | None:
        """The tensor activity of the job's 8 GPUs once every one reads ``tensor`` (a step of the trainer first)."""
        play.step()
        values = [float(v) for v in prometheus_values(f"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{{{job}}}")]
        return values if len(values) == 8 and all(v == tensor for v in values) else None

    node = pod["spec"]["nodeName"]
    fabric = f'sum(rate(gpucluster_fabric_infiniband_port_transmit_data_bytes_total{{node="{node}"}}[10s]))'
    try:
        busy = wait_for("the gang's 8 GPUs computing", lambda: gpus_at(trainer.COMPUTING_LOAD[1]), timeout=30)
        traffic = wait_for("its node's traffic", lambda: _above(fabric, 1e9, play), timeout=30)
        (progress,) = play.jobs.values()
        progress.hang()
        hung_at = time.time()
        work = progress.saved + progress.since_save
        hung = wait_for("the hang on the GPUs", lambda: gpus_at(trainer.HUNG_LOAD[1]), timeout=30)
        util = [float(u) for u in prometheus_values(f"DCGM_FI_DEV_GPU_UTIL{{{job}}}")]
        assert util == [trainer.HUNG_LOAD[0]] * 8
        assert [p["metadata"]["name"] for p in gang(stack, "hangs", 0)] == [pod["metadata"]["name"]]  # still Running
        assert progress.saved + progress.since_save == work  # no step since the hang

        def restarted() -> list[dict[str, Any]] | None:
            play.step()
            pods = gang(stack, "hangs", 1)
            return pods or None

        wait_for(
            "the gang running again, restarted in place",
            restarted,
            timeout=CFG.controller(STALL_DETECTOR).stall_after_seconds + 90,
        )
        back = time.time() - hung_at
    finally:
        dcgm.admin("/admin/reset")
    js = jobset(stack, "hangs")
    record = json.loads(js["metadata"]["annotations"]["gpucluster.io/stall-restart"])
    assert record["attempt"] == 0
    assert "below tensor activity" in record["evidence"]
    # one Event about this JobSet (an earlier run's of the same name may still be kept)
    (event,) = [e for e in events(stack, "hangs", "GangStalled") if e["involvedObject"]["uid"] == js["metadata"]["uid"]]
    assert event["message"].startswith("restarting attempt 0 in place")
    ledger = wait_for(
        "the interruption counted as a hang",
        lambda: _hang_in_ledger(stack, "hangs"),
        timeout=30,
    )
    print(
        f"\ncomputing: tensor {busy[0]}, node traffic {traffic / 1e9:.1f} GB/s; hung: tensor {hung[0]}, "
        f"utilisation {util[0]}; running again {back:.0f}s after the hang (stallAfter "
        f"{CFG.controller(STALL_DETECTOR).stall_after}); ledger {ledger}"
    )
    assert (
        back < CFG.controller(STALL_DETECTOR).stall_after_seconds + 60 + 30
    )  # stallAfter + 60 s, and the sim's scrape lag


def test_one_team_idling_a_rank_cannot_get_a_node_named_a_repeat_offender(local_stack: LocalStack) -> None:
    """The review's class: a researcher idles one rank across restarts, so the stall detector names a node a
    straggler at each attempt. Three such namings of one team, written straight into the detector's memory, do not
    make the node a repeat offender (quarantine reads it); three of three teams on another node do (the control: the
    detector read that memory). Put back long before the quarantine alert's 15 minutes could pass."""
    settings = CFG.controller(STALL_DETECTOR)
    prefix = STALL_DETECTOR.metrics_prefix
    victim = stack_nodes(local_stack)[0]["metadata"]["name"]
    control = "gpu-repeat-control"  # no such Node: nothing can act on it
    now = time.time()
    one_team = [[now - 300 + i, f"{NS}/idler#{i}", ["straggler"]] for i in range(settings.repeat_count)]
    teams = [[now - 300 + i, f"team-{i}/llm#1", ["straggler"]] for i in range(settings.repeat_count)]
    name = "gpucluster-stall-suspects"
    before = local_stack.run("kubectl", "get", "configmap", name, "-n", settings.namespace, "-o", "json", check=False)
    memory = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": settings.namespace},
        "data": {"named.json": json.dumps({victim: one_team, control: teams})},
    }
    offender = f'{prefix}_repeat_offender{{node="{control}"}}'
    local_stack.apply(memory)
    try:
        wait_for("the control node named a repeat offender", lambda: prometheus_values(offender), timeout=90)
        assert prometheus_values(f'{prefix}_repeat_offender{{node="{victim}"}}') == []
    finally:
        local_stack.kubectl("delete", "configmap", name, "-n", settings.namespace, "--ignore-not-found")
        if before.returncode == 0:
            kept = json.loads(before.stdout)
            local_stack.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace":
                               settings.namespace}, "data": kept.get("data", {})})  # fmt: skip
    wait_for("the control node forgotten", lambda: not prometheus_values(offender), timeout=90)


def _above(query: str, floor: float, play: Any) -> float | None:
    play.step()
    values = [float(v) for v in prometheus_values(query)]
    return values[0] if values and values[0] > floor else None


def _ledger_items(stack: LocalStack, name: str) -> list[dict[str, Any]]:
    text = jobset(stack, name)["metadata"].get("annotations", {}).get("gpucluster.io/interruptions")
    items: list[dict[str, Any]] = (json.loads(text).get("items") or []) if text else []
    return items


def _hang_in_ledger(stack: LocalStack, name: str) -> dict[str, Any] | None:
    text = jobset(stack, name)["metadata"].get("annotations", {}).get("gpucluster.io/interruptions")
    record = json.loads(text) if text else {}
    items = [i for i in record.get("items", []) if i.get("cause") == "hang"]
    return items[0] if items else None


def prometheus_values(query: str) -> list[str]:
    import urllib.parse  # noqa: PLC0415
    import urllib.request  # noqa: PLC0415

    url = "http://127.0.0.1:9090/api/v1/query?" + urllib.parse.urlencode({"query": query})
    with urllib.request.urlopen(url, timeout=5) as reply:
        return [r["value"][1] for r in json.loads(reply.read())["data"]["result"]]
