"""Write one real PyTorch Distributed Checkpoint as a job does: ``ranks`` processes (gloo, on the CPU) each save
their shard of a model of ``megabytes`` with ``dcp.save``, then the manifest (``contract/checkpoints.py``, as
``sim/checkpoint_faults.write_manifest`` writes it) when asked. Run with the benchmarks' torch
(``benchmarks/torch_env.py``)::

    python write_dcp.py OUT --ranks 4 --megabytes 256 --step 100 [--manifest]

Prints one JSON line: ``{"seconds": <dcp.save, slowest rank>, "bytes": <on disk>}``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sim.checkpoint_faults import write_manifest

#: One weight's size: 4 MiB of float32.
_CHUNK = 1 << 20


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rank(rank: int, plan: dict[str, Any]) -> None:
    """One rank's save; ``plan``: ranks, port, out, megabytes, step and the shared ``timings``."""
    ranks, out, megabytes, step, timings = (plan[k] for k in ("ranks", "out", "megabytes", "step", "timings"))
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(plan["port"])})
    dist.init_process_group("gloo", rank=rank, world_size=ranks)
    weights = max(1, megabytes * (1 << 20) // (4 * _CHUNK) // ranks)
    generator = torch.Generator().manual_seed(rank)
    state: dict[str, Any] = {
        f"model.layers.{i}.rank{rank}.weight": torch.randn(_CHUNK, generator=generator) for i in range(weights)
    }
    state["optimizer.step"] = torch.tensor(step)
    dist.barrier()
    started = time.monotonic()
    dcp.save(state, checkpoint_id=out)
    timings[rank] = time.monotonic() - started
    dist.barrier()
    dist.destroy_process_group()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("out", type=Path)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--megabytes", type=int, default=64)
    parser.add_argument("--step", type=int, default=100)
    parser.add_argument("--manifest", action="store_true")
    args = parser.parse_args()
    timings = mp.Manager().dict()
    plan = {
        "ranks": args.ranks,
        "port": _free_port(),
        "out": str(args.out),
        "megabytes": args.megabytes,
        "step": args.step,
        "timings": timings,
    }
    mp.spawn(_rank, args=(plan,), nprocs=args.ranks, join=True)
    if args.manifest:
        write_manifest(args.out, args.step)
    size = sum(p.stat().st_size for p in args.out.iterdir())
    print(json.dumps({"seconds": max(timings.values()), "bytes": size}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
