"""The flip at production scale: the same cycle as ``bench_flip.py`` on a simulated cluster of 96 and of 512 nodes.

``make bench-scale`` (or ``.venv/bin/python benchmarks/scale_flip.py``). Not part of ``make bench``: it replaces
the running simulated cluster, and takes far longer than the other benchmarks. Per scale, one after the other:

1. ``make down`` (the cluster that runs, the local stack's), then ``make up`` with
   ``GPUCLUSTER_STACK=<scale> GPUCLUSTER_SIM_STACK=benchmarks/stacks/Pulumi.<scale>.yaml``: kwok nodes from the scale
   stack, the stack deployed by ``pulumi up --config-file``, its daemons as its pods on the real node. Timed.
2. one ``sim/flip.py`` cycle per path (``--paths``; default make-before-break, then preempt-then-burst): 4
   inference services of 16 x 1-GPU replicas (64) and a gang of whole 8-GPU nodes (64 of 96, 384 of 512), every
   step's timeout multiplied by the scale's factor;
3. the rows ``bench_flip.py`` prints, one column per path, then the controller's decision time: the pure
   ``decide()`` call and the whole cycle (lists, decision, writes) as the leader's ``/metrics`` (its pod's address)
   counted them during the cycle (cycles, mean, the bucket the slowest fell in) and, exactly, the slowest cycle
   that acted, from its log (``kubectl logs --since-time``: ``decide_seconds`` / ``cycle_seconds`` of its ``cycle``
   lines);
4. gangs of several sizes placed one at a time, through Kueue's topology-aware scheduling (preferred at the
   leaf, what a job that names no level gets) and through kube-scheduler alone (``scale_placement.py``): the
   blocks, leaves and nodes each spans, side by side (``--no-placement`` skips it);
5. the machine while it ran: lowest MemAvailable, highest 1-minute load, and the largest processes;
6. ``make down`` with the scale's stack.

A step that fails or runs out of time stops that scale: the report says which step, the reason (the engine's or
the scenario's message) and the machine's state at that moment, and the next scale still runs. At the end the
local cluster comes back (``make down && make up``) unless ``--no-restore``. Exit status 1 when a scale stopped.

How long, measured on the 2-core development machine (2026-12-04, one make-before-break cycle and the placement):
96 nodes 376 s (make up 172 s), 512 nodes 652 s (make up 251 s); each further cycle a few minutes more, the old
path's at 512 far longer (one scheduler preempting for 512 pods); restoring the local cluster about 5 minutes.
Outputs (CSV, PNG and JSON per cycle, the report) in ``.state/bench-scale/<scale>/``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import scale_placement  # noqa: E402 (run as a script: the repository first on the path)
from contract.registry import MAKE_BEFORE_BREAK  # noqa: E402
from sim import deployed as sim_deployed  # noqa: E402
from sim import flip, timeline  # noqa: E402
from sim import outside as sim_outside  # noqa: E402
from sim import processes as sim_daemons  # noqa: E402

STACKS = ROOT / "benchmarks" / "stacks"
METRIC = MAKE_BEFORE_BREAK.metrics_prefix
#: The controller whose decisions are timed: its Deployment's pods on the real node (their /metrics, their logs).
MBB_CONTROLLER = MAKE_BEFORE_BREAK.name


@dataclass(frozen=True)
class Scale:
    name: str
    nodes: int
    gang_nodes: int
    #: Multiplies sim/flip.py's per-step timeout (600 s).
    timeout_scale: float
    #: Seconds make up may take.
    up_timeout: float
    #: Seconds the kwok nodes get to be Ready (sim/kwok-cluster.sh).
    ready_timeout: int
    #: Gangs (whole nodes) placed with and without the topology after the cycles (scale_placement.py).
    placement_sizes: tuple[int, ...] = ()
    #: The simulated fabric: nodes per leaf x leaves per block (sim/nodes.py).
    fabric: str = "8x4"

    @property
    def stack_file(self) -> Path:
        return STACKS / f"Pulumi.{self.name}.yaml"

    def env(self) -> dict[str, str]:
        return {
            "GPUCLUSTER_STACK": self.name,
            "GPUCLUSTER_SIM_STACK": str(self.stack_file),
            "GPUCLUSTER_SIM_READY_TIMEOUT": str(self.ready_timeout),
            "GPUCLUSTER_SIM_FABRIC": self.fabric,
        }


SCALES = {
    "scale96": Scale(
        "scale96", 96, 64, timeout_scale=1.5, up_timeout=2400, ready_timeout=300, placement_sizes=(4, 8, 16, 32, 64)
    ),
    "scale512": Scale(
        "scale512",
        512,
        384,
        timeout_scale=3.0,
        up_timeout=5400,
        ready_timeout=900,
        placement_sizes=(8, 32, 64, 128, 256),
    ),
}
DOWN_TIMEOUT = 900.0
RESTORE_TIMEOUT = 1800.0


# --- the machine ---------------------------------------------------------------------------------------------------


def mem_available_mib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def load1() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def largest_processes(count: int = 5) -> list[str]:
    """``name (pid) RSS MiB`` of the processes holding the most memory."""
    found: list[tuple[int, str]] = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
        except OSError:
            continue
        rss = fields.get("VmRSS", "0 kB").split()[0]
        found.append((int(rss), f"{fields.get('Name', '?').strip()} ({status.parent.name})"))
    found.sort(reverse=True)
    return [f"{name} {kib / 1024:.0f} MiB" for kib, name in found[:count]]


class Monitor:
    """Lowest MemAvailable and highest load while a scale runs, sampled every 5 s."""

    def __init__(self) -> None:
        self.min_mem = float("inf")
        self.max_load = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="monitor", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.min_mem = min(self.min_mem, mem_available_mib())
            self.max_load = max(self.max_load, load1())
            self._stop.wait(5)

    def __enter__(self) -> Monitor:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def line(self) -> str:
        return f"lowest MemAvailable {self.min_mem:.0f} MiB, highest 1-min load {self.max_load:.1f}"


def machine_now() -> str:
    dead = sim_cluster_dead()
    parts = [
        f"MemAvailable {mem_available_mib():.0f} MiB",
        f"load {load1():.1f}",
        "largest: " + ", ".join(largest_processes()),
    ]
    if dead:
        parts.append(f"control-plane components gone: {', '.join(dead)}")
    return "; ".join(parts)


def sim_cluster_dead() -> list[str]:
    """The kwok cluster's components whose pid file names a process that is gone (as sim/lib.sh checks)."""
    dead = []
    for pid_file in (ROOT / ".state" / "sim" / "kwok" / "clusters" / "gpucluster" / "pids").glob("*.pid"):
        try:
            os.kill(int(pid_file.read_text().strip()), 0)
        except (OSError, ValueError):
            dead.append(pid_file.stem)
    return dead


# --- make ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ran:
    ok: bool
    seconds: float
    tail: str


def make(target: str, env: Mapping[str, str], timeout: float) -> Ran:
    """``make TARGET`` in its own process group; past ``timeout`` the group is stopped (TERM, then KILL)."""
    t0 = time.monotonic()
    proc = subprocess.Popen(
        ["make", "--no-print-directory", target],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
        return Ran(False, time.monotonic() - t0, f"timed out after {timeout:.0f}s\n{out[-3000:]}")
    return Ran(proc.returncode == 0, time.monotonic() - t0, out[-3000:])


# --- the controller's decision time -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Histogram:
    count: float = 0.0
    total: float = 0.0
    buckets: tuple[tuple[float, float], ...] = ()  # (le, cumulative count)

    def minus(self, before: Histogram) -> Histogram:
        if self.count < before.count:  # the process restarted in between: its counters began again
            return self
        old = dict(before.buckets)
        return Histogram(
            self.count - before.count,
            self.total - before.total,
            tuple((le, n - old.get(le, 0.0)) for le, n in self.buckets),
        )

    def slowest_within(self) -> float | None:
        """The smallest bucket bound every observation fell under."""
        return next((le for le, n in sorted(self.buckets) if n >= self.count), None) if self.count else None


def scrape(url: str) -> tuple[bool, dict[str, Histogram]]:
    """Whether the replica serving ``url`` leads, and its decide_seconds and cycle_seconds histograms."""
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return parse_metrics(r.read().decode())
    except OSError:
        return False, {}


def parse_metrics(text: str) -> tuple[bool, dict[str, Histogram]]:
    """The leader flag and the two duration histograms of a controller's /metrics text."""
    from prometheus_client.parser import text_string_to_metric_families  # noqa: PLC0415 (a dependency of daemons)

    leader = False
    found: dict[str, Histogram] = {}
    for family in text_string_to_metric_families(text):
        if family.name == f"{METRIC}_is_leader":
            leader = any(s.value == 1 for s in family.samples)
        for short in ("decide_seconds", "cycle_seconds"):
            if family.name != f"{METRIC}_{short}":
                continue
            count = total = 0.0
            buckets = []
            for s in family.samples:
                if s.name.endswith("_count"):
                    count = s.value
                elif s.name.endswith("_sum"):
                    total = s.value
                elif s.name.endswith("_bucket"):
                    buckets.append((float(s.labels["le"]), s.value))
            found[short] = Histogram(count, total, tuple(buckets))
    return leader, found


def mbb_controller() -> sim_deployed.Deployed:
    """The make-before-break controller's Deployment of the stack make up deployed."""
    return sim_deployed.controller(sim_daemons.stack_config(), MBB_CONTROLLER)


def scrape_all() -> dict[str, tuple[bool, dict[str, Histogram]]]:
    """Each of the controller's pods, by name: whether it leads, and its histograms (read at its pod address)."""
    d = mbb_controller()
    out = {}
    for pod in d.pods():
        ip = (pod.get("status") or {}).get("podIP")
        if ip:
            out[pod["metadata"]["name"]] = scrape(f"http://{ip}:{d.metrics_port}/metrics")
    return out


def now_rfc3339() -> str:
    """The moment to read the controller's logs from (``kubectl logs --since-time``)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def logs_since(since: str) -> dict[str, str]:
    """What each of the controller's pods logged since ``since`` (an RFC 3339 moment), by pod name."""
    d = mbb_controller()
    out = {}
    for pod in d.pods():
        name = pod["metadata"]["name"]
        try:
            out[name] = d.logs(pod=name, since_time=since)
        except sim_daemons.DaemonError:  # a pod gone or restarting: its cycles are in the histograms
            continue
    return out


def slowest_logged(logs: Mapping[str, str]) -> dict[str, float]:
    """The largest decide_seconds and cycle_seconds of the leaders' ``cycle`` lines in ``logs`` (by pod)."""
    worst = {"decide_seconds": 0.0, "cycle_seconds": 0.0}
    for text in logs.values():
        for raw in text.splitlines():
            try:
                entry = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(entry, dict) or entry.get("msg") != "cycle" or not entry.get("leader"):
                continue
            for key, so_far in worst.items():
                value = entry.get(key)
                if isinstance(value, int | float):
                    worst[key] = max(so_far, float(value))
    return worst


@dataclass(frozen=True)
class Decisions:
    """The leader's decision and cycle durations during one flip."""

    decide: Histogram
    cycle: Histogram
    slowest_decide_logged: float
    slowest_cycle_logged: float

    def rows(self) -> list[tuple[str, str]]:
        def ms(v: float | None) -> str:
            return "n/a" if v is None else f"{v * 1000:.1f} ms"

        def mean(h: Histogram) -> float | None:
            return h.total / h.count if h.count else None

        def bound(h: Histogram) -> str:
            b = h.slowest_within()
            return "n/a" if b is None else f"<= {b * 1000:g} ms"

        return [
            ("controller: cycles (leader)", f"{self.decide.count:.0f}"),
            ("controller: decide(), mean", ms(mean(self.decide))),
            (
                "controller: decide(), slowest (bucket / logged)",
                f"{bound(self.decide)} / {ms(self.slowest_decide_logged)}",
            ),
            ("controller: whole cycle, mean", ms(mean(self.cycle))),
            (
                "controller: whole cycle, slowest (bucket / logged)",
                f"{bound(self.cycle)} / {ms(self.slowest_cycle_logged)}",
            ),
        ]


def decisions_between(
    before: Mapping[str, tuple[bool, dict[str, Histogram]]],
    after: Mapping[str, tuple[bool, dict[str, Histogram]]],
    logs: Mapping[str, str],
) -> Decisions:
    leader = next((n for n, (lead, _) in after.items() if lead), "")
    now, then = after.get(leader, (False, {}))[1], before.get(leader, (False, {}))[1]
    empty = Histogram()
    logged = slowest_logged(logs)
    return Decisions(
        decide=now.get("decide_seconds", empty).minus(then.get("decide_seconds", empty)),
        cycle=now.get("cycle_seconds", empty).minus(then.get("cycle_seconds", empty)),
        slowest_decide_logged=logged["decide_seconds"],
        slowest_cycle_logged=logged["cycle_seconds"],
    )


# --- one scale -----------------------------------------------------------------------------------------------------


@dataclass
class ScaleResult:
    scale: Scale
    up_seconds: float | None = None
    figures: list[timeline.Figures] = field(default_factory=list)
    decisions: list[Decisions] = field(default_factory=list)
    stopped: str = ""  # the step that did not complete; "" when all did
    reason: str = ""
    machine: str = ""  # at the moment it stopped
    monitor: str = ""
    #: Gangs placed with the topology and without it (scale_placement.py), and the levels measured.
    placement: list[scale_placement.Span] = field(default_factory=list)
    levels: tuple[str, ...] = ()

    def report(self) -> str:
        s = self.scale
        head = (
            f"== {s.name}: {s.nodes} nodes x 8 GPUs ({s.nodes * 8} GPUs), 4 inference services, 64 x 1-GPU "
            f"replicas, a gang of {s.gang_nodes} nodes"
        )
        lines = [head, f"make up                               {fmt_s(self.up_seconds)}"]
        if self.figures:
            # bench_flip's rows (timeline.side_by_side), then the controller's, one column per path.
            rows = [f.rows() + d.rows() for f, d in zip(self.figures, self.decisions, strict=True)]
            header = ["", *[f.path for f in self.figures]]
            table = [header, *[[rows[0][i][0], *[r[i][1] for r in rows]] for i in range(len(rows[0]))]]
            widths = [max(len(row[c]) for row in table) for c in range(len(header))]
            lines += ["  ".join(c.ljust(widths[i]) for i, c in enumerate(row)).rstrip() for row in table]
        if self.placement:
            lines.append(
                f"placement: domains a gang spans, kube-scheduler alone | Kueue's topology ({s.fabric} fabric, "
                "preferred at the leaf, as a job that names no level)"
            )
            lines += ["  " + row for row in scale_placement.table(self.placement, self.levels)]
        if self.stopped:
            lines += [f"stopped at: {self.stopped}", f"  reason: {self.reason.strip()}", f"  machine: {self.machine}"]
        lines.append(f"machine during the run: {self.monitor}")
        return "\n".join(lines)


def fmt_s(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.0f} s"


def run_scale(scale: Scale, paths: Sequence[str], train_for: str, out: Path, placement: bool = True) -> ScaleResult:
    result = ScaleResult(scale)
    env = scale.env()
    boot = float(os.environ.get("GPUCLUSTER_FAKE_BOOT_SECONDS", sim_outside.FAKE_CLOUD_DEFAULTS["boot-seconds"]))
    saved = {k: os.environ.get(k) for k in env}
    with Monitor() as monitor:
        try:
            print(f"scale_flip: {scale.name}: make up ...", flush=True)
            up = make("up", env, scale.up_timeout)
            if not up.ok:
                result.stopped, result.reason, result.machine = "make up", up.tail, machine_now()
                return result
            result.up_seconds = up.seconds
            os.environ.update(env)  # sim/flip.py and sim/processes.py read the scale stack
            for path in paths:
                print(f"scale_flip: {scale.name}: one cycle, {path} ...", flush=True)
                before, since = scrape_all(), now_rfc3339()
                opts = flip.Options(
                    path=path,
                    train_for=train_for,
                    boot_seconds=boot,
                    out=out / scale.name,
                    gang_nodes=scale.gang_nodes,
                    timeout_scale=scale.timeout_scale,
                )
                try:
                    tl, figures = flip.run_cycle(opts)
                except (flip.ScenarioError, sim_daemons.DaemonError) as e:
                    result.stopped, result.reason, result.machine = f"the {path} cycle", str(e), machine_now()
                    return result
                result.decisions.append(decisions_between(before, scrape_all(), logs_since(since)))
                result.figures.append(figures)
                flip.write_outputs(tl, figures, out / scale.name, f"One flip at {scale.nodes} nodes: {path}")
            if placement and scale.placement_sizes:
                print(f"scale_flip: {scale.name}: gangs placed with and without the topology ...", flush=True)
                stack = sim_daemons.stack_config()
                topology = stack.topology_of(stack.flavors[0])
                result.levels = tuple(topology.node_labels) if topology is not None else ()
                try:
                    result.placement = scale_placement.measure(
                        stack, sim_daemons.kubectl, scale.placement_sizes, timeout=300 * scale.timeout_scale
                    )
                except (ValueError, TimeoutError, sim_daemons.DaemonError) as e:
                    result.stopped, result.reason, result.machine = "the placement", str(e), machine_now()
            return result
        finally:
            result.monitor = monitor.line()
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            print(f"scale_flip: {scale.name}: make down ...", flush=True)
            down = make("down", env, DOWN_TIMEOUT)
            if not down.ok:
                print(f"scale_flip: {scale.name}: make down failed:\n{down.tail}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="benchmarks/scale_flip.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--scales", default=",".join(SCALES), help=f"comma-separated, of {', '.join(SCALES)}")
    p.add_argument(
        "--paths",
        default=f"{flip.MAKE_BEFORE_BREAK},{flip.PREEMPT}",
        help=f"comma-separated cycles per scale, of {', '.join(flip.PATHS)}",
    )
    p.add_argument("--train-for", default="60s", help="how long the training Job runs (Go duration)")
    p.add_argument(
        "--gang-nodes",
        type=int,
        default=None,
        help="the gang's size in whole nodes, for every scale run (default: each scale's own, 64 of 96, 384 of 512); "
        "the scheduler packs 1-GPU replicas, so a gang of every node is the one that makes every replica move",
    )
    p.add_argument("--no-restore", action="store_true", help="leave the cluster down at the end (no make up)")
    p.add_argument("--no-placement", action="store_true", help="skip the gangs placed with and without the topology")
    p.add_argument("--out", type=Path, default=ROOT / ".state" / "bench-scale")
    a = p.parse_args(argv)
    names = [n for n in a.scales.split(",") if n]
    if any(n not in SCALES for n in names):
        p.error(f"unknown scales {[n for n in names if n not in SCALES]}: of {', '.join(SCALES)}")
    scales = [SCALES[n] for n in names]
    if a.gang_nodes is not None:
        too_big = [x.name for x in scales if not 1 <= a.gang_nodes <= x.nodes]
        if too_big:
            p.error(f"--gang-nodes {a.gang_nodes} does not fit {', '.join(too_big)}")
        scales = [dataclasses.replace(x, gang_nodes=a.gang_nodes) for x in scales]
    paths = [x for x in a.paths.split(",") if x]
    unknown = [x for x in paths if x not in flip.PATHS]
    if unknown:
        p.error(f"unknown paths {unknown}: of {', '.join(flip.PATHS)}")

    bin_dir = Path(
        subprocess.run([str(ROOT / "tools" / "bin-dir.sh")], capture_output=True, text=True, check=True).stdout.strip()
    )
    needed = ("kwokctl", "kube-apiserver", "pulumi", "gpucluster-virtual-node", "kube-state-metrics")
    missing = [t for t in needed if not (bin_dir / t).exists()]
    if missing or not Path("/usr/bin/prometheus").exists():
        print(f"scale_flip: skipped: not built or installed: {missing or ['prometheus']} (make tools debian-deps)")
        return 0

    results: list[ScaleResult] = []
    t0 = time.monotonic()
    try:
        print("scale_flip: make down (the running cluster) ...", flush=True)
        down = make("down", {}, DOWN_TIMEOUT)
        if not down.ok:
            print(f"scale_flip: make down failed:\n{down.tail}", file=sys.stderr)
            return 1
        for scale in scales:
            results.append(run_scale(scale, paths, a.train_for, a.out, placement=not a.no_placement))
            print("\n" + results[-1].report() + "\n", flush=True)
    finally:
        if not a.no_restore:
            print("scale_flip: bringing the local cluster back (make down && make up) ...", flush=True)
            restored = make("down", {}, DOWN_TIMEOUT)
            if restored.ok:
                restored = make("up", {}, RESTORE_TIMEOUT)
            if not restored.ok:
                print(f"scale_flip: the local cluster did not come back:\n{restored.tail}", file=sys.stderr)
    a.out.mkdir(parents=True, exist_ok=True)
    report = "\n\n".join(r.report() for r in results)
    (a.out / "report.txt").write_text(report + "\n")
    print(f"flip at production scale (fake provider boot {os.environ.get('GPUCLUSTER_FAKE_BOOT_SECONDS', '5')} s)")
    print(report)
    print(f"total {time.monotonic() - t0:.0f} s; timelines, charts and report.txt: {a.out}")
    return 1 if any(r.stopped for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
