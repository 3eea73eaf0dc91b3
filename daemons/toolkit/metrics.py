"""Prometheus metrics of our daemons: a registry of their own, families declared under one prefix, the text.

:class:`Families` is a daemon's registry together with its metrics prefix (a controller's ``metrics_prefix``, from
its spec): :meth:`~Families.counter`, :meth:`~Families.gauge` and :meth:`~Families.histogram` declare a family
``<prefix>_<name>`` on that registry, optionally with the label values that exist from the start (``known``), so
``rate()`` works before the first event. A controller's ``Metrics`` subclasses :class:`ControllerMetrics` (which
adds ``is_leader``) and declares its own families; the runner serves :meth:`~Families.render` on ``/metrics`` and
keeps ``is_leader`` in step with the Lease.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics import MetricWrapperBase

#: Label values of a family: a tuple (or list) of one value per label name, or a plain string for a one-label family.
LabelValues = str | Sequence[str]

W = TypeVar("W", bound=MetricWrapperBase)


class Families:
    """The families of one daemon, on a registry of their own (one per instance, so tests never collide)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.registry = CollectorRegistry(auto_describe=True)

    def counter(
        self, name: str, documentation: str, labels: Sequence[str] = (), *, known: Iterable[LabelValues] = ()
    ) -> Counter:
        """``<prefix>_<name>`` (exported as ``<prefix>_<name>_total``), with a series for each of ``known``."""
        return _with_known(Counter(self._name(name), documentation, labels, registry=self.registry), known)

    def gauge(
        self, name: str, documentation: str, labels: Sequence[str] = (), *, known: Iterable[LabelValues] = ()
    ) -> Gauge:
        """``<prefix>_<name>``, with a series for each of ``known``."""
        return _with_known(Gauge(self._name(name), documentation, labels, registry=self.registry), known)

    def histogram(
        self, name: str, documentation: str, buckets: Sequence[float], labels: Sequence[str] = ()
    ) -> Histogram:
        """``<prefix>_<name>`` with the bucket bounds ``buckets`` (``+Inf`` is added)."""
        return Histogram(self._name(name), documentation, labels, buckets=buckets, registry=self.registry)

    def render(self) -> bytes:
        """The Prometheus text exposition of every family."""
        return generate_latest(self.registry)

    def _name(self, name: str) -> str:
        return f"{self.prefix}_{name}"


class ControllerMetrics(Families):
    """What every controller of ours exports whatever its work, besides its own families."""

    def __init__(self, prefix: str) -> None:
        super().__init__(prefix)
        #: ``<prefix>_is_leader``: 1 while this replica holds the Lease (the runner's elector sets it).
        self.is_leader = self.gauge("is_leader", "1 while this replica holds the Lease")

    def kube_errors_counter(self, operations: Iterable[str]) -> Counter:
        """``<prefix>_kube_errors_total{operation}``: failed Kubernetes API calls, with a series for each of
        ``operations`` from the start (one name, help text and label for every controller that counts them)."""
        return self.counter("kube_errors", "Failed Kubernetes API calls, by operation", ["operation"], known=operations)


def _with_known(family: W, known: Iterable[LabelValues]) -> W:
    """``family`` with a (zero) series for each label values of ``known``."""
    for values in known:
        if isinstance(values, str):
            family.labels(values)
        else:
            family.labels(*values)
    return family
