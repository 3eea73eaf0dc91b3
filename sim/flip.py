"""One full flip on the simulated cluster: training takes every GPU, inference makes room, and comes back.

The scenario runs on ``make up``'s cluster with the stack's daemons as its pods on the real node: the virtual node
and its provider service bursting to the fake GPU cloud (``sim/outside.py``), the descheduler, the
make-before-break AdmissionCheck controller and the taint controller (reading kube-state-metrics through
Prometheus). It narrates each step, samples the cluster once a second into a
:class:`timeline.Timeline`, and leaves a CSV, a PNG chart and the figures (JSON) in ``--out``. Three paths:

``make-before-break`` (the local stack's own):

1. the inference service runs its replicas in-cluster; the virtual node carries the burst taint;
2. a training Job asking for every GPU is submitted to Kueue; its quota is reserved and the check holds it;
3. the controller reserves the gang's nodes and rolls the inference Deployment onto the virtual node: the
   replacements start on rented GPUs first, the replicas they replace go once they are Ready;
4. the check goes Ready: training is admitted and runs on GPUs nothing uses (nothing is preempted);
5. training finishes; the reservations go; the Deployment comes home the same way, a replica on a rented GPU
   leaving only once its in-cluster replacement is Ready;
6. the external instances are gone.

``preempt-then-burst`` (the path without the check, which the check falls back to): the make-before-break
controller answers the check at once (``maxHold`` 1ms: a copy of its Deployment with that setting replaces it, see
:func:`answer_at_once`), so training is admitted and its pods
preempt the inference replicas; the taint controller sees no headroom and inference Pending and removes the
burst taint; the replicas land on the virtual node; once training is done the taint comes back (NoSchedule)
and the descheduler evicts the external replicas a few at a time, PDB permitting.

``NoExecute``: the same with what the design forbids for the flip-back, a NoExecute taint that evicts every
external replica at once: the baseline ``make bench`` prints beside the others.

Every service of ``gpucluster:inferenceServices`` takes part: the desired count is the sum of their replicas, and
the sampler counts the pods of all of them (the ``gpucluster.io/workload=inference`` label every InferenceService
pod carries). The gang is ``--gang-nodes`` pods of a whole node each, every node of the first flavor unless told
otherwise; a gang that leaves in-cluster room for every replica it displaces lets them reschedule in-cluster, and
the preempt-then-burst path then runs without the taint being removed. ``--timeout-scale`` multiplies every step's
timeout (the scale bench, ``benchmarks/scale_flip.py``, sets it from the cluster's size).

Usage: ``python sim/flip.py [--path make-before-break|preempt-then-burst|NoExecute] [--out DIR] ...`` (``--help``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from contract.registry import MAKE_BEFORE_BREAK as MAKE_BEFORE_BREAK_SPEC  # noqa: E402
from sim import controllers as sim_controllers  # noqa: E402
from sim import deployed as sim_deployed  # noqa: E402
from sim import load as sim_load  # noqa: E402
from sim import outside as sim_outside  # noqa: E402
from sim import processes as sim_daemons  # noqa: E402 (run as a script: the repository first on the path)
from sim import timeline  # noqa: E402
from sim.flip_cluster import (  # noqa: E402 (what the cycle reads and submits; callers take it from here too)
    INFERENCE_POD_SELECTOR,
    SIM_ANNOTATION_READY_AFTER,
    TRAINING_JOB,
    Sampler,
    ScenarioError,
    Service,
    Setup,
    burst_taint,
    displaced_fit_in_cluster,
    fake_cloud_stats,
    gang_size,
    kget,
    of_services,
    pod_ready,
    preemptions,
    say,
    set_taint,
    setup_from_stack,
    training_job,
    wait,
    workload_state,
)

MAKE_BEFORE_BREAK = "make-before-break"
PREEMPT = "preempt-then-burst"
NO_EXECUTE = "NoExecute"
PATHS = (MAKE_BEFORE_BREAK, PREEMPT, NO_EXECUTE)
#: What callers take from here: the cycle's own names, and what it reads and submits (sim/flip_cluster.py).
__all__ = [
    "ANSWER_AT_ONCE",
    "INFERENCE_POD_SELECTOR",
    "LOAD_RATE",
    "MAKE_BEFORE_BREAK",
    "MBB_CONTROLLER",
    "NO_EXECUTE",
    "PATHS",
    "PREEMPT",
    "SIM_ANNOTATION_READY_AFTER",
    "TRAINING_JOB",
    "LoadStep",
    "Options",
    "Sampler",
    "ScenarioError",
    "Service",
    "Setup",
    "answer_at_once",
    "burst_taint",
    "displaced_fit_in_cluster",
    "fake_cloud_stats",
    "gang_size",
    "job_done",
    "kget",
    "main",
    "of_services",
    "pod_ready",
    "preemptions",
    "run_cycle",
    "say",
    "services_text",
    "set_taint",
    "setup_from_stack",
    "timeline",
    "training_job",
    "wait",
    "workload_state",
    "write_outputs",
]

#: Requests a second the flip sends through the Service over its cycle (make bench, make demo).
LOAD_RATE = 20
#: Laid over the make-before-break controllers' settings for the other paths: the check goes Ready at once.
ANSWER_AT_ONCE = json.dumps({"maxHold": "1ms", "nodeGrace": "0.5ms"})
#: The make-before-break controller's name in the registry.
MBB_CONTROLLER = MAKE_BEFORE_BREAK_SPEC.name


@dataclass(frozen=True)
class LoadStep:
    rate: int  # requests a second added
    seconds: float  # how long, at least until every replica the HPA asks for is Ready


@dataclass(frozen=True)
class Options:
    path: str = MAKE_BEFORE_BREAK
    train_for: str = "60s"
    boot_seconds: float = 5.0
    timeout: float = 600.0
    out: Path = ROOT / ".state" / "flip"
    quiet: bool = False
    during: Callable[[str, Sampler], None] | None = None  # a hook per phase (chaos injects faults here)
    #: The gang's pods, a whole node each; None: every node of the first flavor (the local stack's 4).
    gang_nodes: int | None = None
    #: Multiplies ``timeout`` for every step: a larger cluster takes longer to schedule, roll and sample.
    timeout_scale: float = 1.0
    #: Requests a second sent through the first InferenceService's Service for the whole cycle (vegeta); 0: none.
    load_rate: int = 0
    #: More requests a second on top, from the moment every training pod runs (the replicas rented, on the
    #: make-before-break path) for a while: the HPA should scale the service out on rented GPUs, then back.
    load_step: LoadStep | None = None

    @property
    def step_timeout(self) -> float:
        return self.timeout * self.timeout_scale


def answer_at_once(on: bool) -> None:
    """The make-before-break controller answering the check at once (``on``), or as deployed again: its Deployment
    is replaced by a variant with the settings laid over (``sim/deployed.py``)."""
    config = sim_daemons.stack_config()
    variant = sim_deployed.Variant(
        sim_deployed.controller(config, MBB_CONTROLLER), "answer-at-once", json.loads(ANSWER_AT_ONCE)
    )
    if on:
        variant.start()
    else:
        variant.stop()


def run_cycle(opts: Options) -> tuple[timeline.Timeline, timeline.Figures]:
    if opts.path not in PATHS:
        raise ScenarioError(f"unknown path {opts.path!r}: one of {', '.join(PATHS)}")
    s = setup_from_stack()
    if opts.path == MAKE_BEFORE_BREAK and not s.make_before_break:
        raise ScenarioError("the local stack leaves gpucluster:makeBeforeBreak off: no make-before-break path to run")
    registry = sim_daemons.registry()
    q = opts.quiet
    missing = [n for n, d in registry.items() if not d.running()]
    if missing:
        raise ScenarioError(f"daemons not running: {missing} (start them: python sim/processes.py start)")
    config = sim_daemons.stack_config()
    if not sim_deployed.virtual_node_registered(config):
        raise ScenarioError("the virtual node's pod is not running or its Node is not Ready (make up starts it)")
    effect = "NoExecute" if opts.path == NO_EXECUTE else "NoSchedule"
    gang = gang_size(s, opts.gang_nodes)
    timeout = opts.step_timeout
    tl = timeline.Timeline(
        desired_replicas=s.replicas, boot_seconds=opts.boot_seconds, taint_effect=effect, path=opts.path
    )
    t0 = time.monotonic()
    wall0 = time.time()
    sampler = Sampler(s, tl, t0)

    def phase(name: str) -> None:
        if opts.during:
            opts.during(name, sampler)

    def until(what: str, check: Callable[[timeline.Sample], bool], interval: float = 0.2) -> None:
        wait(what, lambda: (x := sampler.latest) is not None and check(x), timeout, interval)

    sim_daemons.kubectl("delete", "job", TRAINING_JOB, "-n", s.training_ns, "--ignore-not-found", "--wait=true")
    detour = opts.path != MAKE_BEFORE_BREAK and s.make_before_break
    if detour:
        say("0. the make-before-break controllers answer the check at once (maxHold 1ms): today's path", q)
        answer_at_once(True)
    say(f"1. {s.replicas} replicas of {services_text(s)} should run in-cluster; {s.node} tainted", q)
    wait(
        f"{s.replicas} Ready in-cluster replicas and the burst taint on {s.node}",
        lambda: (x := sampler.take()).ready_in_cluster == s.replicas and x.ready_external == 0 and x.taint,
        timeout=timeout,
    )
    load = _start_load(s, opts, wall0)
    steps: list[sim_load.Request] = []
    sampler.start()
    try:
        share = "every in-cluster GPU" if gang == s.nodes else f"{gang} of {s.nodes} nodes"
        say(f"2. submitting {TRAINING_JOB}: {gang} pods x {s.gpus_per_node} GPUs, {share}", q)
        tl.mark(sampler.now(), "submitted")
        sim_daemons.kubectl("apply", "-f", "-", input=json.dumps(training_job(s, opts.train_for, gang)))
        phase("submitted")
        until("the training Workload's quota to be reserved", lambda x: x.workload != "")
        tl.mark(sampler.now(), "quota_reserved")
        if opts.path == MAKE_BEFORE_BREAK:
            _make_room(s, tl, sampler, phase=phase, until=until, q=q)
        else:
            _preempt_then_burst(s, tl, sampler, phase=phase, until=until, q=q, gang=gang)
        # Every pod started: Running, or already done when a short run's first pods finish before its last start.
        until(
            f"all {gang} training pods Running",
            lambda x: x.training_running + sampler.training_succeeded >= gang,
        )
        tl.mark(sampler.now(), "training_running")
        done = sampler.training_succeeded
        say(f"   {gang} training pods Running" + (f" ({done} of them already done)" if done else ""), q)
        phase("training_running")
        if opts.load_step is not None:
            steps.extend(_load_step(s, opts, opts.load_step, tl=tl, sampler=sampler, until=until))
        if opts.path == NO_EXECUTE:
            # The baseline: the taint controller refuses NoExecute, so it is stopped and the taint set by hand.
            sim_controllers.controller("taint-controller").stop()
        wait(
            "training to finish",
            lambda: (x := sampler.latest) is not None and x.training_running == 0 and job_done(s),
            timeout,
            0.5,
        )
        tl.mark(sampler.now(), "training_done")
        say("5. training finished: in-cluster GPUs are free again", q)
        phase("training_done")
        if opts.path == NO_EXECUTE:
            time.sleep(s.hold_add_seconds)
            set_taint(s, "NoExecute")
        if opts.path != MAKE_BEFORE_BREAK:
            until(f"the burst taint ({effect}) back on {s.node}", lambda x: x.taint == effect)
            tl.mark(sampler.now(), "taint_added")
            say(f"6. {effect} taint added; replicas return in-cluster", q)
            phase("taint_added")
        else:
            say("6. the reservations go; the Deployment comes home, each replica replaced before it leaves", q)
        wait(
            "every replica Ready in-cluster, none on the virtual node",
            lambda: (
                (x := sampler.latest) is not None
                and x.ready_in_cluster == s.replicas
                and not any(p["spec"].get("nodeName") == s.node for p in sampler.latest_pods)
            ),
            timeout,
            0.5,
        )
        tl.mark(sampler.now(), "returned")
        say(f"   all {s.replicas} replicas back in-cluster", q)
        phase("returned")
        until("the external instances to be gone", lambda x: x.external_instances == 0, 0.5)
        tl.mark(sampler.now(), "external_gone")
        say("7. no external instance left: rented GPUs are paid for only while the cluster was full", q)
        time.sleep(2)
    finally:
        sampler.stop()
        if load is not None:
            requests = load.stop() + steps
            tl.requests = sim_load.per_second(requests, wall0)
            tl.request_figures = sim_load.request_figures(requests)
        try:
            if opts.path == NO_EXECUTE:
                set_taint(s, "NoSchedule")
                sim_controllers.controller("taint-controller").start()
            sim_daemons.kubectl(
                "delete", "job", TRAINING_JOB, "-n", s.training_ns, "--ignore-not-found", "--wait=false"
            )
        finally:  # whatever failed above, make-before-break answers as deployed again
            if detour:
                answer_at_once(False)
    tl.inference_preemptions = sum(preemptions(ns, wall0) for ns in s.inference_namespaces)
    return tl, timeline.figures(tl)


def _start_load(s: Setup, opts: Options, wall0: float) -> sim_load.Load | None:
    """vegeta at ``opts.load_rate`` a second through the first InferenceService's Service (sim/serving.py)."""
    if not opts.load_rate:
        return None
    ports = sim_daemons.service_ports(sim_daemons.stack_config())
    if not ports:
        raise ScenarioError("the stack serves nothing: no Service to send requests through")
    name, port = next(iter(ports.items()))
    vegeta = str(sim_daemons.tools_bin() / "vegeta")
    load = sim_load.Load(vegeta, f"http://127.0.0.1:{port}/generate", opts.load_rate, opts.out / f"load-{opts.path}")
    say(f"   {opts.load_rate} requests a second through {name}'s Service for the whole cycle", opts.quiet)
    load.start()
    return load


def _load_step(
    s: Setup,
    opts: Options,
    step: LoadStep,
    *,
    tl: timeline.Timeline,
    sampler: Sampler,
    until: Callable[[str, Callable[[timeline.Sample], bool]], None],
) -> list[sim_load.Request]:
    """``step.rate`` more requests a second for ``step.seconds`` (and until the HPA's new replicas are Ready)."""
    name, port = next(iter(sim_daemons.service_ports(sim_daemons.stack_config()).items()))
    vegeta = str(sim_daemons.tools_bin() / "vegeta")
    extra = sim_load.Load(vegeta, f"http://127.0.0.1:{port}/generate", step.rate, opts.out / f"load-step-{opts.path}")
    base = sampler.latest.desired if sampler.latest is not None and sampler.latest.desired else s.replicas
    say(f"3b. load step: {step.rate} more requests a second through {name}'s Service for {step.seconds:g}s", opts.quiet)
    tl.load_step_rate = step.rate
    started = sampler.now()
    tl.mark(started, "load_step", f"+{step.rate}/s")
    extra.start()
    try:
        until("the HPA to raise the replica count", lambda x: x.desired > base)
        until("every replica the HPA asked for Ready", lambda x: x.ready >= x.desired > base)
        say(f"   the HPA scaled {name} from {base} to {sampler.latest.desired if sampler.latest else '?'}", opts.quiet)
        time.sleep(max(0.0, step.seconds - (sampler.now() - started)))
    finally:
        requests = extra.stop()
    tl.mark(sampler.now(), "load_fell")
    return requests


def services_text(s: Setup) -> str:
    """``inference/sd-serve`` for one service; ``4 services (inference/sd-serve, ...)`` for several."""
    names = [f"{x.namespace}/{x.name}" for x in s.services] or [f"{s.inference_ns}/{s.service}"]
    return names[0] if len(names) == 1 else f"{len(names)} services ({', '.join(names)})"


Until = Callable[[str, Callable[[timeline.Sample], bool]], None]


def _make_room(
    s: Setup, tl: timeline.Timeline, sampler: Sampler, *, phase: Callable[[str], None], until: Until, q: bool
) -> None:
    say("3. the check holds the gang: its nodes reserved, inference rolling onto the virtual node first", q)
    phase("making_room")
    until("the check Ready and the training admitted", lambda x: x.workload in ("admitted", "finished"))
    tl.mark(sampler.now(), "admitted")
    if sampler.latest is not None and sampler.latest.ready_external >= s.replicas:
        tl.mark(sampler.now(), "flipped_out")
    latest = sampler.latest
    say(f"4. room made: {latest.ready_external if latest else '?'} replicas Ready on rented GPUs; admitted", q)
    phase("flipped_out")


def _preempt_then_burst(
    s: Setup,
    tl: timeline.Timeline,
    sampler: Sampler,
    *,
    phase: Callable[[str], None],
    until: Until,
    q: bool,
    gang: int | None = None,
) -> None:
    """Training preempts the replicas in its way. When the nodes the gang leaves cannot hold them (the local stack:
    the gang takes every node), the taint controller removes the taint and they run on the virtual node; when they
    can, they reschedule in-cluster, and a gang that fits on idle nodes preempts nothing at all."""
    gang = s.nodes if gang is None else gang
    if displaced_fit_in_cluster(s, gang):
        _preempt_in_cluster(s, tl, sampler, phase=phase, until=until, q=q, gang=gang)
        return
    until("the first inference replica to be preempted", lambda x: x.ready_in_cluster < s.replicas)
    tl.mark(sampler.now(), "preempted")
    if sampler.latest is not None and sampler.latest.workload in ("admitted", "finished"):
        tl.mark(sampler.now(), "admitted")
    say("3. training preempts inference: replicas Pending, no in-cluster GPU left", q)
    phase("preempted")
    until("the training admitted", lambda x: x.workload in ("admitted", "finished"))
    tl.mark(sampler.now(), "admitted")
    until("the taint controller to remove the burst taint", lambda x: not x.taint)
    tl.mark(sampler.now(), "taint_removed")
    say(f"   taint removed from {s.node}: pending inference may burst out", q)
    phase("taint_removed")
    until("every displaced replica Ready on the virtual node", lambda x: x.ready >= s.replicas)
    tl.mark(sampler.now(), "flipped_out")
    say(f"4. {sampler.latest.ready_external if sampler.latest else '?'} replicas Ready on rented GPUs", q)
    phase("flipped_out")


def _preempt_in_cluster(
    s: Setup,
    tl: timeline.Timeline,
    sampler: Sampler,
    *,
    phase: Callable[[str], None],
    until: Until,
    q: bool,
    gang: int,
) -> None:
    """Preempt-then-burst where the cluster keeps room: whatever the gang preempts reschedules on its other nodes."""
    say("3. training admitted: replicas in its way are preempted and reschedule on the nodes the gang left", q)
    phase("preempted")
    until("the training admitted", lambda x: x.workload in ("admitted", "finished"))
    tl.mark(sampler.now(), "admitted")
    until(
        f"all {gang} training pods Running and every replica Ready",
        lambda x: x.training_running == gang and x.ready >= s.replicas,
    )
    reserved = tl.first("quota_reserved")
    since = reserved.t if reserved else 0.0
    dip = next((x for x in list(tl.samples) if x.t >= since and x.ready < s.replicas), None)
    if dip is not None:
        tl.mark(dip.t, "preempted")
        tl.mark(sampler.now(), "flipped_out")
    latest = sampler.latest
    moved = "some replicas preempted and rescheduled" if dip else "the gang fit on idle nodes: nothing preempted"
    say(f"4. {latest.ready_in_cluster if latest else '?'} replicas Ready in-cluster, none had to burst ({moved})", q)
    phase("flipped_out")


def job_done(s: Setup) -> bool:
    job = kget("job", TRAINING_JOB, "-n", s.training_ns)
    return any(
        c.get("type") in ("Complete", "SuccessCriteriaMet") and c.get("status") == "True"
        for c in job.get("status", {}).get("conditions") or []
    )


def write_outputs(
    tl: timeline.Timeline, f: timeline.Figures, out: Path, title: str, stem: str | None = None
) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    stem = stem or f"flip-{(tl.path or tl.taint_effect).lower()}"
    files = {
        "csv": timeline.write_csv(tl, out / f"{stem}.csv"),
        "png": timeline.chart(tl, out / f"{stem}.png", title),
        "json": out / f"{stem}.json",
    }
    files["json"].write_text(json.dumps({"figures": asdict(f), "marks": [asdict(m) for m in tl.marks]}, indent=2))
    return files


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="sim/flip.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--path", choices=PATHS, default=MAKE_BEFORE_BREAK, help="how the cycle runs (see above)")
    p.add_argument("--train-for", default="60s", help="how long the training Job runs (Go duration)")
    p.add_argument("--timeout", type=float, default=600, help="seconds any one step may take")
    p.add_argument(
        "--timeout-scale", type=float, default=1.0, help="multiplies --timeout for every step (large clusters)"
    )
    p.add_argument("--gang-nodes", type=int, help="the gang's whole-node pods (default: every node of the flavor)")
    p.add_argument("--out", type=Path, default=ROOT / ".state" / "flip", help="where the CSV, PNG and JSON go")
    p.add_argument("--quiet", action="store_true", help="no narration")
    p.add_argument(
        "--load-rate", type=int, default=LOAD_RATE, help="requests a second through the Service, whole cycle (0: none)"
    )
    p.add_argument(
        "--load-step",
        metavar="RATE:SECONDS",
        help="RATE more requests a second once training runs, for SECONDS (the HPA scales out on rented GPUs)",
    )
    a = p.parse_args(argv)
    step = None
    if a.load_step:
        rate, _, seconds = a.load_step.partition(":")
        if not rate.isdigit() or not seconds.replace(".", "", 1).isdigit() or int(rate) < 1:
            p.error(f"--load-step {a.load_step!r}: expected RATE:SECONDS such as 24:60")
        if not a.load_rate:
            p.error("--load-step needs --load-rate above 0: the step is added to it")
        step = LoadStep(int(rate), float(seconds))
    boot = float(os.environ.get("GPUCLUSTER_FAKE_BOOT_SECONDS", sim_outside.FAKE_CLOUD_DEFAULTS["boot-seconds"]))
    opts = Options(
        path=a.path,
        train_for=a.train_for,
        boot_seconds=boot,
        timeout=a.timeout,
        out=a.out,
        quiet=a.quiet,
        gang_nodes=a.gang_nodes,
        timeout_scale=a.timeout_scale,
        load_rate=a.load_rate,
        load_step=step,
    )
    try:
        tl, f = run_cycle(opts)
    except (ScenarioError, sim_daemons.DaemonError, sim_load.LoadError) as e:
        print(f"sim/flip.py: error: {e}", file=sys.stderr)
        return 1
    files = write_outputs(tl, f, a.out, f"One flip: {a.path}")
    print(timeline.side_by_side([f]))
    for kind, path in files.items():
        print(f"{kind}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
