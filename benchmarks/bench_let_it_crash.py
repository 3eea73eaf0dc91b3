"""Let it crash, measured on the simulated cluster: checkpoint interval and restart path against ETTR.

Three training jobs of the same work run side by side on the simulated cluster (``make up``, idempotent), each a
JobSet built by ``components/training`` and played by ``sim/fake_trainer.py``; failures of the program are
injected into each at the same rate (one per ``--mtbf`` seconds of the gang running, exponential; the same seeded
sequence for all three, so they differ by their path, not their luck):

- ``young-daly``: checkpoints at the Young/Daly interval for that rate and write time, restarts in place;
- ``fixed-2h``: checkpoints at a fixed interval that is to this MTBF what 2 h is to Krea's 8 h (a quarter of it),
  restarts in place;
- ``requeue``: the Young/Daly interval, but a failure fails the JobSet (``maxRestarts: 0``) and the job is submitted
  again: it gives its nodes up and queues for them again (Kueue admission, make-before-break's room).

Time is compressed: the default MTBF of 120 s and write time of 0.25 s keep Krea's write-to-MTBF ratio (30 s to
8 h is 0.1 %; 0.25 s to 120 s is 0.2 %). For each job: interruptions, restarts in place and requeues, the mean time
from a failure to the gang running again, the measured ETTR (work done / wall time from the gang's first start to
the end; a requeued job's waits to run again count) and
the ETTR the first-order model predicts for that interval, write time, MTBF and the measured recovery
(``contract.storage_settings.predicted_ettr``). Then Krea's figures once: 1 TB in 30 s and an 8 h MTBF.

Nothing is asserted: these are measurements. Figures also go to ``.state/bench-let-it-crash/figures.json``.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from components.config import load_stack_file  # noqa: E402 (run as a script: the repository first on the path)
from components.training.manifest import Interval, job_context, jobset_manifest  # noqa: E402
from components.training.spec import parse_spec  # noqa: E402
from contract.storage_settings import checkpoint_interval_seconds, predicted_ettr  # noqa: E402
from daemons.toolkit.kube import load_kube_config  # noqa: E402
from sim.fake_dcgm import admin as fake_dcgm_admin  # noqa: E402
from sim.fake_trainer import (  # noqa: E402
    LOGICAL_JOB_ANNOTATION,
    WORK_ANNOTATION,
    WRITE_ANNOTATION,
    FakeTrainer,
    fail_pod,
    gang_attempt,
)

STACK = ROOT / "stacks" / "Pulumi.local.yaml"
KUBECONFIG = ROOT / ".state" / "sim" / "kubeconfig"
OUT = ROOT / ".state" / "bench-let-it-crash"
NAMESPACE = "team-foundation"
POLL_S = 0.25


@dataclass
class Run:
    name: str
    interval: int
    requeue: bool
    rng: random.Random
    mtbf: float
    submitted_at: float = 0.0
    generation: int = 0
    #: Running seconds left until the next injected failure.
    budget: float = 0.0
    failures: int = 0
    restarts_in_place: int = 0
    requeues: int = 0
    last_attempt: str | None = None
    last_tick: float | None = None
    finished_at: float | None = None
    notes: list[str] = field(default_factory=list)
    #: Inject hangs instead of crashes: a rank stops inside a collective, every pod stays Running.
    hangs: bool = False
    #: The job's own stallAfter (unset: the stack's).
    stall_after: str | None = None
    hung_at: list[float] = field(default_factory=list)

    @property
    def jobset(self) -> str:
        return self.name if self.generation == 0 else f"{self.name}-r{self.generation}"

    def draw(self) -> None:
        self.budget = self.rng.expovariate(1.0 / self.mtbf)


def api_client() -> Any:
    return load_kube_config(str(KUBECONFIG))


def manifest(run: Run, work: float, write: float) -> dict[str, Any]:
    stack = load_stack_file(STACK)
    extra = {} if run.stall_after is None else {"stallAfter": run.stall_after}
    spec = parse_spec(
        {
            **extra,
            "name": run.jobset,
            "team": "foundation",
            "image": "trainer:bench",
            "command": ["train"],
            "nodes": 1,
            "gpusPerNode": 8,
            "priority": "research-default",
            "checkpointWriteSeconds": write,
            "maxRestartsPerHour": 60,
            "maxRestarts": 0 if run.requeue else 10_000,
            "podAnnotations": {
                WORK_ANNOTATION: str(work),
                WRITE_ANNOTATION: str(write),
                LOGICAL_JOB_ANNOTATION: run.name,
                # kwok ends a Job's pod Succeeded after this; the fake trainer ends it sooner.
                "sim.gpucluster.io/run-for": "1000h",
            },
        }
    )
    interval = Interval(run.interval, "stack", write, run.mtbf, "bench")
    return jobset_manifest(spec, job_context(spec, stack, interval))


def submit(api: Any, run: Run, work: float, write: float) -> None:
    from kubernetes import client  # noqa: PLC0415

    client.CustomObjectsApi(api).create_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", NAMESPACE, "jobsets", manifest(run, work, write)
    )


def jobset_of(api: Any, name: str) -> dict[str, Any] | None:
    from kubernetes import client  # noqa: PLC0415
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

    try:
        obj: Any = client.CustomObjectsApi(api).get_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", NAMESPACE, "jobsets", name
        )
        return dict(obj)
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def condition(js: dict[str, Any], kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True" for c in (js.get("status") or {}).get("conditions") or []
    )


def clean(api: Any, names: Sequence[str]) -> None:
    """Delete the bench's JobSets (foreground: their pods go too) and wait until they are gone."""
    subprocess.run(
        [
            "kubectl",
            "--kubeconfig",
            str(KUBECONFIG),
            "delete",
            "jobsets",
            "-n",
            NAMESPACE,
            "--ignore-not-found",
            "--wait=true",
            "-l",
            "gpucluster.io/training-job",
            "--cascade=foreground",
            "--timeout=120s",
        ],
        check=False,
        capture_output=True,
    )
    del names


def step_run(api: Any, run: Run, trainer: FakeTrainer, now: float, *, work: float, write: float) -> None:
    if run.finished_at is not None:
        return
    progress = trainer.jobs.get(run.name)
    if progress is not None and progress.done:
        run.finished_at = progress.done_at
        return
    js = jobset_of(api, run.jobset)
    if js is None:
        return
    if condition(js, "Failed"):
        if run.requeue:
            run.requeues += 1
            run.generation += 1
            submit(api, run, work, write)
        else:
            run.notes.append(f"{run.jobset} failed: {js['status']}")
            run.finished_at = now
        return
    from kubernetes import client  # noqa: PLC0415

    pods = api.sanitize_for_serialization(
        client.CoreV1Api(api)
        .list_namespaced_pod(NAMESPACE, label_selector=f"jobset.sigs.k8s.io/jobset-name={run.jobset}")
        .items
    )
    attempt = gang_attempt(js, pods)
    if attempt is not None and attempt != run.last_attempt and run.last_attempt is not None and not run.requeue:
        run.restarts_in_place += 1
    if attempt is not None:
        hung = progress is not None and progress.hung
        if run.last_tick is not None and attempt == run.last_attempt and not hung:
            run.budget -= now - run.last_tick
        run.last_tick = now
        run.last_attempt = attempt
        if run.budget <= 0 and run.hangs and progress is not None:
            progress.hang()
            run.hung_at.append(now)
            run.failures += 1
            run.draw()
        elif run.budget <= 0 and not run.hangs:
            victim = run.rng.choice(
                sorted(p["metadata"]["name"] for p in pods if p["status"].get("phase") == "Running")
            )
            fail_pod(api, NAMESPACE, victim)
            run.failures += 1
            run.draw()
            run.last_tick = None
    else:
        run.last_tick = None


def play(
    api: Any, runs: Sequence[Run], *, work: float, write: float, timeout: float, until: Callable[[], bool]
) -> FakeTrainer:
    """Submit ``runs`` (after cleaning up) and play them until ``until()`` or ``timeout``: the program's load reaches
    the GPUs (the fake dcgm-exporter) and its progress the claim, as a job honouring the progress report would (the
    stall detector judges these gangs too); failures or hangs are injected as each run draws them."""
    clean(api, [r.name for r in runs])
    trainer = FakeTrainer(
        api, NAMESPACE, time.time, load=lambda pods: fake_dcgm_admin("/admin/load", {"pods": pods}), progress_every=2.0
    )
    for run in runs:
        run.draw()
        run.submitted_at = time.time()
        submit(api, run, work, write)
    deadline = time.time() + timeout
    try:
        while time.time() < deadline and not until():
            trainer.step()
            now = time.time()
            for run in runs:
                step_run(api, run, trainer, now, work=work, write=write)
            time.sleep(POLL_S)
    finally:
        fake_dcgm_admin("/admin/reset")
    return trainer


def measure(args: argparse.Namespace) -> dict[str, Any]:
    api = api_client()
    mtbf, write, work = args.mtbf, args.write, args.work
    optimum = max(1, round(checkpoint_interval_seconds(write, mtbf)))
    runs = [
        # One failure sequence for all three (the same seed): the paths differ, the luck does not.
        Run("crash-young-daly", optimum, False, random.Random(args.seed), mtbf),
        Run("crash-fixed-2h", max(1, round(mtbf / 4)), False, random.Random(args.seed), mtbf),
        Run("crash-requeue", optimum, True, random.Random(args.seed), mtbf),
    ]
    trainer = play(
        api,
        runs,
        work=work,
        write=write,
        timeout=args.timeout,
        until=lambda: all(r.finished_at is not None for r in runs),
    )
    out: dict[str, Any] = {"mtbf_s": mtbf, "write_s": write, "work_s": work, "jobs": {}}
    for run in runs:
        progress = trainer.jobs.get(run.name)
        recovery = (
            [b - a for a, b in zip(progress.interrupted_at, progress.running_again_at, strict=False)]
            if progress
            else []
        )
        mean_recovery = sum(recovery) / len(recovery) if recovery else 0.0
        # From the gang's first start: the first queueing is the same for every path, not an interruption's cost.
        started = progress.started_at if progress and progress.started_at is not None else run.submitted_at
        wall = (run.finished_at or time.time()) - started
        measured = work / wall if run.finished_at is not None else None
        out["jobs"][run.name] = {
            "interval_s": run.interval,
            "interruptions": run.failures,
            "restarts_in_place": run.restarts_in_place,
            "requeues": run.requeues,
            "mean_recovery_s": round(mean_recovery, 2),
            "work_lost_s": round(sum(progress.lost), 1) if progress else None,
            "checkpoints": len(progress.checkpoints) if progress else 0,
            "wall_s": round(wall, 1),
            "measured_ettr": None if measured is None else round(measured, 3),
            "predicted_ettr": round(predicted_ettr(run.interval, write, mtbf, mean_recovery), 3),
            "notes": run.notes,
        }
    clean(api, [r.name for r in runs])
    return out


def table(out: dict[str, Any]) -> str:
    head = ("job", "interval", "interrupt.", "in place", "requeues", "recovery", "lost work", "ETTR", "predicted")
    rows = [head]
    for name, j in out["jobs"].items():
        ettr = "unfinished" if j["measured_ettr"] is None else f"{j['measured_ettr'] * 100:.1f} %"
        rows.append(
            (
                name.removeprefix("crash-"),
                f"{j['interval_s']} s",
                str(j["interruptions"]),
                str(j["restarts_in_place"]),
                str(j["requeues"]),
                f"{j['mean_recovery_s']:.1f} s",
                f"{j['work_lost_s']} s",
                ettr,
                f"{j['predicted_ettr'] * 100:.1f} %",
            )
        )
    return columns(rows)


def columns(rows: Sequence[Sequence[str]]) -> str:
    """``rows`` (the first the header) as left-aligned columns two spaces apart."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows)


def parse_run_arguments(doc: str, failure: str, argv: Sequence[str] | None) -> argparse.Namespace:
    """The arguments both simulated-cluster runs take (one ``failure`` injected per ``--mtbf``), after ``make up``
    unless ``--skip-up``."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--mtbf", type=float, default=120.0, help=f"seconds of running gang per injected {failure}")
    parser.add_argument("--write", type=float, default=0.25, help="seconds one checkpoint takes to write")
    parser.add_argument("--work", type=float, default=600.0, help="seconds of training work each job must do")
    parser.add_argument("--seed", type=int, default=15, help=f"seed of the {failure} times")
    parser.add_argument("--timeout", type=float, default=2400.0, help="give up after this many seconds")
    parser.add_argument("--skip-up", action="store_true", help="do not run make up first")
    args = parser.parse_args(argv)
    if not args.skip_up:
        subprocess.run(["make", "up"], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_run_arguments(__doc__, "failure", argv)
    krea = checkpoint_interval_seconds(30.0, 8 * 3600.0)
    print(f"Krea: 1 TB written in 30 s, an interruption every 8 h -> Young/Daly interval {krea / 60:.1f} min")
    out = measure(args)
    print(
        f"\nOne-node jobs of {args.work:.0f} s of work, a program failure every {args.mtbf:.0f} s of running "
        f"(exponential, seed {args.seed}), checkpoint write {args.write:g} s:\n"
    )
    print(table(out))
    out["krea_interval_min"] = round(krea / 60, 1)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "figures.json").write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
