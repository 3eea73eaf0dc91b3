"""The trainer's stand-in for the rendezvous benchmark: one worker of ``torchrun``, over gloo on the CPU.

``torchrun`` starts it with its own environment (``RANK``, ``WORLD_SIZE``, ``GROUP_RANK``, ``LOCAL_RANK``,
``MASTER_ADDR``/``MASTER_PORT`` of the store it formed); it joins the process group, all-reduces its rank + 1 and
writes what it saw to ``$RENDEZVOUS_RESULTS/rank-<rank>.json``. Arguments after the script (``--resume-from=...``
in the example job) are accepted and ignored, as the example's train.py would read them.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist


def main() -> int:
    started = time.monotonic()
    dist.init_process_group(backend="gloo")
    formed = time.monotonic()
    rank, world = dist.get_rank(), dist.get_world_size()
    value = torch.tensor([float(rank + 1)])
    dist.all_reduce(value)
    dist.barrier()
    result = {
        "rank": rank,
        "worldSize": world,
        "groupRank": int(os.environ["GROUP_RANK"]),
        "localRank": int(os.environ["LOCAL_RANK"]),
        "allReduce": value.item(),
        "expected": world * (world + 1) / 2,
        "initSeconds": round(formed - started, 3),
        "hostname": socket.gethostname(),
        "args": sys.argv[1:],
    }
    out = Path(os.environ["RENDEZVOUS_RESULTS"]) / f"rank-{rank}.json"
    out.write_text(json.dumps(result))
    dist.destroy_process_group()
    return 0 if result["allReduce"] == result["expected"] else 1


if __name__ == "__main__":
    sys.exit(main())
