"""The quarantine controller on the simulated cluster: the fake dcgm-exporter, Prometheus evaluating the rules the
stack deployed, the two controllers ``make up`` runs, and the kube-controller-manager's taint eviction.

A GPU held above the limit: the alert fires, the node is quarantined, the training pod on it leaves, the inference
replicas on a quarantined node stay Ready; the quota follows; a hot node beyond the breaker's share is left
untouched. Prometheus down quarantines nothing, a killed leader is replaced, a quarantined node deleted stays
listed. Timings are printed, never asserted beyond generous bounds.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from components.config import load_stack_file
from contract.constants import QUARANTINED_LABEL, RELEASED_AT_ANNOTATION
from contract.quarantine_settings import LEDGER_NAME
from contract.registry import QUARANTINE
from tests.support.local_stack import ROOT, LocalStack, gpu_job, wait_for
from tests.support.sim import load_sim_module

pytestmark = pytest.mark.integration

CFG = load_stack_file(ROOT / "stacks" / "Pulumi.local.yaml")
Q = CFG.controller(QUARANTINE)
TEAM = CFG.teams[0]
SERVICE = CFG.inference_services[0]
FLAVOR = CFG.flavors[0]
NODES = [f"{FLAVOR.name}-node-{i}" for i in range(FLAVOR.node_count)]
JOB = "quarantine-probe"
dcgm = load_sim_module("fake_dcgm")
faults = load_sim_module("node_faults")
processes = load_sim_module("processes")
controllers = load_sim_module("controllers")
PROMETHEUS = f"http://127.0.0.1:{processes.PROMETHEUS_PORT}"


def firing(node: str) -> bool:
    return bool(faults.quarantine_alert_firing(node, PROMETHEUS))


def replacement_alert(node: str) -> dict[str, Any] | None:
    """The firing GpuNodeQuarantined alert of the node, as Prometheus renders it (labels and annotations)."""
    with urllib.request.urlopen(f"{PROMETHEUS}/api/v1/alerts", timeout=5) as reply:
        alerts = json.loads(reply.read())["data"]["alerts"]
    return next(
        (
            a
            for a in alerts
            if a["labels"].get("alertname") == "GpuNodeQuarantined"
            and a["labels"].get("node") == node
            and a["state"] == "firing"
        ),
        None,
    )


def quarantined(stack: LocalStack, node: str) -> bool:
    return bool(faults.quarantined(node))


def pods_on(stack: LocalStack, namespace: str, node: str, selector: str) -> list[dict[str, Any]]:
    return [
        p
        for p in stack.items("pods", "-n", namespace, "-l", selector, "--field-selector", f"spec.nodeName={node}")
        if not p["metadata"].get("deletionTimestamp")
    ]


def clean(stack: LocalStack) -> None:
    """Every GPU at rest, no alert firing, every node out of quarantine with no grace, the ledger emptied."""
    dcgm.admin("/admin/reset")
    faults.forget_alerts(PROMETHEUS)  # a sample left from before a Prometheus restart would count for 150 s
    present = {n["metadata"]["name"] for n in stack.items("nodes")}
    for node in NODES:
        if node not in present:
            faults.recreate(node)
    # within a few evaluations
    wait_for("no quarantine signal", lambda: not any(firing(n) for n in NODES), timeout=200, interval=1)
    for node in NODES:
        faults.release(node)
        stack.kubectl("annotate", "node", node, f"{RELEASED_AT_ANNOTATION}-")
    stack.kubectl("delete", "configmap", LEDGER_NAME, "-n", Q.namespace, "--ignore-not-found")
    stack.kubectl("delete", "job", JOB, "-n", TEAM.namespace, "--ignore-not-found", "--wait=true")


@pytest.fixture
def cool(local_stack: LocalStack) -> Iterator[LocalStack]:
    if not processes.registry()["fake-dcgm"].running():
        processes.registry()["fake-dcgm"].start()
    controllers.controller("quarantine").start()
    clean(local_stack)
    yield local_stack
    clean(local_stack)


def test_a_hot_gpu_takes_training_off_its_node_and_inference_stays(cool: LocalStack) -> None:
    stack = cool
    stack.apply(gpu_job(JOB, TEAM.namespace, parallelism=1, gpus=FLAVOR.gpus_per_node, run_for="30m"))

    def training_node() -> str | None:
        pods = stack.items("pods", "-n", TEAM.namespace, "-l", f"job-name={JOB}")
        running = [p for p in pods if p["status"].get("phase") == "Running"]
        return running[0]["spec"]["nodeName"] if running else None

    hot_training = wait_for("the training pod Running", training_node, timeout=180, interval=1)
    selector = f"app.kubernetes.io/name={SERVICE.name}"
    serving = [n for n in NODES if n != hot_training and pods_on(stack, SERVICE.namespace, n, selector)]
    assert serving, "no inference replica outside the training node to heat"
    hot_serving = serving[0]
    replicas_before = {p["metadata"]["name"] for p in pods_on(stack, SERVICE.namespace, hot_serving, selector)}

    for node in (hot_training, hot_serving):
        dcgm.admin("/admin/gpu", {"node": node, "gpu": 0, "temperature": 85})
    # the breaker: two of four is the local stack's share per window; a third hot node will be left untouched. It is
    # heated 20 s after the first two (ten of the controller's cycles), so its alert fires once they are quarantined
    # and its `for` runs while they are checked.
    allowed = max(1, int(Q.max_share * FLAVOR.node_count))
    assert allowed == 2
    third = next(n for n in NODES if n not in (hot_training, hot_serving))
    time.sleep(20)
    dcgm.admin("/admin/gpu", {"node": third, "gpu": 1, "temperature": 90})
    assert not firing(third)
    wait_for("the alert firing", lambda: firing(hot_training), timeout=CFG.telemetry.alerts.for_minutes * 60 + 60)
    fired = time.monotonic()
    wait_for("the node quarantined", lambda: quarantined(stack, hot_training), timeout=60, interval=0.5)
    tainted = time.monotonic() - fired
    wait_for("the training pod off the node", lambda: training_node() != hot_training, timeout=120, interval=0.5)
    off = time.monotonic() - fired
    wait_for("the serving node quarantined", lambda: quarantined(stack, hot_serving), timeout=60, interval=0.5)
    time.sleep(10)  # the taint eviction acts at once on what does not tolerate it: give it time to be wrong
    after = pods_on(stack, SERVICE.namespace, hot_serving, selector)
    ready = [
        p
        for p in after
        if any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])
    ]
    print(
        f"\nalert firing -> quarantine taint {tainted:.1f}s, -> training pod off the node {off:.1f}s; "
        f"{len(ready)} inference replicas still Ready on quarantined {hot_serving}"
    )
    assert {p["metadata"]["name"] for p in ready} == replicas_before, "inference left a quarantined node"
    node = stack.get("node", hot_training)
    assert node["metadata"]["labels"].get(QUARANTINED_LABEL) == "true"
    ledger = stack.get("configmap", LEDGER_NAME, "-n", Q.namespace)["data"]
    assert json.loads(ledger[hot_training])["reason"] == "gpu-temperature"
    # the ledger reaches someone: the replacement alert fires, naming the node's GPUs by serial
    serials = {g["serial"] for g in dcgm.admin("/admin/state") if g["node"] == hot_training}
    request = wait_for("the replacement alert", lambda: replacement_alert(hot_training), timeout=30, interval=1)
    assert request["labels"]["reason"] == "gpu-temperature"
    assert len(serials) == FLAVOR.gpus_per_node
    assert all(serial in request["annotations"]["description"] for serial in serials)
    # the quota follows: two of four nodes out
    queue = next(iter(CFG.queues))
    want = CFG.queues[queue].quota[FLAVOR.name] // 2
    wait_for("the quota following", lambda: _nominal(stack, queue) == want, timeout=30, interval=0.5)

    wait_for("the third alert firing", lambda: firing(third), timeout=CFG.telemetry.alerts.for_minutes * 60 + 60)
    time.sleep(3 * Q.interval_seconds)  # more cycles: the breaker must hold, not just be late
    assert not quarantined(stack, third), f"the breaker let a third node through (share {Q.max_share})"

    def refused() -> bool:
        return any(
            e["reason"] == "QuarantineBreakerOpen" and e["involvedObject"].get("name") == third
            for e in stack.items("events", "-n", "default")
        )

    wait_for("the QuarantineBreakerOpen Event on the refused node", refused, timeout=30)
    print(f"breaker: {hot_training} and {hot_serving} quarantined, {third} left untouched")


def _nominal(stack: LocalStack, queue: str) -> int:
    groups = stack.get("clusterqueue", queue)["spec"]["resourceGroups"]
    return int(groups[0]["flavors"][0]["resources"][0]["nominalQuota"])


def test_prometheus_down_quarantines_nothing_a_killed_leader_is_replaced_and_a_deleted_node_stays_listed(
    cool: LocalStack,
) -> None:
    stack = cool
    registry = processes.registry()
    node = NODES[-1]
    quarantine = controllers.controller("quarantine")
    quarantine.stop()  # so nothing acts between the alert firing and Prometheus going down
    try:
        dcgm.admin("/admin/gpu", {"node": node, "gpu": 2, "temperature": 88})
        wait_for("the alert firing", lambda: firing(node), timeout=CFG.telemetry.alerts.for_minutes * 60 + 60)
        registry["prometheus"].stop()
        quarantine.start()
        time.sleep(Q.lease_duration_seconds + 3 * Q.interval_seconds)
        assert not quarantined(stack, node), "quarantined with Prometheus down"
    finally:
        registry["prometheus"].start()
        quarantine.start()
    t0 = time.monotonic()
    wait_for("the node quarantined once Prometheus answers", lambda: quarantined(stack, node), timeout=120, interval=1)
    print(f"\nPrometheus back: {node} quarantined {time.monotonic() - t0:.1f}s later")
    # the leader SIGKILLed right after its patch: the standby takes over and the ledger still lists the node
    leader = quarantine.leader(Q.lease_name)
    assert quarantine.kill(leader), f"no replica {leader} to kill"
    try:
        wait_for(
            "the ledger listing the node",
            lambda: node in (stack.get("configmap", LEDGER_NAME, "-n", Q.namespace).get("data") or {}),
            timeout=Q.lease_duration_seconds + 30,
        )
    finally:
        quarantine.start()
    # quarantined, then deleted: the ledger keeps it as the replacement request, the quota leaves it out
    faults.delete(node)
    ledger = wait_for(
        "the ledger marking the node deleted",
        lambda: json.loads(stack.get("configmap", LEDGER_NAME, "-n", Q.namespace)["data"].get(node, "{}")).get(
            "deleted"
        ),
        timeout=60,
    )
    assert ledger
    queue = next(iter(CFG.queues))
    want = CFG.queues[queue].quota[FLAVOR.name] * (FLAVOR.node_count - 1) // FLAVOR.node_count
    wait_for("the quota without the deleted node", lambda: _nominal(stack, queue) == want, timeout=30, interval=0.5)
    faults.recreate(node)
