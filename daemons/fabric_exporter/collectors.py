"""prometheus_client custom collectors: InfiniBand (sysfs), NVLink (NVML) and the per-collector health."""

from __future__ import annotations

import contextlib
import logging
import resource
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pynvml
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from daemons.fabric_exporter import METRIC_PREFIX
from daemons.fabric_exporter.families import Family, TextRenderer
from daemons.fabric_exporter.infiniband import InfinibandScraper, SysfsReader
from daemons.fabric_exporter.logs import OnceLogger
from daemons.fabric_exporter.nvml_api import MAX_LINKS, NVLINK_ERROR_COUNTERS, NvmlApi

log = logging.getLogger("fabric_exporter")
NVL = f"{METRIC_PREFIX}_nvlink"


@dataclass
class CollectResult:
    families: list[Family]
    problems: list[tuple[str, str]]  # (where, what) — partial failures; the metrics are still served


class SubCollector(Protocol):
    name: str

    def collect(self) -> CollectResult: ...


def _fd_budget() -> int:
    """Descriptors the sysfs reader may keep: a quarter of the soft RLIMIT_NOFILE, at most 4096."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 4096
    return max(0, min(4096, soft // 4))


class InfinibandCollector:
    name = "infiniband"

    def __init__(self, sysfs_root: str, const_labels: dict[str, str], keep_files_open: bool = True) -> None:
        self.sysfs_root = sysfs_root
        self.const_labels = const_labels
        self.reader = SysfsReader(keep_open=keep_files_open, max_open=_fd_budget())
        self.scraper = InfinibandScraper(sysfs_root, const_labels, self.reader)
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self.scraper.close()
            self.reader.close()

    @property
    def open_descriptors(self) -> int:
        """sysfs descriptors held between scrapes (counter files and port/device attributes)."""
        return self.scraper.held + self.reader.open_count

    def collect(self) -> CollectResult:
        with self._lock:  # concurrent scrapes share the reader's descriptors
            try:
                families, problems = self.scraper.scrape()
            finally:
                self.reader.sweep()
        return CollectResult(families, [(p.path, p.reason) for p in problems])


class NvlinkCollector:
    """Per GPU and link: state, speed and the DL-layer error counters, read through ``NvmlApi``."""

    name = "nvlink"

    def __init__(self, nvml: NvmlApi, const_labels: dict[str, str]) -> None:
        self.nvml = nvml
        self.const_labels = const_labels
        self._devices: list[tuple[str, str, Any]] | None = None  # (index, uuid, handle)
        # (index, uuid, link) -> (series labels, error-series labels by type), built once
        self._labels: dict[tuple[str, str, int], tuple[tuple[str, ...], dict[str, tuple[str, ...]]]] = {}
        self._lock = threading.Lock()

    def _ensure_devices(self) -> list[tuple[str, str, Any]]:
        if self._devices is None:
            self.nvml.init()
            devices = []
            for i in range(self.nvml.device_count()):
                handle = self.nvml.device_handle(i)
                devices.append((str(i), self.nvml.device_uuid(handle), handle))
            self._devices = devices
        return self._devices

    def close(self) -> None:
        with self._lock:
            if self._devices is not None:
                with contextlib.suppress(pynvml.NVMLError):
                    self.nvml.shutdown()
                self._devices = None

    def collect(self) -> CollectResult:
        with self._lock:
            try:
                return self._collect()
            except pynvml.NVMLError:
                self._devices = None  # re-initialise on the next scrape (driver reload, GPU reset)
                raise

    def _collect(self) -> CollectResult:
        extra_names = tuple(self.const_labels)
        extra_values = tuple(self.const_labels.values())
        gpu_labels = ("gpu", "uuid", *extra_names)
        link_labels = ("gpu", "uuid", "link", *extra_names)
        supported = Family(f"{NVL}_supported", "gauge", "1 when NVML reports NVLink on this GPU.", gpu_labels)
        up = Family(f"{NVL}_link_up", "gauge", "1 when the NVLink link is active.", link_labels)
        speed = Family(
            f"{NVL}_link_speed_bytes_per_second", "gauge", "NVLink link speed in bytes per second.", link_labels
        )
        errors = Family(
            f"{NVL}_errors",
            "counter",
            "NVLink data-link-layer error counters (crc_flit, crc_data, replay, recovery).",
            (*link_labels, "type"),
        )
        problems: list[tuple[str, str]] = []
        nvml = self.nvml
        up_rows, speed_rows, error_rows = up.rows, speed.rows, errors.rows
        labels = self._labels
        for index, uuid, handle in self._ensure_devices():
            has_nvlink = True
            for link in range(MAX_LINKS):
                try:
                    reading = nvml.nvlink_link(handle, link)
                except pynvml.NVMLError_NotSupported:
                    if link == 0:
                        has_nvlink = False
                        break
                    continue
                except pynvml.NVMLError_InvalidArgument:
                    break  # no more links on this GPU
                cached = labels.get((index, uuid, link))
                if cached is None:
                    lk = (index, uuid, str(link), *extra_values)
                    cached = labels[(index, uuid, link)] = (lk, {t: (*lk, t) for t in NVLINK_ERROR_COUNTERS.values()})
                lk, by_type = cached
                up_rows.append((lk, 1.0 if reading.up else 0.0))
                if reading.speed_mbytes is not None:
                    speed_rows.append((lk, reading.speed_mbytes * 1e6))
                for type_name, value in reading.errors.items():
                    error_rows.append((by_type.get(type_name) or (*lk, type_name), float(value)))
                for problem in reading.problems:
                    problems.append((f"gpu {index} link {link}", problem))
            supported.add((index, uuid, *extra_values), 1.0 if has_nvlink else 0.0)
        return CollectResult([supported, up, speed, errors], problems)


class FabricCollector(Collector):
    """Runs every sub-collector on each scrape and reports each one's success and duration.

    A sub-collector that raises reports success 0 and contributes no series; one with partial problems
    (an unreadable or malformed file) reports success 0 but still serves what it could read. Each distinct
    problem is logged once per process.
    """

    def __init__(self, subs: Sequence[SubCollector], once: OnceLogger, const_labels: dict[str, str]) -> None:
        self.subs = list(subs)
        self.once = once
        self.const_labels = const_labels
        self._renderer = TextRenderer()

    def describe(self) -> Iterable[Metric]:
        return []  # unchecked collector: the series set depends on the hardware

    def collect(self) -> Iterator[Metric]:
        for fam in self.collect_families():
            yield fam.to_metric()

    def render(self) -> bytes:
        """The scrape as Prometheus text; same bytes as ``generate_latest`` over this collector."""
        return self._renderer.render(self.collect_families())

    def collect_families(self) -> list[Family]:
        extra_names = tuple(self.const_labels)
        extra_values = tuple(self.const_labels.values())
        labels = ("collector", *extra_names)
        success = Family(
            f"{METRIC_PREFIX}_collector_success",
            "gauge",
            "1 when the collector read everything it found without error in this scrape.",
            labels,
        )
        duration = Family(
            f"{METRIC_PREFIX}_collector_duration_seconds", "gauge", "Time the collector took in this scrape.", labels
        )
        problems_g = Family(
            f"{METRIC_PREFIX}_collector_problems",
            "gauge",
            "Files or calls that failed in this scrape (the rest was still served).",
            labels,
        )
        out: list[Family] = []
        for sub in self.subs:
            start = time.perf_counter()
            ok = 1.0
            n_problems = 0
            try:
                result = sub.collect()
            except Exception as exc:  # a collector must never take the scrape down
                ok = 0.0
                n_problems = 1
                self.once.error(
                    (sub.name, "failed", type(exc).__name__, str(exc)),
                    f"collector {sub.name} failed: {exc}",
                    collector=sub.name,
                    error_type=type(exc).__name__,
                )
            else:
                out.extend(result.families)
                n_problems = len(result.problems)
                if result.problems:
                    ok = 0.0
                for where, what in result.problems:
                    self.once.error(
                        (sub.name, where, what),
                        f"collector {sub.name}: {what}",
                        collector=sub.name,
                        where=where,
                    )
            lv = (sub.name, *extra_values)
            success.add(lv, ok)
            problems_g.add(lv, float(n_problems))
            duration.add(lv, time.perf_counter() - start)
        out += [success, problems_g, duration]
        return out
