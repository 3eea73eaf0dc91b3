"""Client-side statistics of the parallel filesystems a node mounts: NFS (``mountstats``) and Lustre (llite).

**NFS** (``/proc/<pid>/mountstats``, what ``mountstats(8)`` and ``nfsiostat`` read): one ``device <export>
mounted on <path> with fstype nfs|nfs4 statvers=1.1`` block per mount, whose ``bytes:`` line counts the bytes the
applications read and wrote (``normal`` through the page cache, ``direct`` with O_DIRECT) and the bytes that crossed
the wire (``server``), and whose ``per-op statistics`` give each RPC's calls, transmissions, major timeouts, bytes,
queue/RTT/execute milliseconds and (kernel 5.x, a ninth column) errors. Every mount of one export shares one client
(the kubelet mounts a volume once per pod): the counters are the export's, so one series per export, not per mount.

**Lustre** (``llite/<fsname>-<instance>/stats``, in ``/proc/fs/lustre`` up to 2.11 and in debugfs since): one line per
operation, ``<op> <samples> samples [<unit>] [<min> <max> <sum> [<sumsq>]]``; ``read_bytes`` and ``write_bytes``
sum the bytes of every read and write the client served.

Parsers are pure (text in, readings and problems out) and held to real captured files (procfs's ``mountstats``
fixture, lustre_exporter's llite ``stats``, ``tests/fixtures/filesystems/``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

#: NFS RPCs whose counters are exported per op (reads and writes are the checkpoint's and the data loader's).
NFS_OPS = ("READ", "WRITE", "COMMIT")
#: The fstypes of an NFS client mount.
NFS_FSTYPES = ("nfs", "nfs4")
#: Largest counter believed (2^64 - 1: the kernel's u64; one kernel wrote garbage near it, see the tests).
MAX_COUNTER = 2**64 - 1

_DEVICE = re.compile(r"^device (\S+) mounted on (\S+) with fstype (\S+)(?: statvers=(\S+))?\s*$")


@dataclass(frozen=True)
class NfsOp:
    calls: int
    transmissions: int
    major_timeouts: int
    bytes_sent: int
    bytes_received: int
    queue_ms: int
    rtt_ms: int
    execute_ms: int
    #: None before kernels that count RPC errors per op (the ninth column).
    errors: int | None = None


@dataclass(frozen=True)
class NfsMount:
    #: ``server:/export``: the series' identity (every mount of it shares these counters).
    export: str
    mountpoint: str
    fstype: str
    #: normal and direct reads and writes by applications, and bytes read and written on the wire.
    read_bytes: int
    write_bytes: int
    direct_read_bytes: int
    direct_write_bytes: int
    server_read_bytes: int
    server_write_bytes: int
    ops: dict[str, NfsOp] = field(default_factory=dict)


@dataclass(frozen=True)
class ParseProblem:
    where: str
    reason: str


def _ints(fields: list[str], where: str) -> list[int]:
    values = []
    for f in fields:
        if not f.isdigit():
            raise ValueError(f"{where}: {f[:40]!r} is not a counter")
        value = int(f)
        if value > MAX_COUNTER:
            raise ValueError(f"{where}: {value} is beyond a 64-bit counter")
        values.append(value)
    return values


def _nfs_mount(export: str, mountpoint: str, fstype: str, lines: list[str]) -> NfsMount:
    where = f"mountstats {export} on {mountpoint}"
    byte_counts: list[int] | None = None
    ops: dict[str, NfsOp] = {}
    in_ops = False
    for line in lines:
        text = line.strip()
        if text.startswith("bytes:"):
            byte_counts = _ints(text.split()[1:], f"{where} bytes")
            if len(byte_counts) < 8:
                raise ValueError(f"{where}: bytes: holds {len(byte_counts)} counters, not 8")
        elif text == "per-op statistics":
            in_ops = True
        elif in_ops and ":" in text:
            name, _, rest = text.partition(":")
            if name in NFS_OPS:
                values = _ints(rest.split(), f"{where} {name}")
                if len(values) < 8:
                    raise ValueError(f"{where}: {name} holds {len(values)} counters, not 8 or 9")
                calls, trans, timeouts, sent, received, queue, rtt, execute = values[:8]
                ops[name] = NfsOp(
                    calls, trans, timeouts, sent, received, queue, rtt, execute, values[8] if len(values) > 8 else None
                )
    if byte_counts is None:
        raise ValueError(f"{where}: no bytes: line (statvers 1.0, or a cut block)")
    normal_r, normal_w, direct_r, direct_w, server_r, server_w = byte_counts[:6]
    return NfsMount(
        export=export,
        mountpoint=mountpoint,
        fstype=fstype,
        read_bytes=normal_r,
        write_bytes=normal_w,
        direct_read_bytes=direct_r,
        direct_write_bytes=direct_w,
        server_read_bytes=server_r,
        server_write_bytes=server_w,
        ops=ops,
    )


def parse_mountstats(text: str) -> tuple[list[NfsMount], list[ParseProblem]]:
    """Every NFS client mount of ``text``, one per export (the first mount of each), and a problem for each NFS block
    that does not read (the others are still returned)."""
    blocks: list[tuple[str, str, str, list[str]]] = []
    problems: list[ParseProblem] = []
    for line in text.splitlines():
        if line.startswith("device "):
            found = _DEVICE.match(line)
            if found is None:
                problems.append(ParseProblem("mountstats", f"unreadable mount line {line[:120]!r}"))
                blocks.append(("", "", "", []))  # its indented lines belong to no NFS mount
                continue
            blocks.append((found.group(1), found.group(2), found.group(3), []))
        elif blocks:
            blocks[-1][3].append(line)
    mounts: dict[str, NfsMount] = {}
    for export, mountpoint, fstype, lines in blocks:
        if fstype not in NFS_FSTYPES or export in mounts:
            continue
        try:
            mounts[export] = _nfs_mount(export, mountpoint, fstype, lines)
        except ValueError as e:
            problems.append(ParseProblem(f"mountstats {export}", str(e)))
    return list(mounts.values()), problems


@dataclass(frozen=True)
class LliteStats:
    #: ``<fsname>-<instance>``, the llite directory's name.
    instance: str
    read_bytes: int
    write_bytes: int
    #: samples of every operation (``open``, ``close``, ``getattr``, ...; ``read_bytes``/``write_bytes``: calls).
    ops: dict[str, int]


def parse_llite_stats(instance: str, text: str) -> LliteStats:
    """One llite ``stats`` file; ValueError naming the line that does not read."""
    sums = {"read_bytes": 0, "write_bytes": 0}
    ops: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if not fields or fields[0] == "snapshot_time" or fields[0].endswith("_time"):
            continue
        where = f"llite {instance} stats line {number}"
        if len(fields) < 4 or fields[2] != "samples":
            raise ValueError(f"{where}: {line[:120]!r} is not '<op> <n> samples [<unit>] ...'")
        (samples,) = _ints([fields[1]], where)
        ops[fields[0]] = samples
        if fields[0] in sums:
            if len(fields) < 7 or fields[3] != "[bytes]":
                raise ValueError(f"{where}: {fields[0]} has no byte sum")
            (sums[fields[0]],) = _ints([fields[6]], where)
    return LliteStats(instance=instance, read_bytes=sums["read_bytes"], write_bytes=sums["write_bytes"], ops=ops)
