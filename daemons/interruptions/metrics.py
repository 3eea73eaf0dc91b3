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

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import Counter, Histogram
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
        gauges = {
            "restarts_last_hour": GaugeMetricFamily(
                f"{TRAINING}_restarts_last_hour", "In-place restarts within the last hour", labels=JOB_LABELS
            ),
            "recovery": GaugeMetricFamily(
                f"{TRAINING}_recovery_seconds",
                "Last interruption to every pod of the gang Running again",
                labels=JOB_LABELS,
            ),
            "lost": GaugeMetricFamily(
                f"{TRAINING}_work_lost_seconds", "Work lost since the last checkpoint, summed", labels=JOB_LABELS
            ),
            "ettr": GaugeMetricFamily(
                f"{TRAINING}_ettr", "Effective training time ratio since first admitted", labels=JOB_LABELS
            ),
            "interval": GaugeMetricFamily(
                f"{TRAINING}_checkpoint_interval_seconds",
                "The checkpoint interval the job was given",
                labels=JOB_LABELS,
            ),
            "bound": GaugeMetricFamily(
                f"{TRAINING}_max_restarts_per_hour", "The job's restart bound", labels=JOB_LABELS
            ),
            "stopped": GaugeMetricFamily(
                f"{TRAINING}_stopped_at_bound",
                "1 while the restart bound keeps the job stopped (its Workload deactivated)",
                labels=JOB_LABELS,
            ),
            "age": GaugeMetricFamily(
                f"{TRAINING}_checkpoint_age_seconds",
                "Seconds since the last checkpoint the job reported (while every pod runs)",
                labels=JOB_LABELS,
            ),
        }
        for j in f.jobs:
            key = [j.namespace, j.job, j.team]
            for cause in Cause:
                interruptions.add_metric([*key, cause.value], j.counts.get(cause, 0))
            gauges["restarts_last_hour"].add_metric(key, j.restarts_last_hour)
            gauges["lost"].add_metric(key, j.work_lost_s)
            if j.recovery_s is not None:
                gauges["recovery"].add_metric(key, j.recovery_s)
            if j.ettr is not None:
                gauges["ettr"].add_metric(key, j.ettr)
            gauges["bound"].add_metric(key, j.max_restarts_per_hour)
            gauges["stopped"].add_metric(key, 1 if j.stopped else 0)
            if j.checkpoint_interval_s is not None:
                gauges["interval"].add_metric(key, j.checkpoint_interval_s)
            if j.checkpoint_age_s is not None:
                gauges["age"].add_metric(key, j.checkpoint_age_s)
        yield interruptions
        yield from gauges.values()
        cluster = GaugeMetricFamily(f"{TRAINING}_cluster_ettr", "Effective training time ratio of the cluster")
        if f.cluster_ettr is not None:
            cluster.add_metric([], f.cluster_ettr)
        yield cluster
        mtbi = GaugeMetricFamily(f"{TRAINING}_node_mtbi_seconds", "Training node-seconds per interruption")
        if f.node_mtbi_s is not None:
            mtbi.add_metric([], f.node_mtbi_s)
        yield mtbi


class Metrics(ControllerMetrics):
    def __init__(self) -> None:
        super().__init__(PREFIX)
        r = self.registry
        self.figures = FiguresCollector()
        r.register(self.figures)
        self.cycles = Counter(f"{PREFIX}_cycles", "Cycles run", registry=r)
        self.cycle_errors = Counter(
            f"{PREFIX}_cycle_errors", "Cycles that could not read the API server (figures kept)", ["read"], registry=r
        )
        self.bound_stops = Counter(f"{PREFIX}_bound_stops", "Jobs stopped at their restart bound", registry=r)
        self.writes = Counter(f"{PREFIX}_writes", "Writes by what and result", ["what", "result"], registry=r)
        self.cycle_seconds = Histogram(
            f"{PREFIX}_cycle_seconds", "Seconds one cycle took", buckets=CYCLE_BUCKETS, registry=r
        )
        for read in READS:
            self.cycle_errors.labels(read)
