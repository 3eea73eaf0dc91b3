"""The flip under faults: daemons killed with SIGKILL, failing and dying rented instances, Prometheus gone.

Each cycle is one full flip (``sim/flip.py``). While it runs:

- a daemon picked at random (virtual node, provider service, the taint controller's leader, the make-before-break
  controllers' leader, descheduler) is killed with SIGKILL at a random moment. Each runs as the stack's pod on the
  real node (the controllers, the virtual node's two containers, the descheduler chart's pod): it is killed through
  the node's containerd, and the kubelet restarts it with its own back-off;
- the fake GPU cloud refuses ``--create-failure-rate`` of creates and kills running instances at
  ``--death-rate`` (expected deaths per instance per minute);
- with ``--prometheus-outage``, Prometheus is stopped for ``--outage-seconds`` once the replicas run externally,
  so the taint controller sees no data and must change nothing until it is back.

Every cycle must converge: the Deployment back at its desired count, every replica in-cluster, no external
instance left (no money leaks), no node left reserved and no Deployment left moved; and the training must be
admitted within ``maxHold`` (plus one Lease takeover and a cycle: a killed leader's successor answers). The
counts of what happened are printed at the end, and the exit status is 1 if any cycle did not converge.

Usage: ``python sim/chaos.py [--kills 20] [--cycles 4] ...`` (``--help``); ``make chaos`` runs the full version
and ``make bench`` a shorter one (``benchmarks/bench_chaos.py``).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from contract.registry import MAKE_BEFORE_BREAK  # noqa: E402
from sim import controllers, deployed, flip, processes  # noqa: E402 (run as a script: the repository first on the path)

#: What may be killed: the daemons the flip depends on. The fake cloud stands for a provider's API, not ours.
#: Registered controllers (contract/registry.py) only where the stack turns them on.
TARGETS = (
    "virtual-node",
    "provider",
    "taint-controller",
    "make-before-break",
    "descheduler",
)


class Target(Protocol):
    def kill(self) -> bool: ...
    def start(self) -> object: ...
    def running(self) -> bool: ...


@dataclass(frozen=True)
class Leader:
    """A registered controller as a chaos target: a kill is SIGKILL to the replica holding its Lease (each replica
    when none holds it), the one whose loss matters; ``start`` waits until the kubelet has restarted every replica."""

    controller: controllers.Controller
    lease: str

    def kill(self) -> bool:
        try:
            holder: str | None = self.controller.leader(self.lease)
        except processes.DaemonError:
            holder = None
        try:
            return bool(self.controller.kill(holder))
        except processes.DaemonError:  # the holder's pod is already gone: the next kill takes another
            return False

    def start(self) -> None:
        self.controller.start()

    def running(self) -> bool:
        return self.controller.running()


def targets(config: Any) -> dict[str, Target]:
    """The targets of TARGETS that this stack runs, by name."""
    from contract.registry import CONTROLLERS  # noqa: PLC0415 (needs ROOT on the path)

    out: dict[str, Target] = {}
    if config.burst_enabled:  # the two containers of the virtual node's pod, first in TARGETS
        out["virtual-node"] = controllers.burst_part("virtual-node")
        out["provider"] = controllers.burst_part("provider")
    for name in TARGETS:
        if name in ("virtual-node", "provider"):
            continue
        if name == "descheduler":
            if config.descheduler.enabled:
                out[name] = controllers.PodContainer(deployed.descheduler(config), deployed.DESCHEDULER_APP)
            continue
        spec = next((s for s in CONTROLLERS if s.name == name), None)
        settings = config.running(spec) if spec else None
        if spec is not None and settings is not None:
            out[name] = Leader(controllers.controller(name), settings.lease_name)
    return out


@dataclass
class Report:
    cycles: int = 0
    converged: int = 0
    kills: Counter[str] = field(default_factory=Counter)
    restart_seconds: list[float] = field(default_factory=list)
    outage_seconds: float = 0.0
    failures: list[str] = field(default_factory=list)
    cycle_seconds: list[float] = field(default_factory=list)
    min_ready: list[int] = field(default_factory=list)
    min_ready_whole_cycle: list[int] = field(default_factory=list)
    admission_seconds: list[float] = field(default_factory=list)
    cloud: dict[str, Any] = field(default_factory=dict)
    query_errors: float = 0.0
    orphans_deleted: float = 0.0
    failed_pods_replaced: int = 0


def post_json(url: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(req, timeout=5) as r:
        data = json.loads(r.read() or b"{}")
        return data if isinstance(data, dict) else {}


def metric_sum(url: str, name: str) -> float | None:
    """The sum of every sample of one metric family on a /metrics page (None when unreachable)."""
    try:
        with urllib.request.urlopen(url, timeout=3) as r:
            text = r.read().decode()
    except OSError:
        return None
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            head = line.split(" ")[0]
            if head == name or head.startswith(name + "{"):
                total += float(line.rsplit(" ", 1)[1])
    return total


#: What the taint controller counts when a query to Prometheus fails.
QUERY_ERRORS_METRIC = "gpucluster_taint_controller_query_errors_total"


@dataclass
class Outage:
    """What one Prometheus outage showed: the burst taints the sampler saw meanwhile, the queries the taint
    controller's replicas counted as failed, and how long Prometheus was down."""

    taints: set[str] = field(default_factory=set)
    query_errors: float = 0.0
    seconds: float = 0.0


def prometheus_outage(prometheus: processes.Daemon, seconds: float, sampler: flip.Sampler) -> Outage:
    """Stop Prometheus for ``seconds`` and start it again; the taint controller must change nothing meanwhile."""
    flip.say(f"   chaos: Prometheus stopped for {seconds:.0f}s")
    # Failed queries, summed over the replicas; a replica killed meanwhile starts its counter at 0 again.
    urls = controllers.controller("taint-controller").metrics_urls()
    last = [metric_sum(u, QUERY_ERRORS_METRIC) or 0.0 for u in urls]
    seen = Outage()
    prometheus.stop()
    t1 = time.monotonic()
    try:
        while time.monotonic() - t1 < seconds:
            if sampler.latest:
                seen.taints.add(sampler.latest.taint)
            for i, u in enumerate(urls):
                now = metric_sum(u, QUERY_ERRORS_METRIC)
                if now is None:  # killed or restarting: read it again next time
                    continue
                seen.query_errors += now - last[i] if now >= last[i] else now
                last[i] = now
            time.sleep(0.5)
    finally:
        prometheus.start()
    seen.seconds = time.monotonic() - t1
    flip.say(f"   chaos: Prometheus back; the taint stayed {sorted(seen.taints)}")
    return seen


class Killer:
    """Kills the planned daemons at their planned moments (seconds after the cycle started), then restarts them."""

    def __init__(self, registry: dict[str, Target], plan: list[tuple[float, str]], report: Report) -> None:
        self.registry, self.plan, self.report = registry, sorted(plan), report
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="killer", daemon=True)
        self.log: list[str] = []

    def _run(self) -> None:
        t0 = time.monotonic()
        for at, name in self.plan:
            if self._stop.wait(max(0.0, at - (time.monotonic() - t0))):
                return
            d = self.registry[name]
            if d.kill():
                self.report.kills[name] += 1
                flip.say(f"   chaos: SIGKILL {name} at t={at:.0f}s")
                time.sleep(random.uniform(2.0, 5.0))
                t1 = time.monotonic()
                try:
                    d.start()
                    self.report.restart_seconds.append(time.monotonic() - t1)
                except processes.DaemonError as e:
                    self.report.failures.append(f"{name} did not restart: {e}")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        # a restart it is waiting on (a controller's pods Ready again) takes up to 120 s
        self._thread.join(timeout=180)


def plan_kills(
    kills: int, cycles: int, horizon: float, rng: random.Random, names: Sequence[str] = TARGETS
) -> list[list[tuple[float, str]]]:
    """``kills`` (moment, daemon) pairs spread over ``cycles``; every target is hit before any is hit twice."""
    targets: list[str] = []
    while len(targets) < kills:
        batch = list(names)
        rng.shuffle(batch)
        targets.extend(batch)
    per_cycle: list[list[tuple[float, str]]] = [[] for _ in range(cycles)]
    for i, name in enumerate(targets[:kills]):
        per_cycle[i % cycles].append((rng.uniform(3.0, horizon), name))
    return per_cycle


def run(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="sim/chaos.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--kills", type=int, default=20, help="SIGKILLs in all, spread over the cycles")
    p.add_argument("--cycles", type=int, default=4, help="full flips to run")
    p.add_argument("--create-failure-rate", type=float, default=0.2, help="share of creates the fake cloud refuses")
    p.add_argument("--death-rate", type=float, default=0.05, help="expected instance deaths per instance-minute")
    p.add_argument("--prometheus-outage", action="store_true", help="stop Prometheus for a while in cycle 1")
    p.add_argument("--outage-seconds", type=float, default=20.0, help="how long Prometheus stays down")
    p.add_argument("--horizon", type=float, default=150.0, help="kills happen within this many seconds of a cycle")
    p.add_argument("--train-for", default="45s", help="training Job duration per cycle")
    p.add_argument("--timeout", type=float, default=420.0, help="seconds any one step of a cycle may take")
    p.add_argument("--seed", type=int, default=7, help="random seed (kills, moments)")
    p.add_argument("--out", type=Path, default=ROOT / ".state" / "chaos", help="timelines and the report go here")
    a = p.parse_args(argv)
    if a.kills < 0 or a.cycles < 1:
        p.error("--kills must be >= 0 and --cycles >= 1")

    rng = random.Random(a.seed)
    try:
        setup = flip.setup_from_stack()
        registry = processes.registry()
        cfg = processes.stack_config()
        kill_targets = targets(cfg)
    except (flip.ScenarioError, processes.DaemonError) as e:
        print(f"sim/chaos.py: error: {e}", file=sys.stderr)
        return 1
    if stopped := [n for n, d in registry.items() if not d.running()]:
        print(
            f"sim/chaos.py: error: daemons not running: {stopped} (start them: python sim/processes.py start)",
            file=sys.stderr,
        )
        return 1
    if down := [n for n, target in kill_targets.items() if not target.running()]:
        print(f"sim/chaos.py: error: not running: {down} (make up starts them)", file=sys.stderr)
        return 1
    cloud = setup.fake_cloud_url
    report = Report()
    before = flip.fake_cloud_stats(cloud)
    post_json(f"{cloud}/admin/knobs", {"createFailureRate": a.create_failure_rate, "deathRate": a.death_rate})
    flip.say(
        f"chaos: {a.kills} kills over {a.cycles} cycle(s); fake cloud refuses {a.create_failure_rate:.0%} of creates, "
        f"instances die at {a.death_rate}/min; Prometheus outage: {'yes' if a.prometheus_outage else 'no'}"
    )
    names = list(kill_targets)
    plans = plan_kills(a.kills, a.cycles, a.horizon, rng, names)
    mbb = cfg.controller(MAKE_BEFORE_BREAK)
    # The longest a gang may wait: maxHold, then a dead leader's Lease running out and the successor's cycle.
    admit_within = mbb.max_hold_seconds + mbb.lease_duration_seconds + 2 * mbb.interval_seconds if mbb.enabled else None

    def outage(sampler: flip.Sampler, cycle: int) -> None:
        """Prometheus stopped while the replicas run externally: the taint must stay as it is."""
        seen = prometheus_outage(registry["prometheus"], a.outage_seconds, sampler)
        report.query_errors += seen.query_errors
        report.outage_seconds += seen.seconds
        if len(seen.taints) > 1:
            report.failures.append(f"cycle {cycle}: the taint changed while Prometheus was down: {sorted(seen.taints)}")

    try:
        for cycle, plan in enumerate(plans, start=1):
            report.cycles += 1
            flip.say(f"== cycle {cycle}/{a.cycles}: kills {', '.join(f'{n}@{t:.0f}s' for t, n in sorted(plan))}")
            killer = Killer(kill_targets, plan, report)

            def during(phase: str, sampler: flip.Sampler, cycle: int = cycle, killer: Killer = killer) -> None:
                if phase == "submitted":
                    killer.start()
                if phase == "flipped_out" and a.prometheus_outage and cycle == 1:
                    threading.Thread(target=outage, args=(sampler, cycle), name="outage", daemon=True).start()

            t0 = time.monotonic()
            opts = flip.Options(train_for=a.train_for, timeout=a.timeout, quiet=False, during=during)
            try:
                tl, figures = flip.run_cycle(opts)
                report.converged += 1
                report.cycle_seconds.append(time.monotonic() - t0)
                report.min_ready.append(figures.min_ready_during_return)
                report.min_ready_whole_cycle.append(figures.min_ready)
                admitted = figures.training_admission_seconds
                if admitted is not None:
                    report.admission_seconds.append(admitted)
                if admitted is not None and admit_within is not None and admitted > admit_within:
                    report.failures.append(
                        f"cycle {cycle}: training held {admitted:.0f}s before admission, past maxHold "
                        f"({admit_within:.0f}s with a Lease takeover)"
                    )
                flip.write_outputs(tl, figures, a.out, f"Chaos cycle {cycle}", stem=f"cycle-{cycle}")
            except (flip.ScenarioError, processes.DaemonError) as e:
                report.failures.append(f"cycle {cycle} did not converge: {e}")
            finally:
                killer.stop()
                for target in kill_targets.values():
                    if not target.running():
                        target.start()
    finally:
        post_json(f"{cloud}/admin/knobs", {"createFailureRate": 0.0, "deathRate": 0.0})
        for d in registry.values():
            if not d.running():
                d.start()

    after = flip.fake_cloud_stats(cloud)
    report.cloud = {k: after.get(k, 0) - before.get(k, 0) for k in ("creates", "createFailures", "deaths", "deletes")}
    try:
        provider_metrics = controllers.provider_metrics_url(cfg)
        report.orphans_deleted = metric_sum(provider_metrics, "gpucluster_burst_orphans_deleted_total") or 0.0
    except processes.DaemonError as e:  # the virtual node's pod has no address: say so, count nothing
        report.failures.append(f"the provider's metrics could not be read: {e}")
    final = verify_converged(setup)
    if final:
        report.failures.append(final)
    print_report(report, after)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "report.json").write_text(json.dumps(report.__dict__, default=dict, indent=2))
    return 0 if not report.failures and report.converged == report.cycles else 1


def verify_converged(s: flip.Setup, timeout: float = 120.0) -> str | None:
    """The end state every run must reach: desired replicas Ready in-cluster, none external, no live instance.

    Polled for up to ``timeout`` seconds: a pod evicted last may still be in its termination grace period.
    """
    deadline = time.monotonic() + timeout
    while (problem := _convergence_problem(s)) and time.monotonic() < deadline:
        time.sleep(2)
    return problem


def _convergence_problem(s: flip.Setup) -> str | None:
    dep = flip.kget("deployment", s.service, "-n", s.inference_ns)
    desired = dep["spec"].get("replicas", 0)
    ready = dep.get("status", {}).get("readyReplicas", 0)
    pods = flip.kget("pods", "-n", s.inference_ns, "-l", s.selector)["items"]
    external = [p["metadata"]["name"] for p in pods if p["spec"].get("nodeName") == s.node]
    live = flip.fake_cloud_stats(s.fake_cloud_url).get("liveInstances", -1)
    problems = [*_left_moved(s)]
    if ready != desired:
        problems.append(f"{ready}/{desired} replicas Ready")
    if external:
        problems.append(f"pods still on {s.node}: {external}")
    if live != 0:
        problems.append(f"{live} external instance(s) still live (orphans)")
    return "not converged at the end: " + "; ".join(problems) if problems else None


def _left_moved(s: flip.Setup) -> list[str]:
    """Make-before-break leftovers: nodes still reserved, Deployments still carrying a placement epoch."""
    if not s.make_before_break:
        return []
    from contract.controllers.make_before_break import EPOCH_ANNOTATION  # noqa: PLC0415 (needs ROOT on the path)

    out = []
    reserved = flip.kget("nodes", "-l", s.reservation_key)["items"]
    if reserved:
        out.append(f"nodes still reserved: {[n['metadata']['name'] for n in reserved]}")
    dep = flip.kget("deployment", s.service, "-n", s.inference_ns)
    annotations = dep["spec"]["template"]["metadata"].get("annotations") or {}
    if EPOCH_ANNOTATION in annotations:
        out.append(f"{s.inference_ns}/{s.service} still moved (placement epoch {annotations[EPOCH_ANNOTATION]})")
    return out


def print_report(r: Report, cloud_now: dict[str, Any]) -> None:
    restart = f"{max(r.restart_seconds):.1f}" if r.restart_seconds else "n/a"
    rows = [
        ("cycles converged", f"{r.converged}/{r.cycles}"),
        ("SIGKILLs", f"{sum(r.kills.values())} ({', '.join(f'{k} {v}' for k, v in sorted(r.kills.items()))})"),
        ("slowest restart to ready", f"{restart} s"),
        (
            "fake cloud creates / refused / deaths / deletes",
            "{creates} / {createFailures} / {deaths} / {deletes}".format(**r.cloud),
        ),
        ("instances reconciliation deleted (pod gone or going)", f"{r.orphans_deleted:.0f} since the last start"),
        ("Prometheus down", f"{r.outage_seconds:.0f} s, {r.query_errors:.0f} failed queries, taint left alone"),
        ("minimum Ready replicas, each whole cycle", ", ".join(str(m) for m in r.min_ready_whole_cycle) or "n/a"),
        ("minimum Ready replicas during each return", ", ".join(str(m) for m in r.min_ready) or "n/a"),
        ("quota reserved -> admitted", ", ".join(f"{x:.0f} s" for x in r.admission_seconds) or "n/a"),
        ("cycle durations", ", ".join(f"{c:.0f} s" for c in r.cycle_seconds) or "n/a"),
        ("live external instances at the end", str(cloud_now.get("liveInstances", "?"))),
        ("lost replicas / orphans at the end", "0 / 0" if not r.failures else "see failures"),
    ]
    width = max(len(k) for k, _ in rows)
    print("\nchaos report")
    for k, v in rows:
        print(f"  {k.ljust(width)}  {v}")
    for f in r.failures:
        print(f"  FAILURE: {f}")


if __name__ == "__main__":
    sys.exit(run())
