"""The flip's timeline: one sample a second, the figures computed from it, and its chart.

A :class:`Sample` is what an operator would watch on a dashboard during the flip: inference replicas Ready
in-cluster and on the virtual node (external), inference pods Pending, training pods Running, whether the virtual
node carries the burst taint, and how many external instances (and GPUs) the providers are billing for. Marks
(:class:`Mark`) note the moments the scenario caused or observed: training submitted, its quota reserved, the
room made (make-before-break) or the first preemption, training admitted and Running, training finished, and so on.
A timeline's ``path`` names how the cycle ran: ``make-before-break`` (the AdmissionCheck moves serving first),
``preempt-then-burst`` (training preempts, the taint controller bursts, the descheduler brings replicas home) or
``NoExecute`` (the same with a NoExecute flip-back, the baseline).

:func:`figures` turns a timeline into the numbers ``make bench`` prints; :func:`write_csv` and :func:`chart` write
the files ``make demo`` leaves behind. Nothing here talks to a cluster, so it is unit-tested on hand-made timelines.
"""

from __future__ import annotations

import csv
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sim.load import RequestFigures, Second


@dataclass(frozen=True)
class Sample:
    t: float  # seconds since the scenario started
    ready_in_cluster: int
    ready_external: int
    pending: int
    training_running: int
    taint: str  # "" (no burst taint), "NoSchedule" or "NoExecute"
    external_instances: int
    external_gpus: int
    #: The training Workload: "" (none yet), "reserved" (quota reserved, not admitted), "admitted", "finished".
    workload: str = ""
    #: The services' Deployments' replica counts together (what their HPAs set); 0 when not read.
    desired: int = 0

    @property
    def ready(self) -> int:
        return self.ready_in_cluster + self.ready_external


@dataclass(frozen=True)
class Mark:
    t: float
    #: submitted, quota_reserved, preempted, taint_removed, admitted, flipped_out, training_running, load_step,
    #: load_fell, training_done, taint_added, returned, external_gone
    name: str
    detail: str = ""


@dataclass
class Timeline:
    desired_replicas: int
    boot_seconds: float  # the fake provider's boot time: not our overhead
    taint_effect: str  # what the flip-back used: NoSchedule (ours) or NoExecute (the baseline)
    samples: list[Sample] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    #: make-before-break, preempt-then-burst or NoExecute (the column header of ``make bench``).
    path: str = ""
    #: Inference pods the scheduler preempted during the cycle (its ``Preempted`` Events).
    inference_preemptions: int = 0
    #: The constant request rate through the Service over the cycle (sim/load.py), per second; empty without one.
    requests: list[Second] = field(default_factory=list)
    request_figures: RequestFigures | None = None
    #: Requests a second added from the ``load_step`` mark to the ``load_fell`` mark (0: no step).
    load_step_rate: int = 0

    def mark(self, t: float, name: str, detail: str = "") -> None:
        if self.first(name) is None:
            self.marks.append(Mark(t, name, detail))

    def first(self, name: str) -> Mark | None:
        return next((m for m in self.marks if m.name == name), None)


@dataclass(frozen=True)
class Figures:
    path: str
    taint_effect: str
    #: Room made: quota reserved -> check Ready (make-before-break), or first preemption -> every displaced
    #: replica Ready externally (the other paths).
    flip_out_seconds: float | None
    flip_out_overhead_seconds: float | None  # the same minus the provider's boot time: what we add
    taint_removal_seconds: float | None  # first preemption -> burst taint removed (the controller's hold + lag)
    placement_overhead_seconds: float | None  # taint removed -> all Ready externally, minus the boot time
    min_ready: int  # during the whole cycle
    min_ready_during_return: int  # from training done until every replica is back in-cluster
    seconds_below_desired: float
    training_admission_seconds: float | None  # quota reserved -> admitted
    training_running_seconds: float | None  # quota reserved -> every training pod Running
    flip_back_seconds: float | None  # training done -> every replica Ready in-cluster and none external
    external_gpu_seconds: float  # GPUs billed over the whole cycle
    external_gpu_seconds_after_return: float  # GPUs billed after in-cluster capacity came back
    inference_preemptions: int
    taint_changes: int
    taint_flaps: int  # changes beyond the two a cycle needs (remove once, add once)
    #: What the requests sent through the Service over the whole cycle met (sim/load.py); None without a load.
    requests: RequestFigures | None = None
    #: How the HPA answered a load step; None without one.
    hpa: HpaFigures | None = None

    def rows(self) -> list[tuple[str, str]]:
        def s(v: float | None) -> str:
            return "n/a" if v is None else f"{v:.1f} s"

        return [
            ("minimum Ready inference replicas, whole cycle", str(self.min_ready)),
            ("minimum Ready inference replicas, during the return", str(self.min_ready_during_return)),
            ("time below the desired replica count", s(self.seconds_below_desired)),
            ("inference pods preempted", str(self.inference_preemptions)),
            ("training: quota reserved -> admitted", s(self.training_admission_seconds)),
            ("training: quota reserved -> all pods Running", s(self.training_running_seconds)),
            ("flip-out: room made / displaced replicas Ready externally", s(self.flip_out_seconds)),
            ("flip-out overhead (minus the provider's boot time)", s(self.flip_out_overhead_seconds)),
            ("  of which: preemption -> taint removed", s(self.taint_removal_seconds)),
            ("  of which: scheduler, virtual node, provider service", s(self.placement_overhead_seconds)),
            ("flip-back: training done -> all replicas in-cluster", s(self.flip_back_seconds)),
            ("external GPU-seconds, whole cycle", f"{self.external_gpu_seconds:.0f}"),
            (
                "external GPU-seconds after in-cluster capacity returned",
                f"{self.external_gpu_seconds_after_return:.0f}",
            ),
            ("taint changes / flaps", f"{self.taint_changes} / {self.taint_flaps}"),
            *(self.requests.rows() if self.requests is not None else []),
            *(self.hpa.rows() if self.hpa is not None else []),
        ]


@dataclass(frozen=True)
class HpaFigures:
    """The HPA's answer to a load step taken while the replicas are rented."""

    step_rate: int
    base: int  # replicas desired before the step (minReplicas)
    max_desired: int
    scale_out_seconds: float | None  # step -> the HPA raised the replica count
    all_ready_seconds: float | None  # step -> every replica it asked for Ready
    max_ready_external: int  # replicas Ready on rented GPUs at once, most
    scale_back_seconds: float | None  # load fell -> back to ``base``

    def rows(self) -> list[tuple[str, str]]:
        def s(v: float | None) -> str:
            return "n/a" if v is None else f"{v:.1f} s"

        return [
            (f"HPA: load step (+{self.step_rate} req/s), replicas desired", f"{self.base} -> {self.max_desired}"),
            ("HPA: load step -> replica count raised", s(self.scale_out_seconds)),
            ("HPA: load step -> every replica asked for Ready", s(self.all_ready_seconds)),
            ("HPA: replicas Ready on rented GPUs, most", str(self.max_ready_external)),
            ("HPA: load fell -> back to minReplicas", s(self.scale_back_seconds)),
        ]


def hpa_figures(tl: Timeline) -> HpaFigures | None:
    step, fell = tl.first("load_step"), tl.first("load_fell")
    if step is None or not tl.samples:
        return None
    before = [x.desired for x in tl.samples if x.t <= step.t and x.desired]
    base = before[-1] if before else tl.desired_replicas
    during = [x for x in tl.samples if x.t >= step.t]
    top = max((x.desired for x in during), default=base)
    raised = next((x.t - step.t for x in during if x.desired > base), None)
    ready = next((x.t - step.t for x in during if top > base and x.desired == top and x.ready >= top), None)
    back = None
    if fell is not None:
        back = next((x.t - fell.t for x in tl.samples if x.t >= fell.t and 0 < x.desired <= base), None)
    return HpaFigures(
        step_rate=tl.load_step_rate,
        base=base,
        max_desired=top,
        scale_out_seconds=raised,
        all_ready_seconds=ready,
        max_ready_external=max((x.ready_external for x in during), default=0),
        scale_back_seconds=back,
    )


def _integrate(samples: Sequence[Sample], start: float, attr: str) -> float:
    """Left Riemann sum of ``attr`` over [start, end of the timeline]."""
    total = 0.0
    for a, b in itertools.pairwise(samples):
        if b.t <= start:
            continue
        lo = max(a.t, start)
        total += float(getattr(a, attr)) * (b.t - lo)
    return total


def _since(tl: Timeline, start: str, end: str) -> float | None:
    a, b = tl.first(start), tl.first(end)
    return b.t - a.t if a and b else None


def figures(tl: Timeline) -> Figures:
    samples = tl.samples
    if not samples:
        raise ValueError("the timeline has no samples")
    flipped = tl.first("flipped_out")
    done = tl.first("training_done")
    returned = tl.first("returned")

    removed = tl.first("taint_removed")
    if tl.first("preempted") is not None:
        flip_out = _since(tl, "preempted", "flipped_out")
    else:  # make-before-break: the room is made before anything is preempted
        flip_out = _since(tl, "quota_reserved", "admitted")
    removal = _since(tl, "preempted", "taint_removed")
    placement = max(0.0, flipped.t - removed.t - tl.boot_seconds) if removed and flipped else None
    overhead = max(0.0, flip_out - tl.boot_seconds) if flip_out is not None else None

    in_return = [s for s in samples if done and s.t >= done.t and (returned is None or s.t <= returned.t)]
    below = 0.0
    for a, b in itertools.pairwise(samples):
        if a.ready < tl.desired_replicas:
            below += b.t - a.t

    changes = sum(1 for a, b in itertools.pairwise(samples) if a.taint != b.taint)
    return Figures(
        path=tl.path or f"{tl.taint_effect} flip-back",
        taint_effect=tl.taint_effect,
        flip_out_seconds=flip_out,
        flip_out_overhead_seconds=overhead,
        taint_removal_seconds=removal,
        placement_overhead_seconds=placement,
        min_ready=min(s.ready for s in samples),
        min_ready_during_return=min((s.ready for s in in_return), default=min(s.ready for s in samples)),
        seconds_below_desired=below,
        training_admission_seconds=_since(tl, "quota_reserved", "admitted"),
        training_running_seconds=_since(tl, "quota_reserved", "training_running"),
        flip_back_seconds=returned.t - done.t if done and returned else None,
        external_gpu_seconds=_integrate(samples, samples[0].t, "external_gpus"),
        external_gpu_seconds_after_return=_integrate(samples, done.t, "external_gpus") if done else 0.0,
        inference_preemptions=tl.inference_preemptions,
        taint_changes=changes,
        taint_flaps=max(0, changes - 2),
        requests=tl.request_figures,
        hpa=hpa_figures(tl),
    )


def side_by_side(results: Iterable[Figures]) -> str:
    """A plain-text table, one column per run (make-before-break, preempt-then-burst, the NoExecute baseline)."""
    runs = list(results)
    rows = [dict(r.rows()) for r in runs]
    # every run's rows, in the order they first appear; a row a run lacks (an HPA step it did not take) is empty
    labels = list(dict.fromkeys(label for r in runs for label, _ in r.rows()))
    header = ["", *[r.path for r in runs]]
    table = [header, *[[label, *[rr.get(label, "") for rr in rows]] for label in labels]]
    widths = [max(len(row[c]) for row in table) for c in range(len(header))]
    return "\n".join("  ".join(cell.ljust(widths[c]) for c, cell in enumerate(row)).rstrip() for row in table)


def write_csv(tl: Timeline, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    names = [f.name for f in fields(Sample)]
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow([*names, "ready", "marks"])
        marks_at: dict[int, list[str]] = {}
        for m in tl.marks:
            nearest = min(range(len(tl.samples)), key=lambda i: abs(tl.samples[i].t - m.t)) if tl.samples else 0
            marks_at.setdefault(nearest, []).append(m.name)
        for i, s in enumerate(tl.samples):
            row = asdict(s)
            w.writerow([f"{row['t']:.1f}", *[row[n] for n in names[1:]], s.ready, ";".join(marks_at.get(i, []))])
    return path


def mark_levels(times: Sequence[float], min_gap: float) -> list[int]:
    """A label row for each mark (sorted by time) so that no two labels in a row sit closer than ``min_gap``: a mark
    goes to the lowest row whose last label is far enough, so labels of marks that fall together do not overprint."""
    last: list[float] = []
    levels = []
    for t in times:
        row = next((i for i, at in enumerate(last) if t - at >= min_gap), len(last))
        if row == len(last):
            last.append(t)
        else:
            last[row] = t
        levels.append(row)
    return levels


def chart(tl: Timeline, path: Path, title: str) -> Path:
    """Ready replicas in-cluster vs external, pending, training pods; the requests through the Service (per second
    sent and failed, p99 latency) when the cycle had a load; and the taint, over time, from the first event (PNG)."""
    import matplotlib  # noqa: PLC0415 (heavy; only the demo draws)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    t = [s.t for s in tl.samples]
    panels = 3 if tl.requests else 2
    ratios = [5, 2, 1] if tl.requests else [5, 1]
    fig, axes = plt.subplots(
        panels, 1, figsize=(11, 8 if tl.requests else 6), sharex=True, gridspec_kw={"height_ratios": ratios},
        constrained_layout=True,
    )  # fmt: skip
    ax, axt = axes[0], axes[-1]
    ax.stackplot(
        t,
        [s.ready_in_cluster for s in tl.samples],
        [s.ready_external for s in tl.samples],
        labels=["inference Ready in-cluster", "inference Ready external (rented GPUs)"],
        colors=["#2b8cbe", "#fdae61"],
        alpha=0.85,
        step="post",
    )
    ax.step(t, [s.pending for s in tl.samples], where="post", color="#d7191c", label="inference Pending")
    ax.step(t, [s.training_running for s in tl.samples], where="post", color="#1a9641", lw=2, label="training pods")
    ax.axhline(tl.desired_replicas, color="grey", ls=":", lw=1, label=f"desired replicas ({tl.desired_replicas})")
    top = max([tl.desired_replicas, *(s.pending for s in tl.samples), *(s.training_running for s in tl.samples)])
    start = max(0.0, min((m.t for m in tl.marks), default=0.0) - 3.0)
    end = max(t) if t else 1.0
    marks = sorted(tl.marks, key=lambda m: m.t)
    # Labels are level, one text line a row: a mark too close to the last label of a row (a label is about a sixth
    # of the chart wide) goes to the next row, so marks that fall together stay readable.
    levels = mark_levels([m.t for m in marks], min_gap=(end - start) / 6)
    row = max(1.0, top / 9)
    for m, level in zip(marks, levels, strict=True):
        for a in axes:
            a.axvline(m.t, color="black", lw=0.6, alpha=0.4)
        ax.text(m.t, top + row * (0.6 + level), " " + m.name.replace("_", " "), va="bottom", ha="left", fontsize=7)
    ax.set_ylim(0, top + row * (2.5 + max(levels, default=0)))
    ax.set_ylabel("pods")
    ax.set_title(title)
    ax.legend(loc="upper right", fontsize=8, ncols=2)
    if tl.requests:
        axr = axes[1]
        rt = [r.t for r in tl.requests]
        axr.step(rt, [r.sent for r in tl.requests], where="post", color="#4d4d4d", label="requests / s")
        axr.bar(rt, [r.failed for r in tl.requests], width=1.0, align="edge", color="#d7191c", label="failed / s")
        axr.set_ylabel("requests", fontsize=8)
        axl = axr.twinx()
        axl.step(rt, [r.p99_ms for r in tl.requests], where="post", color="#7b3294", lw=1, label="p99 latency")
        axl.set_ylabel("p99 ms", fontsize=8)
        axr.legend(loc="upper left", fontsize=7)
        axl.legend(loc="upper right", fontsize=7)
    effects = {"": 0, "NoSchedule": 1, "NoExecute": 2}
    axt.step(t, [effects.get(s.taint, 0) for s in tl.samples], where="post", color="#7b3294")
    axt.set_yticks([0, 1, 2], ["none", "NoSchedule", "NoExecute"], fontsize=7)
    axt.set_ylabel("burst taint", fontsize=8)
    axt.set_xlabel("seconds")
    axt.set_xlim(start, end)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
