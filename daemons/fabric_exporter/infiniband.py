"""InfiniBand port counters from sysfs (``<sysfs-root>/class/infiniband/<device>/ports/<n>/...``).

Units and widths follow the InfiniBand Architecture Specification (PortCounters / PortCountersExtended):

* ``port_xmit_data`` / ``port_rcv_data`` count 4-octet words; they are exported in bytes (x4).
* The legacy PortCounters fields have fixed widths and *saturate* (stop at their maximum) instead of
  wrapping: 32 bits for data/packets/xmit_wait, 16 or 8 bits for most error counters and 4 bits for
  LocalLinkIntegrityErrors / ExcessiveBufferOverrunErrors. A counter that sits at its maximum carries no
  rate information any more, so it is *withheld* from its counter family (a rate over it would read as
  "no errors") and flagged by ``gpucluster_fabric_infiniband_counter_saturated{counter=...} 1`` instead.
  Kernels that read PortCountersExtended report 64-bit data counters; those only reach 2^32-1 by
  coincidence for one scrape, which costs one missing sample.

What the kernel cannot have written is a *problem* of the collector, never a sample: a counter file that is not a
plain non-negative integer (garbage bytes, ``N/A``, ``nan``, ``1.5``, ``+5``, ``1_000``), a negative one or one beyond
2^64-1, a counter lower than at the previous scrape (it is withheld for that scrape: a counter reset, or a read gone
wrong, must not reach ``rate()`` as a jump), a state or rate that no port has, and a sysfs root that does not exist or
has no ``class/`` directory (a missing mount, not "no InfiniBand driver"). Each problem has a kind
(`PROBLEM_KINDS`); the collector counts them, reports success 0 and logs each cause once.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from dataclasses import dataclass, field

from daemons.fabric_exporter import METRIC_PREFIX
from daemons.fabric_exporter.families import Family

IB = f"{METRIC_PREFIX}_infiniband"


@dataclass(frozen=True)
class CounterSpec:
    """How one ``counters/<file>`` maps to a metric."""

    family: str  # key into FAMILIES
    label: str | None  # value of the family's extra label (error type), None for single-purpose families
    scale: int = 1
    width_bits: int | None = None  # None: 64-bit, never saturates in practice


# family key -> (metric name without _total, help, extra label name or None)
FAMILIES: dict[str, tuple[str, str, str | None]] = {
    "errors": (f"{IB}_port_errors", "Port error counters by error type (IB PortCounters).", "type"),
    "xmit_wait": (
        f"{IB}_port_transmit_wait",
        "Ticks during which the port had data to send but no flow-control credits (congestion).",
        None,
    ),
    "xmit_data": (f"{IB}_port_transmit_data_bytes", "Data octets transmitted on the port.", None),
    "rcv_data": (f"{IB}_port_receive_data_bytes", "Data octets received on the port.", None),
    "xmit_packets": (f"{IB}_port_transmit_packets", "Packets transmitted on the port.", None),
    "rcv_packets": (f"{IB}_port_receive_packets", "Packets received on the port.", None),
    "unicast_xmit": (f"{IB}_port_unicast_transmit_packets", "Unicast packets transmitted.", None),
    "unicast_rcv": (f"{IB}_port_unicast_receive_packets", "Unicast packets received.", None),
    "multicast_xmit": (f"{IB}_port_multicast_transmit_packets", "Multicast packets transmitted.", None),
    "multicast_rcv": (f"{IB}_port_multicast_receive_packets", "Multicast packets received.", None),
}

COUNTERS: dict[str, CounterSpec] = {
    "symbol_error": CounterSpec("errors", "symbol_error", width_bits=16),
    "link_downed": CounterSpec("errors", "link_downed", width_bits=8),
    "link_error_recovery": CounterSpec("errors", "link_error_recovery", width_bits=8),
    "port_rcv_errors": CounterSpec("errors", "port_rcv_errors", width_bits=16),
    "port_rcv_remote_physical_errors": CounterSpec("errors", "port_rcv_remote_physical_errors", width_bits=16),
    "port_rcv_switch_relay_errors": CounterSpec("errors", "port_rcv_switch_relay_errors", width_bits=16),
    "port_xmit_discards": CounterSpec("errors", "port_xmit_discards", width_bits=16),
    "port_rcv_constraint_errors": CounterSpec("errors", "port_rcv_constraint_errors", width_bits=8),
    "port_xmit_constraint_errors": CounterSpec("errors", "port_xmit_constraint_errors", width_bits=8),
    "local_link_integrity_errors": CounterSpec("errors", "local_link_integrity_errors", width_bits=4),
    "excessive_buffer_overrun_errors": CounterSpec("errors", "excessive_buffer_overrun_errors", width_bits=4),
    "VL15_dropped": CounterSpec("errors", "VL15_dropped", width_bits=16),
    "port_xmit_wait": CounterSpec("xmit_wait", None, width_bits=32),
    "port_xmit_data": CounterSpec("xmit_data", None, scale=4, width_bits=32),
    "port_rcv_data": CounterSpec("rcv_data", None, scale=4, width_bits=32),
    "port_xmit_packets": CounterSpec("xmit_packets", None, width_bits=32),
    "port_rcv_packets": CounterSpec("rcv_packets", None, width_bits=32),
    "unicast_xmit_packets": CounterSpec("unicast_xmit", None),
    "unicast_rcv_packets": CounterSpec("unicast_rcv", None),
    "multicast_xmit_packets": CounterSpec("multicast_xmit", None),
    "multicast_rcv_packets": CounterSpec("multicast_rcv", None),
}

_RATE_RE = re.compile(r"^\s*(\d{1,7}(?:\.\d{1,6})?)\s*Gb/sec")
_STATE_RE = re.compile(r"^\s*(\d{1,3})\s*:\s*(\S.*?)\s*$")

#: The largest value a (64-bit) hardware counter can hold.
MAX_COUNTER = 2**64 - 1
#: Port states and physical states are small numbers (IBA: 0-5 and 0-7); anything larger is not a port state.
MAX_STATE_ID = 15
#: Faster than any link that exists (1.6 Tb/s XDR is 1600); beyond is not a rate.
MAX_RATE_GBPS = 100_000
#: Longest attribute text (firmware version, board id, link layer, rate) kept as a label value.
MAX_LABEL_TEXT = 128

# Kinds of problem, the ``kind`` label of gpucluster_fabric_collector_errors_total.
UNREADABLE = "unreadable"  # a file, directory or call that fails
MALFORMED = "malformed"  # content the kernel does not write there
OUT_OF_RANGE = "out_of_range"  # a number no counter, state or rate can have
WENT_BACKWARDS = "went_backwards"  # a counter below its previous reading
DEVICES_MISSING = "devices_missing"  # fewer devices than the node should have, or no sysfs at all
FAILED = "failed"  # the whole collector raised
PROBLEM_KINDS = (UNREADABLE, MALFORMED, OUT_OF_RANGE, WENT_BACKWARDS, DEVICES_MISSING, FAILED)


class SysfsParseError(ValueError):
    """A sysfs file whose content is not what the kernel writes there."""


@dataclass
class PortReading:
    device: str
    port: str
    counters: dict[str, int] = field(default_factory=dict)
    hw_counters: dict[str, int] = field(default_factory=dict)
    state: tuple[int, str] | None = None
    phys_state: tuple[int, str] | None = None
    rate_bytes: float | None = None
    rate_text: str = ""
    link_layer: str = ""


@dataclass
class DeviceReading:
    device: str
    fw_ver: str = ""
    board_id: str = ""
    hca_type: str = ""
    ports: list[PortReading] = field(default_factory=list)


@dataclass
class FileProblem:
    path: str
    reason: str
    kind: str = UNREADABLE


@dataclass
class Snapshot:
    devices: list[DeviceReading]
    problems: list[FileProblem]


def parse_state(text: str, path: str) -> tuple[int, str]:
    """``"4: ACTIVE"`` -> ``(4, "ACTIVE")``."""
    m = _STATE_RE.match(text)
    if not m or len(m.group(2)) > MAX_LABEL_TEXT:
        raise SysfsParseError(f"{path}: expected '<number>: <NAME>', got {text.strip()[:60]!r}")
    state = int(m.group(1))
    if state > MAX_STATE_ID:
        raise SysfsParseError(f"{path}: state {state} is beyond any port state (0-{MAX_STATE_ID})")
    return state, m.group(2)


def parse_rate(text: str, path: str) -> float:
    """``"400 Gb/sec (4X NDR)"`` -> bytes per second (5e10)."""
    m = _RATE_RE.match(text)
    if not m:
        raise SysfsParseError(f"{path}: expected '<n> Gb/sec (...)', got {text.strip()[:60]!r}")
    gbps = float(m.group(1))
    if gbps > MAX_RATE_GBPS:
        raise SysfsParseError(f"{path}: {gbps:g} Gb/sec is beyond any link (at most {MAX_RATE_GBPS})")
    return gbps * 1e9 / 8


def counter_value(raw: bytes) -> int | None:
    """The counter in ``raw`` (ASCII digits, surrounding whitespace allowed), None when it is not a valid one."""
    try:
        value = int(raw)
    except ValueError:
        return None
    if value < 0 or value > MAX_COUNTER or b"_" in raw or b"+" in raw:
        return None
    return value


def counter_problem(raw: bytes, path: str) -> FileProblem:
    """Why ``raw`` is not a counter (for a value `counter_value` refused)."""
    text = raw.decode("ascii", errors="replace").strip()
    stripped = raw.strip()
    if stripped.startswith(b"-") and stripped[1:].isdigit():
        return FileProblem(path, f"{path}: a counter cannot be negative, got {text[:60]!r}", OUT_OF_RANGE)
    if stripped.isdigit():
        return FileProblem(path, f"{path}: a {len(stripped)}-digit value is beyond a 64-bit counter", OUT_OF_RANGE)
    return FileProblem(path, f"{path}: expected a non-negative integer, got {text[:60]!r}", MALFORMED)


def backwards_problem(path: str, previous: int, value: int) -> FileProblem:
    return FileProblem(
        path, f"{path}: counter went backwards ({previous} -> {value}); withheld for this scrape", WENT_BACKWARDS
    )


def label_text(raw: str) -> str:
    """An attribute's text as a label value: stripped, printable, at most MAX_LABEL_TEXT characters."""
    text = raw.strip()
    if not text.isprintable():
        text = "".join(c if c.isprintable() else "?" for c in text)
    return text[:MAX_LABEL_TEXT]


def parse_counter(text: str, path: str) -> int:
    raw = text.strip()
    if not raw.isdigit():
        raise SysfsParseError(f"{path}: expected a non-negative integer, got {raw[:60]!r}")
    return int(raw)


class SysfsReader:
    """Reads small sysfs attribute files.

    With ``keep_open`` the descriptors stay open between scrapes and each read is one ``pread`` at offset 0:
    for sysfs attributes a read from offset 0 makes the kernel call the attribute's ``show()`` again, so the
    value is current. A descriptor whose read fails (device removed: ENODEV) is reopened once; files not seen
    in a scrape are closed by ``sweep()``. At most ``max_open`` descriptors are kept; beyond that files are
    opened per read. Without ``keep_open`` every read opens and closes the file.

    Held descriptors follow the inode, not the path: a file *replaced* by rename keeps returning the old
    content. sysfs never does that (attributes are rewritten in place by the kernel); test fixtures that
    advance counters must write in place too.
    """

    def __init__(self, keep_open: bool = False, max_open: int = 4096) -> None:
        self.keep_open = keep_open
        self.max_open = max_open
        self._fds: dict[str, int] = {}
        self._seen: set[str] = set()

    def read(self, path: str) -> str:
        return self.read_raw(path).decode("ascii", errors="replace")

    def read_raw(self, path: str) -> bytes:
        if not self.keep_open:
            fd = os.open(path, os.O_RDONLY)
            try:
                return os.read(fd, 4096)
            finally:
                os.close(fd)
        self._seen.add(path)
        held = self._fds.get(path)
        if held is not None:
            try:
                return os.pread(held, 4096, 0)
            except OSError:
                os.close(self._fds.pop(path))
        fd = os.open(path, os.O_RDONLY)
        try:
            data = os.pread(fd, 4096, 0)
        except OSError:
            os.close(fd)
            raise
        if len(self._fds) < self.max_open:
            self._fds[path] = fd
        else:
            os.close(fd)
        return data

    def sweep(self) -> None:
        """Close descriptors of files that were not read since the last sweep (removed devices)."""
        for path in [p for p in self._fds if p not in self._seen]:
            os.close(self._fds.pop(path))
        self._seen = set()

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        self._seen = set()

    @property
    def open_count(self) -> int:
        return len(self._fds)


_ONE_SHOT = SysfsReader(keep_open=False)


def _read_counter_dir(directory: str, out: dict[str, int], problems: list[FileProblem], reader: SysfsReader) -> None:
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return
    except OSError as exc:
        problems.append(FileProblem(directory, f"cannot list: {exc.strerror or exc}"))
        return
    read = reader.read_raw
    for name in names:
        path = f"{directory}/{name}"
        try:
            raw = read(path)
        except OSError as exc:
            # Some drivers expose counters that error on read (EINVAL) when the port does not support them.
            problems.append(FileProblem(path, f"cannot read: {exc.strerror or exc}"))
            continue
        value = counter_value(raw)
        if value is None:
            problems.append(counter_problem(raw, path))
            continue
        out[name] = value


def _read_port_attrs(port_dir: str, port: PortReading, problems: list[FileProblem], reader: SysfsReader) -> None:
    for attr in ("state", "phys_state", "rate", "link_layer"):
        path = f"{port_dir}/{attr}"
        try:
            text = reader.read(path)
            if attr == "state":
                port.state = parse_state(text, path)
            elif attr == "phys_state":
                port.phys_state = parse_state(text, path)
            elif attr == "rate":
                port.rate_bytes = parse_rate(text, path)
                port.rate_text = label_text(text)
            else:
                port.link_layer = label_text(text)
        except FileNotFoundError:
            continue
        except SysfsParseError as exc:
            kind = OUT_OF_RANGE if "beyond" in str(exc) else MALFORMED
            problems.append(FileProblem(path, str(exc), kind))
        except OSError as exc:
            problems.append(FileProblem(path, f"cannot read: {exc.strerror or exc}"))


def _read_device_attrs(dev_dir: str, dev: DeviceReading, reader: SysfsReader) -> None:
    for attr in ("fw_ver", "board_id", "hca_type"):
        with contextlib.suppress(OSError):  # optional identity attributes
            setattr(dev, attr, label_text(reader.read(f"{dev_dir}/{attr}")))


def _list_ports(ports_dir: str, problems: list[FileProblem]) -> list[str]:
    try:
        return sorted(os.listdir(ports_dir), key=lambda p: (len(p), p))
    except OSError as exc:
        problems.append(FileProblem(ports_dir, f"cannot list: {exc.strerror or exc}"))
        return []


def sysfs_root_problem(sysfs_root: str) -> FileProblem | None:
    """A sysfs root that does not exist, or has no ``class/`` directory: a missing mount, not a node without IB."""
    if not os.path.isdir(sysfs_root):
        return FileProblem(sysfs_root, f"sysfs root {sysfs_root} does not exist: is /sys mounted?", DEVICES_MISSING)
    if not os.path.isdir(os.path.join(sysfs_root, "class")):
        return FileProblem(
            sysfs_root, f"sysfs root {sysfs_root} has no class/ directory: not a sysfs mount", DEVICES_MISSING
        )
    return None


def read_infiniband(sysfs_root: str, reader: SysfsReader = _ONE_SHOT) -> Snapshot:
    """Read every device and port below ``<sysfs_root>/class/infiniband``.

    Raises ``OSError`` only when the class directory itself is unreadable; per-file problems are returned.
    A missing ``class/infiniband`` (no InfiniBand driver loaded) is an empty snapshot; a missing sysfs root (or one
    without ``class/``) is an empty snapshot with a problem.
    """
    base = os.path.join(sysfs_root, "class", "infiniband")
    problems: list[FileProblem] = []
    devices: list[DeviceReading] = []
    if not os.path.isdir(base):
        root_problem = sysfs_root_problem(sysfs_root)
        return Snapshot(devices, [root_problem] if root_problem else problems)
    for dev_name in sorted(os.listdir(base)):
        dev_dir = f"{base}/{dev_name}"
        dev = DeviceReading(dev_name)
        _read_device_attrs(dev_dir, dev, reader)
        ports_dir = f"{dev_dir}/ports"
        for port_name in _list_ports(ports_dir, problems):
            port_dir = f"{ports_dir}/{port_name}"
            port = PortReading(dev_name, port_name)
            _read_counter_dir(f"{port_dir}/counters", port.counters, problems, reader)
            _read_counter_dir(f"{port_dir}/hw_counters", port.hw_counters, problems, reader)
            _read_port_attrs(port_dir, port, problems, reader)
            dev.ports.append(port)
        devices.append(dev)
    return Snapshot(devices, problems)


def saturation_limit(spec: CounterSpec) -> int | None:
    return None if spec.width_bits is None else (1 << spec.width_bits) - 1


class _Families:
    """The InfiniBand metric families of one scrape."""

    def __init__(self, extra_names: tuple[str, ...]) -> None:
        base = ("device", "port", *extra_names)
        self.by_key: dict[str, Family] = {}
        for key, (name, doc, label) in FAMILIES.items():
            self.by_key[key] = Family(name, "counter", doc, (*base, label) if label else base)
        self.hw = Family(
            f"{IB}_hw_counters",
            "counter",
            "Driver (hw_counters) port counters, e.g. out_of_buffer, local_ack_timeout_err.",
            (*base, "counter"),
        )
        self.saturated = Family(
            f"{IB}_counter_saturated",
            "gauge",
            "1 when a fixed-width legacy counter sits at its maximum and is withheld from its counter family.",
            (*base, "counter"),
        )
        self.state = Family(f"{IB}_port_state_id", "gauge", "Logical port state (4 = ACTIVE).", base)
        self.phys = Family(f"{IB}_port_physical_state_id", "gauge", "Physical port state (5 = LinkUp).", base)
        self.rate = Family(
            f"{IB}_port_rate_bytes_per_second", "gauge", "Port signalling rate in bytes per second.", base
        )
        self.info = Family(
            f"{IB}_port_info",
            "gauge",
            "Port description (value 1).",
            (*base, "state", "physical_state", "link_layer", "rate"),
        )
        self.dev_info = Family(
            f"{IB}_device_info",
            "gauge",
            "HCA description (value 1).",
            ("device", *extra_names, "fw_ver", "board_id", "hca_type"),
        )

    def add_device(self, dev: DeviceReading, extra_values: tuple[str, ...]) -> None:
        self.dev_info.add((dev.device, *extra_values, dev.fw_ver, dev.board_id, dev.hca_type), 1.0)

    def add_port_attrs(self, port: PortReading, pl: tuple[str, ...]) -> None:
        if port.state is not None:
            self.state.add(pl, float(port.state[0]))
        if port.phys_state is not None:
            self.phys.add(pl, float(port.phys_state[0]))
        if port.rate_bytes is not None:
            self.rate.add(pl, port.rate_bytes)
        self.info.add(
            (
                *pl,
                port.state[1] if port.state else "",
                port.phys_state[1] if port.phys_state else "",
                port.link_layer,
                port.rate_text,
            ),
            1.0,
        )

    def ordered(self) -> list[Family]:
        return [
            self.dev_info,
            self.info,
            self.state,
            self.phys,
            self.rate,
            *self.by_key.values(),
            self.hw,
            self.saturated,
        ]


def families_from_snapshot(snapshot: Snapshot, const_labels: dict[str, str]) -> list[Family]:
    """Turn a snapshot into metric families (deterministic order, for golden files)."""
    extra_values = tuple(const_labels.values())
    fams = _Families(tuple(const_labels))
    for dev in snapshot.devices:
        fams.add_device(dev, extra_values)
        for port in dev.ports:
            pl = (port.device, port.port, *extra_values)
            for cname in sorted(port.counters):
                value = port.counters[cname]
                spec = COUNTERS.get(cname)
                if spec is None:
                    continue  # counters the kernel adds that we do not map yet
                limit = saturation_limit(spec)
                if limit is not None:
                    is_sat = value == limit
                    fams.saturated.add((*pl, cname), 1.0 if is_sat else 0.0)
                    if is_sat:
                        continue
                fam = fams.by_key[spec.family]
                fam.add((*pl, spec.label) if spec.label is not None else pl, float(value * spec.scale))
            for hname in sorted(port.hw_counters):
                fams.hw.add((*pl, hname), float(port.hw_counters[hname]))
            fams.add_port_attrs(port, pl)
    return fams.ordered()


class _PortPlan:
    """Which file feeds which series for one port, in the reference path's order, with held descriptors.

    Each entry: (path, family key or "" for hw_counters, series labels, scale, saturation limit or -1,
    saturation-gauge labels). Label tuples are built once per plan, not per scrape.
    """

    def __init__(self, port_dir: str, listing: tuple[tuple[str, ...], tuple[str, ...]], pl: tuple[str, ...]) -> None:
        counters, hw = listing
        self.listing = listing
        self.pl = pl
        self.entries: list[tuple[str, str, tuple[str, ...], int, int, tuple[str, ...]]] = []
        for n in counters:
            spec = COUNTERS.get(n)
            if spec is None:
                continue
            limit = saturation_limit(spec)
            self.entries.append(
                (
                    f"{port_dir}/counters/{n}",
                    spec.family,
                    (*pl, spec.label) if spec.label is not None else pl,
                    spec.scale,
                    -1 if limit is None else limit,
                    (*pl, n),
                )
            )
        self.entries += [(f"{port_dir}/hw_counters/{n}", "", (*pl, n), 1, -1, ()) for n in hw]
        self.fds: list[int] = [-1] * len(self.entries)
        #: Each counter's previous reading (-1: none yet), to catch one that goes backwards.
        self.last: list[int] = [-1] * len(self.entries)

    def close(self) -> int:
        closed = 0
        for i, fd in enumerate(self.fds):
            if fd >= 0:
                os.close(fd)
                self.fds[i] = -1
                closed += 1
        return closed


class InfinibandScraper:
    """The scrape path of the collector: same output as ``families_from_snapshot(read_infiniband(...))``.

    Per port it keeps a *plan* (which file feeds which series, sorted as the reference path sorts them) that
    holds the counter files' descriptors; the plan is rebuilt (and its descriptors closed) whenever the port's
    counter directories list different files, and dropped when the port disappears. A scrape is then one
    ``pread`` at offset 0 and one ``int()`` per counter file. A held descriptor whose read fails (device
    removed) is reopened once. Descriptors beyond the reader's ``max_open`` budget are not held.
    """

    #: A counter directory whose inode and mtime are unchanged is re-listed after this many seconds anyway.
    RELIST_SECONDS = 60.0

    def __init__(self, sysfs_root: str, const_labels: dict[str, str], reader: SysfsReader) -> None:
        self.relist_seconds = self.RELIST_SECONDS
        # directory -> ((inode, mtime_ns), listed at (monotonic), sorted names)
        self._listings: dict[str, tuple[tuple[int, int], float, tuple[str, ...]]] = {}
        self.sysfs_root = sysfs_root
        self.base = os.path.join(sysfs_root, "class", "infiniband")
        self.devices = 0
        self.extra_names = tuple(const_labels)
        self.extra_values = tuple(const_labels.values())
        self.reader = reader
        self.max_held = reader.max_open if reader.keep_open else 0
        self.held = 0
        self._plans: dict[str, _PortPlan] = {}

    def close(self) -> None:
        for plan in self._plans.values():
            self.held -= plan.close()
        self._plans.clear()
        self._listings.clear()

    def _listing(self, directory: str, problems: list[FileProblem], now: float) -> tuple[str, ...]:
        """The directory's sorted names; re-listed only when its inode or mtime changed, or once a minute.

        A port's sysfs attribute files are created with the port and never change while it exists; a device
        that is registered again gets new directories (new inode numbers). On ordinary filesystems (test
        fixtures) adding or removing a file updates the directory's mtime.
        """
        try:
            st = os.stat(directory)
        except FileNotFoundError:
            self._listings.pop(directory, None)
            return ()
        except OSError as exc:
            problems.append(FileProblem(directory, f"cannot list: {exc.strerror or exc}"))
            return ()
        key = (st.st_ino, st.st_mtime_ns)
        cached = self._listings.get(directory)
        if cached is not None and cached[0] == key and now - cached[1] < self.relist_seconds:
            return cached[2]
        try:
            names = tuple(sorted(os.listdir(directory)))
        except OSError as exc:
            problems.append(FileProblem(directory, f"cannot list: {exc.strerror or exc}"))
            return ()
        self._listings[directory] = (key, now, names)
        return names

    def _read_plan(self, plan: _PortPlan, fams: _Families, problems: list[FileProblem]) -> None:
        sat_rows = fams.saturated.rows
        hw_rows = fams.hw.rows
        by_key = fams.by_key
        fds = plan.fds
        last = plan.last
        pread = os.pread
        for i, (path, family, labels, scale, limit, sat_labels) in enumerate(plan.entries):
            fd = fds[i]
            raw: bytes | None = None
            if fd >= 0:
                try:
                    raw = pread(fd, 4096, 0)
                except OSError:
                    os.close(fd)
                    fds[i] = -1
                    self.held -= 1
            if raw is None:
                try:
                    fd = os.open(path, os.O_RDONLY)
                except OSError as exc:
                    problems.append(FileProblem(path, f"cannot read: {exc.strerror or exc}"))
                    continue
                try:
                    raw = pread(fd, 4096, 0)
                except OSError as exc:
                    os.close(fd)
                    problems.append(FileProblem(path, f"cannot read: {exc.strerror or exc}"))
                    continue
                if self.held < self.max_held:
                    fds[i] = fd
                    self.held += 1
                else:
                    os.close(fd)
            try:
                value = int(raw)  # ASCII bytes, surrounding whitespace ignored
            except ValueError:
                value = -1
            if value < 0 or value > MAX_COUNTER or b"_" in raw or b"+" in raw:
                problems.append(counter_problem(raw, path))
                continue
            previous = last[i]
            last[i] = value
            if value < previous:
                problems.append(backwards_problem(path, previous, value))
                continue
            if not family:
                hw_rows.append((labels, float(value)))
                continue
            if limit >= 0:
                if value == limit:
                    sat_rows.append((sat_labels, 1.0))
                    continue
                sat_rows.append((sat_labels, 0.0))
            by_key[family].rows.append((labels, float(value * scale)))

    def scrape(self) -> tuple[list[Family], list[FileProblem]]:
        """The families of one scrape and its problems; ``devices`` is then the number of HCAs found."""
        problems: list[FileProblem] = []
        fams = _Families(self.extra_names)
        self.devices = 0
        if not os.path.isdir(self.base):
            self.close()
            root_problem = sysfs_root_problem(self.sysfs_root)
            return fams.ordered(), [root_problem] if root_problem else problems
        extra_values = self.extra_values
        now = time.monotonic()
        live: set[str] = set()
        for dev_name in sorted(os.listdir(self.base)):
            dev_dir = f"{self.base}/{dev_name}"
            dev = DeviceReading(dev_name)
            _read_device_attrs(dev_dir, dev, self.reader)
            fams.add_device(dev, extra_values)
            self.devices += 1
            ports_dir = f"{dev_dir}/ports"
            for port_name in _list_ports(ports_dir, problems):
                port_dir = f"{ports_dir}/{port_name}"
                live.add(port_dir)
                pl = (dev_name, port_name, *extra_values)
                listing = (
                    self._listing(f"{port_dir}/counters", problems, now),
                    self._listing(f"{port_dir}/hw_counters", problems, now),
                )
                plan = self._plans.get(port_dir)
                if plan is None or plan.listing != listing or plan.pl != pl:
                    if plan is not None:
                        self.held -= plan.close()
                    plan = _PortPlan(port_dir, listing, pl)
                    self._plans[port_dir] = plan
                self._read_plan(plan, fams, problems)
                port = PortReading(dev_name, port_name)
                _read_port_attrs(port_dir, port, problems, self.reader)
                fams.add_port_attrs(port, pl)
        for gone in [p for p in self._plans if p not in live]:
            self.held -= self._plans.pop(gone).close()
            self._listings.pop(f"{gone}/counters", None)
            self._listings.pop(f"{gone}/hw_counters", None)
        return fams.ordered(), problems
