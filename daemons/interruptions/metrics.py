"""The daemon's Prometheus metrics, in a registry of their own.

Figures (``gpucluster_training_``), rebuilt each cycle from the API objects and exported by a collector from the
last cycle that could read them (fail-static: when the API server cannot be read the last figures stay):

* per job (labels ``namespace``, ``job``, ``team``): ``interruptions_total{cause}`` is a counter honestly: its
  values are the API server's own monotonic counters (JobSet ``status.restarts`` / ``restartsCountTowardsMax``,
  Kueue ``schedulingStats.evictions``), so a restarted daemon exports the same numbers, and they only reset when
  the JobSet is recreated (a counter reset ``rate()`` handles); ``restarts_last_hour``, ``recovery_seconds`` (last
  interruption -> all pods Running again), ``work_lost_seconds`` (sum), ``ettr``, ``checkpoint_age_seconds``
  (while every pod runs and a checkpoint was reported), and for the alerts ``checkpoint_interval_seconds``,
  ``max_restarts_per_hour`` and ``stopped_at_bound``;
* cluster: ``cluster_ettr`` (node-weighted), ``node_mtbi_seconds`` (training node-seconds per interruption).

The daemon itself (``gpucluster_interruptions_``): ``is_leader``, ``cycles_total``, ``cycle_errors_total{read}``,
``bound_stops_total``, ``writes_total{what,result}``, ``cycle_seconds``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from contract.controllers.interruptions import PREFIX, TRAINING
from daemons.interruptions.classify import Cause
from daemons.toolkit.metrics import ControllerMetrics

JOB_LABELS = ("namespace", "job", "team")
READS = ("jobsets", "pods", "nodes", "workloads", "events", "claims")
CYCLE_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


@dataclass(frozen=True)
class JobFigures:
    namespace: str
    job: str
    team: str
    counts: dict[Cause, int]
    restarts_last_hour: int
    recovery_s: float | None
    work_lost_s: float
    ettr: float | None
    checkpoint_age_s: float | None
    #: What the alerts compare with: the job's checkpoint interval, its restart bound, whether the bound stopped it.
    checkpoint_interval_s: float | None = None
    max_restarts_per_hour: int = 0
    stopped: bool = False


@dataclass
class Figures:
    jobs: list[JobFigures] = field(default_factory=list)
    cluster_ettr: float | None = None
    node_mtbi_s: float | None = None


@dataclass(frozen=True)
class JobGauge:
    """A per-job gauge of the figures: ``<TRAINING>_<name>``, one sample per job whose ``value`` is known."""

    name: str
    documentation: str
    value: Callable[[JobFigures], float | None]


#: The per-job gauges, in the order they are exported.
JOB_GAUGES = (
    JobGauge("restarts_last_hour", "In-place restarts within the last hour", lambda j: j.restarts_last_hour),
    JobGauge("recovery_seconds", "Last interruption to every pod of the gang Running again", lambda j: j.recovery_s),
    JobGauge("work_lost_seconds", "Work lost since the last checkpoint, summed", lambda j: j.work_lost_s),
    JobGauge("ettr", "Effective training time ratio since first admitted", lambda j: j.ettr),
    JobGauge(
        "checkpoint_interval_seconds", "The checkpoint interval the job was given", lambda j: j.checkpoint_interval_s
    ),
    JobGauge("max_restarts_per_hour", "The job's restart bound", lambda j: j.max_restarts_per_hour),
    JobGauge(
        "stopped_at_bound",
        "1 while the restart bound keeps the job stopped (its Workload deactivated)",
        lambda j: 1 if j.stopped else 0,
    ),
    JobGauge(
        "checkpoint_age_seconds",
        "Seconds since the last checkpoint that counts (the last verified where the verifier runs, else the last "
        "reported; none: since the gang began running), while every pod runs",
        lambda j: j.checkpoint_age_s,
    ),
)


class FiguresCollector(Collector):
    def __init__(self) -> None:
        self.figures: Figures | None = None

    def collect(self) -> Iterator[Any]:
        f = self.figures
        if f is None:
            return
        interruptions = CounterMetricFamily(
            f"{TRAINING}_interruptions",
            "Interruptions of a training job by cause (the API server's own counters)",
            labels=[*JOB_LABELS, "cause"],
        )
        for j in f.jobs:
            for cause in Cause:
                interruptions.add_metric([j.namespace, j.job, j.team, cause.value], j.counts.get(cause, 0))
        yield interruptions
        for gauge in JOB_GAUGES:
            family = GaugeMetricFamily(f"{TRAINING}_{gauge.name}", gauge.documentation, labels=JOB_LABELS)
            for j in f.jobs:
                value = gauge.value(j)
                if value is not None:
                    family.add_metric([j.namespace, j.job, j.team], value)
            yield family
        yield _cluster_gauge("cluster_ettr", "Effective training time ratio of the cluster", f.cluster_ettr)
        yield _cluster_gauge("node_mtbi_seconds", "Training node-seconds per interruption", f.node_mtbi_s)


def _cluster_gauge(name: str, documentation: str, value: float | None) -> GaugeMetricFamily:
    """``<TRAINING>_<name>`` without labels: one sample while ``value`` is known, none otherwise."""
    family = GaugeMetricFamily(f"{TRAINING}_{name}", documentation)
    if value is not None:
        family.add_metric([], value)
    return family


class Metrics(ControllerMetrics):
    def __init__(self) -> None:
        super().__init__(PREFIX)
        self.figures = FiguresCollector()
        self.registry.register(self.figures)
        self.cycles = self.counter("cycles", "Cycles run")
        self.cycle_errors = self.counter(
            "cycle_errors", "Cycles that could not read the API server (figures kept)", ["read"], known=READS
        )
        self.bound_stops = self.counter("bound_stops", "Jobs stopped at their restart bound")
        self.writes = self.counter("writes", "Writes by what and result", ["what", "result"])
        self.cycle_seconds = self.histogram("cycle_seconds", "Seconds one cycle took", CYCLE_BUCKETS)
