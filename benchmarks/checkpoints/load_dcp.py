"""Load a PyTorch Distributed Checkpoint as a job's restart does, on the CPU and without a process group (DCP's
no-dist load), and say whether it loaded and what it holds. Run with the benchmarks' torch
(``benchmarks/torch_env.py``)::

    python load_dcp.py DIR [DIR ...]

The state to load into is shaped by the checkpoint's own metadata (every tensor's size and dtype), as a trainer's
model and optimizer would be. Prints one JSON line per directory: ``{"directory", "loaded": bool, "error": <the
exception's type and first line, when it did not>, "digest": <SHA-256 of every loaded tensor's bytes and every
object, in key order: two loads hold the same values exactly when their digests match>, "seconds": <the load's own
time, the template and dcp.load>}``.
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
import time
import warnings
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.metadata import BytesStorageMetadata, TensorStorageMetadata


def _template(directory: str) -> dict[str, Any]:
    metadata = dcp.FileSystemReader(directory).read_metadata()
    state: dict[str, Any] = {}
    for key, item in metadata.state_dict_metadata.items():
        if isinstance(item, TensorStorageMetadata):
            state[key] = torch.zeros(item.size, dtype=item.properties.dtype)
        elif isinstance(item, BytesStorageMetadata):
            state[key] = None
    return state


def _digest(state: dict[str, Any]) -> str:
    h = hashlib.sha256()
    for key in sorted(state):
        value = state[key]
        h.update(key.encode())
        if isinstance(value, torch.Tensor):
            h.update(value.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
        else:
            buffer = io.BytesIO()
            torch.save(value, buffer)
            h.update(buffer.getvalue())
    return h.hexdigest()


def load(directory: str) -> dict[str, object]:
    started = time.monotonic()
    try:
        state = _template(directory)
        dcp.load(state, checkpoint_id=directory)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return {"directory": directory, "loaded": False, "error": f"{type(e).__name__}: {first[:200]}"}
    seconds = time.monotonic() - started
    return {"directory": directory, "loaded": True, "digest": _digest(state), "seconds": round(seconds, 3)}


def main() -> int:
    warnings.filterwarnings("ignore", message="torch.distributed is disabled")
    for directory in sys.argv[1:]:
        print(json.dumps(load(directory)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
