"""Quota that follows healthy capacity against static quota, side by side in one run on the simulated cluster.

Runs ``make up`` (idempotent), then each scenario twice: with the quota and quarantine controllers running
(following), and with them stopped and every ClusterQueue put back to the stack's numbers (static: Kueue and the
alerts alone, as before the controllers). Rows:

- a node lost (NotReady, then deleted) and a node quarantined: seconds from the fault until every ClusterQueue's
  quota is right (the goal is 5 s; static: never, the numbers stay);
- a GPU held above the stack's limit (78 °C) in the fake dcgm-exporter under a training pod, and one under inference
  replicas: seconds from the alert firing to the training pod off its node (static: the alert fires and nothing
  acts), and the inference replicas still Ready on the quarantined node;
- a burst of hot nodes one beyond the breaker's share: how many are quarantined and how many left untouched;
- a gang sized to the whole cluster submitted after the loss: static admits it (after make-before-break's maxHold),
  its pods that fit run, the one that cannot waits, and ``waitForPodsReady`` evicts the gang; following holds it (no
  quota reserved), and admits it once the node is back. The GPU-seconds wasted: GPUs held by pods of a gang that
  was then evicted, until the eviction.

Nothing is asserted: these are measurements. ``--quick`` skips the gang rows (minutes of waiting for
``waitForPodsReady``). The figures are written to ``.state/bench-capacity/figures.json`` too.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contract.registry import MAKE_BEFORE_BREAK, QUARANTINE

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.sim_cluster import make_up  # noqa: E402 (run as a script: the repository first on the path)
from contract.constants import CLUSTER_EVENTS_NAMESPACE, RELEASED_AT_ANNOTATION  # noqa: E402
from contract.model import parse_duration  # noqa: E402 (run as a script: the repository first on the path)
from contract.quarantine_settings import LEDGER_NAME  # noqa: E402
from contract.quota_controller_settings import resource_groups  # noqa: E402
from daemons.quarantine.controller import REASON_BREAKER  # noqa: E402
from daemons.quota_controller.apportion import apportion  # noqa: E402
from daemons.quota_controller.decide import live_quotas  # noqa: E402
from daemons.quota_controller.translate import queue_view  # noqa: E402
from sim import controllers as sim_controllers  # noqa: E402
from sim import fake_dcgm, flip, node_faults  # noqa: E402
from sim import processes as sim_daemons  # noqa: E402

#: How long the static column waits for a quota that never changes before saying so.
STATIC_WAIT_S = 20.0
#: How long the following column shows the gang held before the node comes back.
HOLD_SHOWN_S = 60.0


@dataclass
class Column:
    name: str
    rows: dict[str, str] = field(default_factory=dict)
    figures: dict[str, float | None] = field(default_factory=dict)


def quotas() -> dict[str, int]:
    """ClusterQueue -> its nominalQuota of the stack's first flavor."""
    cfg = sim_daemons.stack_config()
    flavor = cfg.flavors[0].name
    out = {}
    for name in cfg.queues:
        found = live_quotas(queue_view(sim_daemons.kubectl_json("get", "clusterqueue", name)))
        out[name] = found[flavor].nominal if found and flavor in found else -1
    return out


def expected(lost_gpus: int) -> dict[str, int]:
    cfg = sim_daemons.stack_config()
    flavor = cfg.flavors[0]
    shares = {q: spec.quota[flavor.name] for q, spec in cfg.queues.items() if flavor.name in spec.quota}
    return apportion(shares, flavor.capacity, flavor.capacity - lost_gpus)


def until(check: Callable[[], bool], timeout: float, interval: float = 0.25) -> float | None:
    """Seconds until ``check()`` holds; None when it did not within ``timeout``."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if check():
            return time.monotonic() - t0
        time.sleep(interval)
    return None


def controllers(on: bool) -> None:
    quota = sim_controllers.controller("quota-controller")
    if on:
        quota.start()
    else:
        quota.stop()


def static_quotas() -> None:
    """Every ClusterQueue back to the stack's numbers, as Pulumi created it (Kueue alone)."""
    cfg = sim_daemons.stack_config()
    flavors = [(f.name, f.gpu_resource) for f in cfg.flavors]
    for name, spec in cfg.queues.items():
        groups = resource_groups(flavors, spec.quota, spec.borrowing_limit)
        patch = json.dumps({"spec": {"resourceGroups": groups}})
        sim_daemons.kubectl("patch", "clusterqueue", name, "--type=merge", "-p", patch)


def seconds(value: float | None, static_text: str) -> str:
    return static_text if value is None else f"{value:.1f} s"


def node_rows(col: Column, node: str, per_node: int, following: bool) -> None:
    lost = expected(per_node)
    wait = 60.0 if following else STATIC_WAIT_S
    full = quotas()
    never = f"never (still {full}, {STATIC_WAIT_S:.0f} s on)"

    node_faults.not_ready(node)
    t = until(lambda: quotas() == lost, wait)
    node_faults.delete(node)
    col.figures["not_ready_s"] = t
    col.rows["node lost (NotReady, then deleted): quota right"] = seconds(t, never)
    node_faults.recreate(node)
    until(lambda: quotas() == full, 90.0)

    node_faults.quarantine(node)
    t = until(lambda: quotas() == lost, wait)
    col.figures["quarantined_s"] = t
    col.rows["node quarantined: quota right"] = seconds(t, never)
    node_faults.release(node)
    until(lambda: quotas() == full, 30.0)


def gang_pods() -> list[dict[str, Any]]:
    s = flip.setup_from_stack()
    items = sim_daemons.kubectl_json("get", "pods", "-n", s.training_ns, "-l", f"job-name={flip.TRAINING_JOB}")
    return list(items.get("items") or [])


def evicted() -> bool:
    s = flip.setup_from_stack()
    for w in sim_daemons.kubectl_json("get", "workloads.kueue.x-k8s.io", "-n", s.training_ns).get("items") or []:
        for c in w.get("status", {}).get("conditions") or []:
            if c.get("type") == "Evicted" and c.get("status") == "True":
                return True
    return False


def gang_state() -> str:
    s = flip.setup_from_stack()
    return flip.workload_state(
        sim_daemons.kubectl_json("get", "workloads.kueue.x-k8s.io", "-n", s.training_ns)["items"]
    )


def delete_gang() -> None:
    s = flip.setup_from_stack()
    sim_daemons.kubectl("delete", "job", flip.TRAINING_JOB, "-n", s.training_ns, "--ignore-not-found", "--wait=true")


def gang_rows(col: Column, node: str, per_node: int, following: bool, timeout: float) -> None:
    s = flip.setup_from_stack()
    delete_gang()
    node_faults.delete(node)
    if following:
        until(lambda: quotas() == expected(per_node), 30.0)
    sim_daemons.kubectl("apply", "-f", "-", input=json.dumps(flip.training_job(s, "30m", s.nodes)))
    t0 = time.monotonic()
    wasted = 0.0
    last = t0
    outcome = ""
    was_evicted = False
    admitted_at: float | None = None
    while time.monotonic() - t0 < timeout:
        now = time.monotonic()
        running = sum(1 for p in gang_pods() if p.get("status", {}).get("phase") == "Running")
        wasted += running * s.gpus_per_node * (now - last)
        last = now
        state = gang_state()
        if state == "admitted" and admitted_at is None:
            admitted_at = now - t0
        if evicted():
            outcome = f"admitted at {admitted_at or 0:.0f} s, evicted by waitForPodsReady at {now - t0:.0f} s"
            was_evicted = True
            break
        if following and now - t0 >= HOLD_SHOWN_S:
            outcome = f"held {now - t0:.0f} s with no quota reserved ({state or 'pending'})"
            break
        time.sleep(1.0)
    else:
        outcome = f"neither evicted nor held after {timeout:.0f} s (state {gang_state() or 'pending'})"
    col.rows["gang of the whole cluster after the loss"] = outcome
    col.rows["GPU-seconds wasted on it"] = f"{wasted:.0f}"
    col.figures["wasted_gpu_seconds"] = wasted
    node_faults.recreate(node)
    if was_evicted:
        col.rows["node back -> gang admitted"] = "(evicted; requeued with backoff)"
    else:  # held, or pending without a reservation: admitted once the node is back
        t = until(lambda: gang_state() == "admitted", 120.0, interval=0.5)
        col.rows["node back -> gang admitted"] = "not within 120 s" if t is None else f"{t:.1f} s"
        col.figures["admitted_after_return_s"] = t
    delete_gang()


QUARANTINE_JOB = "bench-quarantine-probe"


def quarantine_controllers(on: bool) -> None:
    quarantine = sim_controllers.controller("quarantine")
    if on:
        quarantine.start()
    else:
        quarantine.stop()


def cool_down(nodes: Sequence[str]) -> None:
    """Every GPU at rest, no alert firing, no node quarantined or in its release grace, the ledger emptied."""
    cfg = sim_daemons.stack_config()
    fake_dcgm.admin("/admin/reset")
    until(lambda: not any(node_faults.quarantine_alert_firing(n) for n in nodes), 90.0, interval=1.0)
    for n in nodes:
        node_faults.release(n)
        sim_daemons.kubectl("annotate", "node", n, f"{RELEASED_AT_ANNOTATION}-")
    sim_daemons.kubectl(
        "delete",
        "configmap",
        LEDGER_NAME,
        "-n",
        cfg.controller(QUARANTINE).namespace,
        "--ignore-not-found",
        "--wait=true",
    )
    s = flip.setup_from_stack()
    sim_daemons.kubectl("delete", "job", QUARANTINE_JOB, "-n", s.training_ns, "--ignore-not-found", "--wait=true")


def clean_slate(nodes: Sequence[str], following: bool) -> None:
    """:func:`cool_down` with the quarantine controllers stopped, so none writes the ledger while it is deleted, nor
    records a quarantine of an earlier row (node_rows') that its circuit breaker would count for ``breakerWindow``;
    then the controllers as the column runs them."""
    quarantine_controllers(False)
    node_faults.forget_alerts()
    cool_down(nodes)
    quarantine_controllers(following)


def why_not_quarantined(node: str, following: bool) -> str:
    """What kept a hot node from quarantine, as the controller says it (its breaker Event), or what it never saw."""
    if not following:
        return "not quarantined: the quarantine controllers are stopped"
    if not node_faults.quarantine_alert_firing(node):
        return "not quarantined: its alert is not firing"
    events = sim_daemons.kubectl_json(
        "get",
        "events",
        "-n",
        CLUSTER_EVENTS_NAMESPACE,
        "--field-selector",
        f"involvedObject.kind=Node,involvedObject.name={node},reason={REASON_BREAKER}",
    )
    messages = [str(e.get("message", "")) for e in events.get("items") or []]
    return f"not quarantined: {messages[-1]}" if messages else "not quarantined: the controller has not acted yet"


def _ready(pod: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in pod["status"].get("conditions") or [])


def quarantine_rows(col: Column, nodes: Sequence[str], following: bool) -> None:
    """A hot GPU under a training pod and one under inference replicas; then a burst of hot nodes."""
    cfg = sim_daemons.stack_config()
    s = flip.setup_from_stack()
    clean_slate(nodes, following)
    fire_timeout = cfg.telemetry.alerts.for_minutes * 60 + 60.0
    job = flip.training_job(s, "30m", 1)
    job["metadata"]["name"] = QUARANTINE_JOB
    sim_daemons.kubectl("apply", "-f", "-", input=json.dumps(job))

    def training_node() -> str | None:
        pods = sim_daemons.kubectl_json("get", "pods", "-n", s.training_ns, "-l", f"job-name={QUARANTINE_JOB}")
        running = [p for p in pods.get("items") or [] if p["status"].get("phase") == "Running"]
        return str(running[0]["spec"]["nodeName"]) if running else None

    if until(lambda: training_node() is not None, 180.0, interval=1.0) is None:
        col.rows["GPU above the limit: alert -> training pod off its node"] = "the probe job never ran"
        return
    hot = str(training_node())
    selector = f"app.kubernetes.io/name={s.service}"

    def serving_on(node: str) -> list[dict[str, Any]]:
        items = sim_daemons.kubectl_json(
            "get", "pods", "-n", s.inference_ns, "-l", selector, "--field-selector", f"spec.nodeName={node}"
        )
        return [p for p in items.get("items") or [] if not p["metadata"].get("deletionTimestamp")]

    serving = next((n for n in nodes if n != hot and serving_on(n)), None)
    for node in (hot, serving):
        if node is not None:
            fake_dcgm.admin("/admin/gpu", {"node": node, "gpu": 0, "temperature": 85})
    fired = until(lambda: node_faults.quarantine_alert_firing(hot), fire_timeout, interval=1.0)
    if fired is None:
        col.rows["GPU above the limit: alert -> training pod off its node"] = "the alert never fired"
        return
    wait = 120.0 if following else STATIC_WAIT_S
    off = until(lambda: training_node() != hot, wait, interval=0.5)
    col.figures["hot_gpu_training_off_s"] = off
    col.rows["GPU above the limit: alert -> training pod off its node"] = seconds(
        off, f"never: the alert fires, nothing acts ({STATIC_WAIT_S:.0f} s on)"
    )
    if serving is not None:
        before = serving_on(serving)
        until(lambda: node_faults.quarantined(serving), 30.0 if following else 1.0)
        time.sleep(10.0)
        after = [p for p in serving_on(serving) if _ready(p)]
        names = {p["metadata"]["name"] for p in before}
        kept = {p["metadata"]["name"] for p in after} & names
        state = "quarantined" if node_faults.quarantined(serving) else why_not_quarantined(serving, following)
        # A replica replaced by a rollout (make-before-break bringing a Deployment home) is not one evicted.
        replaced = len({p["metadata"]["name"] for p in after} - names)
        if replaced:
            state += f"; {replaced} Ready replica(s) from a rollout since"
        col.rows["inference replicas on a hot node, still Ready"] = f"{len(kept)} of {len(before)} ({state})"
    cool_down(nodes)

    allowed = max(1, int(cfg.controller(QUARANTINE).max_share * len(nodes)))
    burst = list(nodes[: allowed + 1])
    for node in burst:
        fake_dcgm.admin("/admin/gpu", {"node": node, "gpu": 1, "temperature": 90})
    until(lambda: all(node_faults.quarantine_alert_firing(n) for n in burst), fire_timeout, interval=1.0)
    until(lambda: sum(node_faults.quarantined(n) for n in burst) >= allowed, 30.0 if following else 5.0)
    time.sleep(3 * cfg.controller(QUARANTINE).interval_seconds)
    taken = [n for n in burst if node_faults.quarantined(n)]
    col.rows[f"{len(burst)} hot nodes at once (breaker: {allowed} of {len(nodes)} per window)"] = (
        f"{len(taken)} quarantined, {len(burst) - len(taken)} left untouched"
    )
    cool_down(nodes)


def run(quick: bool) -> list[Column]:
    cfg = sim_daemons.stack_config()
    flavor = cfg.flavors[0]
    node = f"{flavor.name}-node-{flavor.node_count - 1}"
    per_node = flavor.gpus_per_node
    # make-before-break's hold, Kueue's pods-ready timeout, and room for the eviction to be written
    hold = mbb.max_hold_seconds if (mbb := cfg.running(MAKE_BEFORE_BREAK)) else 0.0
    gang_timeout = hold + parse_duration(cfg.kueue.wait_for_pods_ready.timeout) + 60.0
    columns = []
    for following in (True, False):
        col = Column("following quotas" if following else "static quotas (Kueue alone)")
        controllers(following)
        quarantine_controllers(following)
        if not following:
            static_quotas()
        nodes = [f"{flavor.name}-node-{i}" for i in range(flavor.node_count)]
        try:
            node_rows(col, node, per_node, following)
            quarantine_rows(col, nodes, following)
            if not quick:
                gang_rows(col, node, per_node, following, gang_timeout)
        finally:
            names = {n["metadata"]["name"] for n in sim_daemons.kubectl_json("get", "nodes").get("items") or []}
            if node not in names:
                node_faults.recreate(node)
            node_faults.ready(node)
            quarantine_controllers(True)
            cool_down(nodes)
            delete_gang()
        columns.append(col)
    controllers(True)
    return columns


def table(columns: Sequence[Column]) -> str:
    rows = list(dict.fromkeys(r for c in columns for r in c.rows))
    width = max(len(r) for r in rows) + 2
    widths = [max(len(c.name), *(len(c.rows.get(r, "")) for r in rows)) + 2 for c in columns]
    lines = [" " * width + "".join(c.name.ljust(w) for c, w in zip(columns, widths, strict=True))]
    for r in rows:
        lines.append(r.ljust(width) + "".join(c.rows.get(r, "").ljust(w) for c, w in zip(columns, widths, strict=True)))
    return "\n".join(line.rstrip() for line in lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/bench_capacity.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="only the node rows (no gang, no waitForPodsReady wait)")
    parser.add_argument("--no-up", action="store_true", help="use the running cluster as it is (no make up)")
    args = parser.parse_args(argv)
    if not args.no_up and not make_up("bench_capacity"):
        return 1
    columns = run(args.quick)
    out = ROOT / ".state" / "bench-capacity"
    out.mkdir(parents=True, exist_ok=True)
    (out / "figures.json").write_text(json.dumps({c.name: c.figures for c in columns}, indent=2))
    print("quota against healthy capacity (local stack: 4 nodes x 8 GPUs, one node lost)")
    print(table(columns))
    return 0


if __name__ == "__main__":
    sys.exit(main())
