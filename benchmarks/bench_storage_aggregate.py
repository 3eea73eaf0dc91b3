"""Aggregate against single-host write bandwidth, on this machine, and the checkpoint interval each gives.

Real fio 3.x (``make debian-deps``) in its client/server mode, as ``ansible/playbooks/storage_aggregate.yml`` runs
it: a server on each of N loopback addresses standing for N hosts, one client sending them all the role's direct-I/O
write job into one directory (the shared mount), parsed by the role's own filter
(``ansible/roles/storage_acceptance/filter_plugins``). One host alone first: the per-node check's figure, which it
multiplies by the writers; then every host at once: the figure a shared file system really gives. Each becomes a
write time for the prod stack's checkpoint (``storage.checkpointing.sizeTb``) extrapolated to its 64 nodes, and the
Young/Daly interval under the stack's prior for 64 nodes. This machine's one disk stands for the parallel file system:
the figures say how far the per-node multiplication is from writing together, not what a Lustre or CephFS gives.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from components.config import load_stack_file  # noqa: E402
from contract.storage_settings import checkpoint_interval_seconds  # noqa: E402

STACK = ROOT / "stacks" / "Pulumi.prod.yaml"
FILTER = ROOT / "ansible" / "roles" / "storage_acceptance" / "filter_plugins" / "storage_acceptance.py"
JOB_NODES = 64
JOB = """[checkpoint-write]
directory={directory}
filename_format=.gpucluster-aggregate.$clientuid.$jobnum
rw=write
size={size}
bs={block}
iodepth=16
ioengine=libaio
direct=1
numjobs=1
unlink=1
"""


def role_filter() -> ModuleType:
    spec = importlib.util.spec_from_file_location("storage_acceptance_filter", FILTER)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(fio: str, hosts: int, job: Path, scratch: Path) -> tuple[dict[str, float], float]:
    """Per-host write rates and the aggregate, with ``hosts`` servers written to at once."""
    port = free_port()
    addresses = [f"127.0.{100 + i}.1" for i in range(hosts)]
    pids = [scratch / f"server-{hosts}-{i}.pid" for i in range(hosts)]
    for address, pid in zip(addresses, pids, strict=True):
        subprocess.run([fio, f"--server=ip:{address},{port}", f"--daemonize={pid}"], check=True)
    try:
        proc = subprocess.run(
            [fio, *(f"--client=ip:{a},{port}" for a in addresses), "--output-format=json", str(job)],
            capture_output=True,
            text=True,
            check=False,
            timeout=600,
        )
        if proc.returncode != 0:
            raise SystemExit(f"fio client failed: {proc.stderr.strip()[:500]}")
        rates, total = role_filter().fio_client_bandwidths(proc.stdout)
        return dict(rates), float(total)
    finally:
        for pid in pids:
            subprocess.run(["pkill", "--pidfile", str(pid)], check=False)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--hosts", type=int, default=4, help="hosts writing at once")
    parser.add_argument("--size", default="256M", help="what each host writes, in fio's notation")
    parser.add_argument("--block", default="16M")
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temporary directory)")
    args = parser.parse_args(argv)
    fio = shutil.which("fio")
    if fio is None:
        raise SystemExit("fio is not installed: run make debian-deps")
    prior = load_stack_file(STACK).storage.checkpointing
    mtbf = prior.job_mtbf_seconds(JOB_NODES)
    checkpoint = prior.size_tb * 1e12
    with tempfile.TemporaryDirectory(prefix="bench-storage-", dir=args.dir) as tmp:
        scratch = Path(tmp)
        shared = scratch / "shared"
        shared.mkdir()
        job = scratch / "job.fio"
        job.write_text(JOB.format(directory=shared, size=args.size, block=args.block))
        _, alone = run(fio, 1, job, scratch)
        rates, together = run(fio, args.hosts, job, scratch)
    slowest = min(rates.values())
    per_node = alone * JOB_NODES
    print(f"direct write with fio, {args.size} per host in {args.block} blocks, this machine's one disk:")
    print(f"  one host alone:               {alone / 1e9:6.3f} GB/s")
    print(
        f"  {args.hosts} hosts at once, aggregate:    {together / 1e9:6.3f} GB/s "
        f"(slowest host {slowest / 1e9:.3f} GB/s, {together / alone:.2f}x one host, not {args.hosts}x)"
    )
    print(
        f"\nthe prod stack's {prior.size_tb:g} TB checkpoint on {JOB_NODES} nodes, Young/Daly under its prior "
        f"({mtbf / 3600:.0f} h between interruptions):"
    )
    print(f"{'':44} {'write s':>9} {'interval s':>11}")
    rows = [
        ("typed in the stack (writeSeconds)", prior.write_seconds),
        (f"per-node check: one host x {JOB_NODES}", checkpoint / per_node),
        (f"measured: {args.hosts} hosts at once (this disk)", checkpoint / together),
    ]
    for name, write in rows:
        print(f"  {name:<42} {write:>9.0f} {checkpoint_interval_seconds(write, mtbf):>11.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
