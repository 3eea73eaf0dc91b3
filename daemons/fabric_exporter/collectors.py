"""prometheus_client custom collectors: InfiniBand (sysfs), NVLink (NVML), the filesystems' clients (NFS
mountstats, Lustre llite) and the per-collector health.

Per collector and scrape: ``collector_success`` (0 when anything failed), ``collector_problems`` (how many),
``collector_errors_total{kind}`` (every problem so far, by kind: unreadable, malformed, out_of_range,
went_backwards, devices_missing, failed), ``devices`` (HCAs or GPUs found) and ``devices_expected`` (what the
node should have, ``--expected-hcas`` / ``--expected-gpus``; 0: no expectation). A collector that finds fewer
devices than expected, or no sysfs at all, fails; the alert ``FabricDevicesMissing`` compares the two gauges.
"""

from __future__ import annotations

import contextlib
import logging
import os
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
from daemons.fabric_exporter.filesystems import NFS_OPS, parse_llite_stats, parse_mountstats
from daemons.fabric_exporter.infiniband import (
    DEVICES_MISSING,
    FAILED,
    MALFORMED,
    MAX_COUNTER,
    OUT_OF_RANGE,
    PROBLEM_KINDS,
    UNREADABLE,
    WENT_BACKWARDS,
    FileProblem,
    InfinibandScraper,
    SysfsReader,
    label_text,
)
from daemons.fabric_exporter.nvml_api import MAX_LINKS, NVLINK_ERROR_COUNTERS, NvmlApi
from daemons.toolkit.logs import OnceLogger

log = logging.getLogger("fabric_exporter")
NVL = f"{METRIC_PREFIX}_nvlink"
FS = f"{METRIC_PREFIX}_filesystem"
#: The largest mountstats or llite stats file read (a node with thousands of mounts stays well under it).
MAX_STATS_BYTES = 16 * 1024 * 1024


#: Most GPUs one node can report; NVML answering more is not believed.
MAX_GPUS = 1024
#: 10 TB/s: beyond any NVLink.
MAX_NVLINK_MBYTES = 10_000_000


@dataclass
class CollectResult:
    families: list[Family]
    problems: list[FileProblem]  # partial failures (where, what, kind); the metrics are still served
    devices: int = 0  # HCAs or GPUs found


class SubCollector(Protocol):
    name: str
    expected_devices: int

    def collect(self) -> CollectResult: ...


def _missing(found: int, expected: int, where: str, what: str, flag: str) -> list[FileProblem]:
    if found >= expected:
        return []
    return [FileProblem(where, f"{found} {what} found, {expected} expected ({flag})", DEVICES_MISSING)]


def _plausible(value: object, high: int) -> bool:
    """A whole number in [0, high] (what NVML's unsigned counters can hold)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= high


def _fd_budget() -> int:
    """Descriptors the sysfs reader may keep: a quarter of the soft RLIMIT_NOFILE, at most 4096."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 4096
    return max(0, min(4096, soft // 4))


class InfinibandCollector:
    name = "infiniband"

    def __init__(
        self, sysfs_root: str, const_labels: dict[str, str], keep_files_open: bool = True, expected_devices: int = 0
    ) -> None:
        self.sysfs_root = sysfs_root
        self.expected_devices = expected_devices
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
            devices = self.scraper.devices
        if not any(p.kind == DEVICES_MISSING for p in problems):  # a missing sysfs root already says so
            problems += _missing(
                devices, self.expected_devices, self.scraper.base, "InfiniBand devices", "--expected-hcas"
            )
        return CollectResult(families, problems, devices)


class NvlinkCollector:
    """Per GPU and link: state, speed and the DL-layer error counters, read through ``NvmlApi``."""

    name = "nvlink"

    def __init__(self, nvml: NvmlApi, const_labels: dict[str, str], expected_devices: int = 0) -> None:
        self.nvml = nvml
        self.const_labels = const_labels
        self.expected_devices = expected_devices
        # (index, uuid, link, type) -> the error counter's previous reading
        self._last: dict[tuple[str, str, int, str], int] = {}
        self._devices: list[tuple[str, str, Any]] | None = None  # (index, uuid, handle)
        # (index, uuid, link) -> (series labels, error-series labels by type), built once
        self._labels: dict[tuple[str, str, int], tuple[tuple[str, ...], dict[str, tuple[str, ...]]]] = {}
        self._lock = threading.Lock()

    def _ensure_devices(self) -> list[tuple[str, str, Any]]:
        if self._devices is None:
            self.nvml.init()
            devices = []
            count = self.nvml.device_count()
            if not _plausible(count, MAX_GPUS):
                raise ValueError(f"NVML reports an impossible GPU count ({type(count).__name__}, not 0-{MAX_GPUS})")
            for i in range(count):
                handle = self.nvml.device_handle(i)
                devices.append((str(i), label_text(str(self.nvml.device_uuid(handle))), handle))
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
        problems: list[FileProblem] = []
        nvml = self.nvml
        last = self._last
        up_rows, speed_rows, error_rows = up.rows, speed.rows, errors.rows
        labels = self._labels
        devices = self._ensure_devices()
        for index, uuid, handle in devices:
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
                where = f"gpu {index} link {link}"
                up_rows.append((lk, 1.0 if reading.up else 0.0))
                mbytes = reading.speed_mbytes
                if mbytes is not None:
                    if _plausible(mbytes, MAX_NVLINK_MBYTES):
                        speed_rows.append((lk, mbytes * 1e6))
                    else:
                        problems.append(FileProblem(where, f"{where}: impossible link speed", OUT_OF_RANGE))
                for type_name, value in reading.errors.items():
                    if not _plausible(value, MAX_COUNTER):
                        problems.append(FileProblem(where, f"{where}: impossible {type_name} counter", OUT_OF_RANGE))
                        continue
                    key = (index, uuid, link, type_name)
                    previous = last.get(key, -1)
                    last[key] = value
                    if value < previous:
                        problems.append(
                            FileProblem(
                                where,
                                f"{where}: {type_name} counter went backwards ({previous} -> {value}); withheld",
                                WENT_BACKWARDS,
                            )
                        )
                        continue
                    error_rows.append((by_type.get(type_name) or (*lk, type_name), float(value)))
                for problem in reading.problems:
                    problems.append(FileProblem(where, problem, UNREADABLE))
            supported.add((index, uuid, *extra_values), 1.0 if has_nvlink else 0.0)
        problems += _missing(len(devices), self.expected_devices, "nvml", "GPUs", "--expected-gpus")
        return CollectResult([supported, up, speed, errors], problems, len(devices))


def _read_text(path: str) -> str:
    with open(path, "rb") as f:
        return f.read(MAX_STATS_BYTES).decode("utf-8", "replace")


class FilesystemCollector:
    """Per NFS export and Lustre client instance: the bytes applications read and wrote, and NFS's per-RPC calls,
    major timeouts, errors and round-trip time; ``devices`` is the filesystems found (0 on a node without any).

    ``mountstats`` is the exporter's own (``/proc/self/mountstats``): the pod mounts the kubelet's directory with
    ``HostToContainer`` propagation, so every volume the kubelet mounts for a pod shows here, counters and all.
    ``llite_dirs`` are searched for ``<fsname>-<instance>/stats`` (an absent directory: no Lustre client).
    """

    name = "filesystem"
    expected_devices = 0

    def __init__(self, mountstats: str, llite_dirs: Sequence[str], const_labels: dict[str, str]) -> None:
        self.mountstats = mountstats
        self.llite_dirs = list(llite_dirs)
        self.const_labels = const_labels

    def collect(self) -> CollectResult:
        extra_names, extra_values = tuple(self.const_labels), tuple(self.const_labels.values())
        fs_labels = ("fstype", "filesystem", *extra_names)
        op_labels = ("fstype", "filesystem", "op", *extra_names)
        read = Family(f"{FS}_read_bytes", "counter", "Bytes applications read from the filesystem.", fs_labels)
        written = Family(f"{FS}_write_bytes", "counter", "Bytes applications wrote to the filesystem.", fs_labels)
        calls = Family(f"{FS}_rpc_calls", "counter", "NFS RPCs sent, by operation.", op_labels)
        timeouts = Family(f"{FS}_rpc_timeouts", "counter", "NFS RPCs that timed out (major timeouts).", op_labels)
        errors = Family(f"{FS}_rpc_errors", "counter", "NFS RPCs that ended in an error (kernel 5.x).", op_labels)
        rtt = Family(f"{FS}_rpc_rtt_seconds", "counter", "Total round-trip time of NFS RPCs.", op_labels)
        problems: list[FileProblem] = []
        found = 0
        try:
            mounts, bad = parse_mountstats(_read_text(self.mountstats))
        except OSError as e:
            problems.append(FileProblem(self.mountstats, f"{self.mountstats}: {e.strerror or e}", UNREADABLE))
            mounts, bad = [], []
        problems += [FileProblem(p.where, p.reason, MALFORMED) for p in bad]
        for m in mounts:
            lv = (m.fstype, label_text(m.export), *extra_values)
            read.add(lv, float(m.read_bytes + m.direct_read_bytes))
            written.add(lv, float(m.write_bytes + m.direct_write_bytes))
            for op in NFS_OPS:
                stats = m.ops.get(op)
                if stats is None:
                    continue
                ov = (m.fstype, label_text(m.export), op, *extra_values)
                calls.add(ov, float(stats.calls))
                timeouts.add(ov, float(stats.major_timeouts))
                rtt.add(ov, stats.rtt_ms / 1000.0)
                if stats.errors is not None:
                    errors.add(ov, float(stats.errors))
        found += len(mounts)
        for directory in self.llite_dirs:
            try:
                instances = sorted(os.listdir(directory))
            except FileNotFoundError:
                continue
            except OSError as e:
                problems.append(FileProblem(directory, f"{directory}: {e.strerror or e}", UNREADABLE))
                continue
            for instance in instances:
                path = os.path.join(directory, instance, "stats")
                try:
                    stats_l = parse_llite_stats(instance, _read_text(path))
                except OSError as e:
                    problems.append(FileProblem(path, f"{path}: {e.strerror or e}", UNREADABLE))
                    continue
                except ValueError as e:
                    problems.append(FileProblem(path, str(e), MALFORMED))
                    continue
                lv = ("lustre", label_text(instance), *extra_values)
                read.add(lv, float(stats_l.read_bytes))
                written.add(lv, float(stats_l.write_bytes))
                found += 1
        return CollectResult([read, written, calls, timeouts, errors, rtt], problems, found)


class FabricCollector(Collector):
    """Runs every sub-collector on each scrape and reports each one's success, problems, devices and duration.

    A sub-collector that raises reports success 0 and contributes no series; one with partial problems
    (an unreadable or impossible file, fewer devices than expected) reports success 0 but still serves what it
    could read. Each distinct cause (collector, where, kind) is logged once per process.
    """

    def __init__(self, subs: Sequence[SubCollector], once: OnceLogger, const_labels: dict[str, str]) -> None:
        self.subs = list(subs)
        self.once = once
        self.const_labels = const_labels
        self._renderer = TextRenderer()
        self._errors = {(sub.name, kind): 0 for sub in self.subs for kind in PROBLEM_KINDS}
        self._errors_lock = threading.Lock()

    def describe(self) -> Iterable[Metric]:
        return []  # unchecked collector: the series set depends on the hardware

    def collect(self) -> Iterator[Metric]:
        for fam in self.collect_families():
            yield fam.to_metric()

    def render(self) -> bytes:
        """The scrape as Prometheus text; same bytes as ``generate_latest`` over this collector."""
        return self._renderer.render(self.collect_families())

    def _problems(self, sub: SubCollector, problems: Sequence[FileProblem]) -> None:
        with self._errors_lock:
            for p in problems:
                self._errors[(sub.name, p.kind)] = self._errors.get((sub.name, p.kind), 0) + 1
        for p in problems:
            self.once.error(
                (sub.name, p.path, p.kind),
                f"collector {sub.name}: {p.reason}",
                collector=sub.name,
                where=p.path,
                kind=p.kind,
            )

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
        errors = Family(
            f"{METRIC_PREFIX}_collector_errors",
            "counter",
            "Problems found since the exporter started, by kind (unreadable, malformed, out_of_range, "
            "went_backwards, devices_missing, failed).",
            ("collector", "kind", *extra_names),
        )
        devices_g = Family(
            f"{METRIC_PREFIX}_devices",
            "gauge",
            "Devices the collector found in this scrape (InfiniBand HCAs, NVML GPUs).",
            labels,
        )
        expected_g = Family(
            f"{METRIC_PREFIX}_devices_expected",
            "gauge",
            "Devices the node should have (--expected-hcas, --expected-gpus); 0: no expectation.",
            labels,
        )
        out: list[Family] = []
        for sub in self.subs:
            start = time.perf_counter()
            ok = 1.0
            devices = 0
            try:
                result = sub.collect()
            except Exception as exc:  # a collector must never take the scrape down
                ok = 0.0
                found = [FileProblem(sub.name, f"failed: {type(exc).__name__}: {str(exc)[:300]}", FAILED)]
                found += _missing(0, sub.expected_devices, sub.name, "devices", "the collector failed")
                self.once.error(
                    (sub.name, "failed", type(exc).__name__, str(exc)[:300]),
                    f"collector {sub.name} failed: {str(exc)[:300]}",
                    collector=sub.name,
                    error_type=type(exc).__name__,
                )
                with self._errors_lock:
                    for p in found:
                        self._errors[(sub.name, p.kind)] += 1
                n_problems = len(found)
            else:
                out.extend(result.families)
                devices = result.devices
                n_problems = len(result.problems)
                if result.problems:
                    ok = 0.0
                self._problems(sub, result.problems)
            lv = (sub.name, *extra_values)
            success.add(lv, ok)
            problems_g.add(lv, float(n_problems))
            devices_g.add(lv, float(devices))
            expected_g.add(lv, float(sub.expected_devices))
            duration.add(lv, time.perf_counter() - start)
        with self._errors_lock:
            for sub in self.subs:
                for kind in PROBLEM_KINDS:
                    errors.add((sub.name, kind, *extra_values), float(self._errors[(sub.name, kind)]))
        out += [success, problems_g, duration, errors, devices_g, expected_g]
        return out
