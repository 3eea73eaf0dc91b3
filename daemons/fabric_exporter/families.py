"""Metric families as plain rows, turned into prometheus_client metrics or rendered straight to text.

Collectors produce ``Family`` rows (label values + value). ``FabricCollector.collect()`` turns them into
prometheus_client metric families (the registry path); ``TextRenderer`` writes the same series in the
Prometheus text format without building a ``Sample`` per series, caching each series' name and label string
between scrapes (the label sets of a node's HCAs and GPUs rarely change) and printing integral values as
integers. Tests assert that both paths parse to the same samples.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from prometheus_client import utils as _prom_utils
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

Row = tuple[tuple[str, ...], float]


def float_to_go(value: float) -> str:
    """Go's float formatting, as prometheus_client writes sample values."""
    return str(_prom_utils.floatToGoString(value))  # type: ignore[no-untyped-call]


@dataclass
class Family:
    name: str  # without the ``_total`` suffix for counters (as prometheus_client names them)
    type: Literal["counter", "gauge"]
    help: str
    labelnames: tuple[str, ...]
    rows: list[Row] = field(default_factory=list)

    def add(self, labelvalues: tuple[str, ...], value: float) -> None:
        self.rows.append((labelvalues, value))

    def to_metric(self) -> Metric:
        metric: Metric
        if self.type == "counter":
            metric = CounterMetricFamily(self.name, self.help, labels=self.labelnames)
        else:
            metric = GaugeMetricFamily(self.name, self.help, labels=self.labelnames)
        for labelvalues, value in self.rows:
            metric.add_metric(list(labelvalues), value)
        return metric


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


class TextRenderer:
    """Prometheus text exposition (0.0.4) of families, with a bounded cache of series prefixes."""

    MAX_CACHED = 200_000

    def __init__(self) -> None:
        self._order: dict[tuple[str, ...], list[int]] = {}
        # (series name, label names) -> label values -> (last value, "name{labels} ", last line)
        self._lines: dict[tuple[str, tuple[str, ...]], dict[tuple[str, ...], tuple[float, str, str]]] = {}
        self._size = 0

    def _label_order(self, labelnames: tuple[str, ...]) -> list[int]:
        order = self._order.get(labelnames)
        if order is None:
            order = sorted(range(len(labelnames)), key=lambda i: labelnames[i])
            self._order[labelnames] = order
        return order

    def render(self, families: Iterable[Family]) -> bytes:
        out: list[str] = []
        ap = out.append
        if self._size > self.MAX_CACHED:
            self._lines.clear()
            self._size = 0
        for fam in families:
            name = fam.name + "_total" if fam.type == "counter" else fam.name
            ap(f"# HELP {name} {fam.help.replace(chr(92), chr(92) * 2).replace(chr(10), chr(92) + 'n')}\n")
            ap(f"# TYPE {name} {fam.type}\n")
            names = fam.labelnames
            lines = self._lines.get((name, names))
            if lines is None:
                lines = self._lines[(name, names)] = {}
            for labelvalues, value in fam.rows:
                last = lines.get(labelvalues)
                if last is not None:
                    if last[0] == value:
                        ap(last[2])  # unchanged since the previous scrape (most error counters, states, info)
                        continue
                    prefix = last[1]
                else:
                    prefix = self._prefix_for(name, names, labelvalues)
                    self._size += 1
                # integral values (almost all counters) print as integers: cheaper than the Go-style float
                if value.is_integer() and -1e15 < value < 1e15:
                    line = f"{prefix}{int(value)}\n"
                else:
                    line = f"{prefix}{float_to_go(value)}\n"
                lines[labelvalues] = (value, prefix, line)
                ap(line)
        return "".join(out).encode()

    def _prefix_for(self, name: str, names: tuple[str, ...], labelvalues: tuple[str, ...]) -> str:
        if not names:
            return f"{name} "
        inner = ",".join(f'{names[i]}="{_escape(labelvalues[i])}"' for i in self._label_order(names))
        return f"{name}{{{inner}}} "
