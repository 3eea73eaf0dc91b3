"""The stall detector's figures, side by side with today's path (no detector: the checkpoint alert, nobody restarts).

Runs the real controller (``daemons/stall_detector/controller.py``: gangs, verdicts, restarts, suspects, memory)
on a virtual clock against an in-memory API server and a Prometheus model that keeps every scrape and answers the
detector's queries as Prometheus would (``max_over_time``/``avg_over_time`` of the samples in the window, ``rate``
from the first and last counter samples in it). Scrapes every 15 s, a detector cycle every 15 s, the stack's
defaults (stallAfter 5m, startupGrace 10m, quietMax 30m). The GPUs' load follows a modelled training loop: steps
at 0.45 tensor activity, a checkpoint write every 20 minutes (idle GPUs, phase ``checkpoint`` reported), gradients
over InfiniBand at 9 GB/s a node while computing, the subnet manager's 16 KiB/s otherwise.

What it does not model: the time JobSet takes to recreate the gang after the eviction (the simulated cluster's
end-to-end test measured 33 s from the hang to running again with stallAfter 30s); a real Prometheus' own
evaluation cost (the figure given is the queries it is sent). Usage: ``python benchmarks/bench_stall_detector.py``.
"""

from __future__ import annotations

import re
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from contract.constants import PROGRESS_ANNOTATION_PREFIX  # noqa: E402
from contract.stall_detector_settings import StallDetectorSettings  # noqa: E402
from contract.times import unix_seconds  # noqa: E402
from daemons.stall_detector import queries  # noqa: E402
from daemons.stall_detector.controller import Controller  # noqa: E402
from daemons.stall_detector.decide import Verdict  # noqa: E402
from daemons.stall_detector.metrics import Metrics  # noqa: E402
from daemons.toolkit.prometheus import QueryResult, Sample  # noqa: E402
from tests.daemons.stall_detector.fakes import START, FakeApi, rfc3339  # noqa: E402

NS = "team-a"
SCRAPE = 15.0
COMPUTE, IDLE = 0.45, 0.0
NODE_TRAFFIC, BACKGROUND = 9e9, 16384.0
CHECKPOINT_EVERY, CHECKPOINT_WRITE = 1200.0, 30.0
#: Today: TrainingCheckpointStale fires at two intervals plus its 5 minutes; nothing restarts the gang.
TODAY_ALERT = 2 * CHECKPOINT_EVERY + 300


@dataclass
class Model:
    """Every GPU's tensor activity and every node's traffic over time, scraped every SCRAPE seconds."""

    tensor: dict[tuple[str, str, str], list[tuple[float, float]]] = field(default_factory=dict)
    traffic: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    moved: dict[str, float] = field(default_factory=dict)
    sent: int = 0

    def scrape(self, now: float, gpus: dict[tuple[str, str, str], float], nodes: dict[str, float]) -> None:
        for key, v in gpus.items():
            self.tensor.setdefault(key, []).append((now, v))
        for node, rate in nodes.items():
            self.moved[node] = self.moved.get(node, 0.0) + rate * SCRAPE
            self.traffic.setdefault(node, []).append((now, self.moved[node]))

    def answer(self, now: float) -> Callable[[str], QueryResult]:
        def query(promql: str) -> QueryResult:
            self.sent += 1
            if queries.XID_METRIC in promql or queries.CLOCK_EVENTS_METRIC in promql:
                return QueryResult("vector", ())  # no hardware XID, no throttling
            window = float(re.findall(r"\[(\d+)s\]", promql)[0])
            since = now - window
            if queries.TENSOR_METRIC in promql:
                mean = "avg_over_time" in promql
                rows = []
                for (ns, pod, gpu), samples in self.tensor.items():
                    vals = [v for t, v in samples if since <= t <= now]
                    if vals:
                        value = statistics.fmean(vals) if mean else max(vals)
                        rows.append(Sample({"namespace": ns, "pod": pod, "gpu": gpu}, value, now))
                return QueryResult("vector", tuple(rows))
            if "data_bytes" in promql:
                rows = []
                for node, samples in self.traffic.items():
                    inside = [(t, v) for t, v in samples if since <= t <= now]
                    if len(inside) >= 2:
                        (t0, v0), (t1, v1) = inside[0], inside[-1]
                        rows.append(Sample({"node": node}, 2 * (v1 - v0) / (t1 - t0), now))  # both ways
                return QueryResult("vector", tuple(rows))
            return QueryResult("vector", ())  # no transport or link errors

        return query


class Querier:
    def __init__(self, model: Model, clock: Callable[[], float]) -> None:
        self.model, self.clock = model, clock

    def query(self, promql: str) -> QueryResult:
        return self.model.answer(self.clock())(promql)


@dataclass
class Job:
    """One gang's program: what it puts on its GPUs and reports at ``t`` seconds after it started."""

    name: str
    nodes: list[str]
    #: (start, end, tensor, phase) spans of seconds since start; outside them the job computes.
    spans: list[tuple[float, float, float, str]] = field(default_factory=list)
    hang_at: float | None = None
    slow_node: str | None = None
    reports: bool = True

    def state(self, t: float) -> tuple[float, str]:
        if self.hang_at is not None and t >= self.hang_at:
            return IDLE, "hung"
        for a, b, tensor, phase in self.spans:
            if a <= t < b:
                return tensor, phase
        if t % CHECKPOINT_EVERY > CHECKPOINT_EVERY - CHECKPOINT_WRITE:
            return IDLE, "checkpoint"
        return COMPUTE, "train"


def run(
    jobs: list[Job], seconds: float, *, detector: bool = True
) -> tuple[Controller, dict[str, list[float]], FakeApi]:
    """Play ``jobs`` for ``seconds``; returns the controller, each job's restart times, and the API server."""
    now = [START]
    api, model = FakeApi(), Model()
    for job in jobs:
        api.add_gang(NS, job.name, job.nodes, started=START)
    settings = StallDetectorSettings.model_validate({"workloadNamespaces": [NS]})
    controller = Controller(
        settings,
        Querier(model, lambda: now[0]),
        api,
        Metrics(),
        is_leader=lambda: True,
        identity="bench",
        wall=lambda: now[0],
    )
    restarts: dict[str, list[float]] = {j.name: [] for j in jobs}
    last_step: dict[str, tuple[int, str]] = {}
    while now[0] - START < seconds:
        t = now[0] - START
        gpus: dict[tuple[str, str, str], float] = {}
        traffic: dict[str, float] = {}
        claim: dict[str, str] = {}
        for job in jobs:
            tensor, phase = job.state(t)
            attempt = api.jobsets[(NS, job.name)]["status"]["restarts"]
            for i, node in enumerate(job.nodes):
                pace = 0.7 if node == job.slow_node else 1.0
                for g in range(8):
                    gpus[(NS, f"{job.name}-node-0-{i}-a{attempt}", str(g))] = tensor * pace
                traffic[node] = BACKGROUND + (NODE_TRAFFIC if tensor > 0.1 else 0.0)
            if job.reports and phase != "hung":
                step = (int(t) if phase == "train" else last_step.get(job.name, (0, ""))[0], phase)
                if step != last_step.get(job.name):
                    last_step[job.name] = step
                    report = f'{{"step": {step[0]}, "phase": "{phase}", "at": "{rfc3339(now[0])}"}}'
                    claim[f"{PROGRESS_ANNOTATION_PREFIX}{job.name}"] = report
        api.claims.setdefault(NS, {}).update(claim)
        model.scrape(now[0], gpus, traffic)
        if detector:
            controller.cycle()
        for job in jobs:
            if (
                api.evictions
                and api.evictions[-1][1].startswith(f"{job.name}-")
                and len(restarts[job.name]) < len([e for e in api.evictions if e[1].startswith(f"{job.name}-")])
            ):
                restarts[job.name].append(t)
                api.restart(NS, job.name, job.nodes, started=now[0])  # JobSet recreates it (modelled as at once)
                job.hang_at = None
        now[0] += SCRAPE
    return controller, restarts, api


def main() -> int:
    print(__doc__.split("\n\n")[0])
    print()
    # 1. A hang, 30 minutes into a run.
    hang = 1800.0
    _, restarts, _ = run([Job("hung", ["n0", "n1"], hang_at=hang)], 3600)
    back = restarts["hung"][0] - hang if restarts["hung"] else None
    # 2. False positives: healthy runs with checkpoint writes, a 20-minute evaluation, an 8-minute slow start, and one
    # that reports nothing, over six hours.
    healthy = [
        Job("ckpt", ["h0", "h1"]),
        Job("evaluates", ["h2", "h3"], spans=[(5400, 6600, 0.02, "eval")]),
        Job("slow-start", ["h4", "h5"], spans=[(0, 480, IDLE, "data")]),
        Job("silent", ["h6", "h7"], reports=False),
    ]
    _, healthy_restarts, _ = run(healthy, 6 * 3600)
    false_positives = sum(len(r) for r in healthy_restarts.values())
    # 3. A straggler: one node of four at 70 % of its peers' pace from the start of the run.
    straggle = Job("straggles", ["s0", "s1", "s2", "s3"], slow_node="s2")
    _, _, api = run([straggle], 1800)
    named = [unix_seconds(e["lastTimestamp"]) or START for e in api.events if e["reason"] == "SuspectNode"]
    # 4. Cost: one cycle over 512 nodes x 8 GPUs in 64 gangs of 8 nodes.
    big = [Job(f"g{i:02d}", [f"n{i * 8 + k:03d}" for k in range(8)]) for i in range(64)]
    controller, _, _ = run(big, 11 * 60)  # past the startup grace
    timings = []
    for _ in range(5):
        t0 = time.perf_counter()
        result = controller.cycle()
        timings.append(time.perf_counter() - t0)
    verdicts = {v: sum(1 for g in result.gangs if g.verdict is v) for v in Verdict}
    per_minute = len(queries_sent(controller)) * 60 / controller.settings.interval_seconds

    rows = [
        (
            "hang at 30 min -> restarted",
            f"{back:.0f} s after the hang" if back is not None else "never",
            f"never (alert at {TODAY_ALERT / 60:.0f} min, no restart)",
        ),
        (
            "GPU-hours lost to the hang, 16 GPUs",
            f"{16 * (back or 0) / 3600:.1f}",
            f"{16 * 3600 / 3600:.0f}+ per hour until a person acts",
        ),
        ("false restarts, 4 healthy runs x 6 h", f"{false_positives}", "0"),
        (
            "straggler at 70 % named",
            f"{named[0] - START:.0f} s into the run ({len(named)} Event)" if named else "never",
            "at the next acceptance run",
        ),
        ("one cycle, 512 x 8 GPUs, 64 gangs", f"{statistics.median(timings) * 1000:.0f} ms (median of 5)", "-"),
        ("queries sent to Prometheus", f"{per_minute:.0f} a minute ({len(queries_sent(controller))} a cycle)", "-"),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"{'':{width}}  {'with the stall detector':40}  today")
    for label, ours, today in rows:
        print(f"{label:{width}}  {ours:40}  {today}")
    print(f"\n64 gangs judged: {', '.join(f'{v.value} {n}' for v, n in verdicts.items() if n)}")
    return 0 if back is not None and false_positives == 0 and named else 1


def queries_sent(controller: Controller) -> list[str]:
    """The queries of one cycle."""
    return [
        queries.tensor_max(None, [NS], controller.policy.stall_after_s),
        queries.tensor_mean(None, [NS], controller.policy.stall_after_s),
        queries.fabric_bytes(None, controller.policy.stall_after_s),
        queries.transport_errors(None, controller.policy.stall_after_s),
        queries.link_errors(None, controller.policy.stall_after_s),
        queries.hardware_xids(None, controller.policy.stall_after_s),
        queries.throttled(None, controller.policy.stall_after_s),
    ]


if __name__ == "__main__":
    sys.exit(main())
