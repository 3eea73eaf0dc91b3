"""A fake of NVIDIA's dcgm-exporter for the simulated cluster: the GPU series our alert rules read, per fake node.

kwok nodes have no GPUs, so no dcgm-exporter runs on them; this one process stands for the exporter of every
node and serves, on ``GET /metrics``, the Prometheus text dcgm-exporter serves (its metric names and its labels
``gpu``, ``UUID``, ``device``, ``modelName``, ``Hostname``): ``DCGM_FI_DEV_GPU_TEMP`` (°C),
``DCGM_FI_DEV_GPU_UTIL`` (%), ``DCGM_FI_PROF_PIPE_TENSOR_ACTIVE`` (ratio) and ``DCGM_FI_DEV_XID_ERRORS`` (last XID).
``Hostname`` is the node name, as dcgm-exporter reports it in a pod with ``NODE_NAME`` set.

Faults are set through ``POST /admin/gpu`` with a JSON object ``{"node": ..., "gpu": 0, "temperature": 85}`` (any
of ``temperature``, ``util``, ``tensorActive``, ``xid``), ``POST /admin/reset`` puts every GPU back at rest, and
``GET /admin/state`` returns every GPU's values. Nodes and their GPU counts come from the stack (``sim/nodes.py``).

``python sim/fake_dcgm.py --listen 127.0.0.1:18094 [--stack FILE]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import threading
import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sim import nodes as sim_nodes  # noqa: E402 (run as a script: the repository first on the path)

#: A GPU at rest: cool, idle.
REST = {"temperature": 45.0, "util": 0.0, "tensor_active": 0.0, "xid": 0.0}
FIELDS = {"temperature": "temperature", "util": "util", "tensorActive": "tensor_active", "xid": "xid"}
SERIES = (
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", "temperature"),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", "util"),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Ratio of cycles the tensor (HMMA) pipe is active.", "tensor_active"),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", "xid"),
)
MAX_BODY = 4096


@dataclass
class Gpu:
    node: str
    index: int
    model: str
    temperature: float = REST["temperature"]
    util: float = REST["util"]
    tensor_active: float = REST["tensor_active"]
    xid: float = REST["xid"]

    @property
    def uuid(self) -> str:
        # stable across restarts, so a restarted fake keeps its series
        return f"GPU-{zlib.crc32(f'{self.node}/{self.index}'.encode()):010d}"


class Fleet:
    """Every fake GPU, behind one lock."""

    def __init__(self, gpus: Sequence[Gpu]) -> None:
        self._gpus = {(g.node, g.index): g for g in gpus}
        self._lock = threading.Lock()

    def set(self, body: Any) -> str | None:
        """Apply one ``/admin/gpu`` request; the problem, or None."""
        if not isinstance(body, dict):
            return "expected a JSON object"
        key = (body.get("node"), body.get("gpu", 0))
        unknown = sorted(set(body) - {"node", "gpu", *FIELDS})
        if unknown:
            return f"unknown keys {unknown} (known: node, gpu, {', '.join(FIELDS)})"
        with self._lock:
            gpu = self._gpus.get(key)  # type: ignore[arg-type]
            if gpu is None:
                return f"no GPU {key[1]!r} on node {key[0]!r}"
            for name, attr in FIELDS.items():
                if name in body:
                    value = body[name]
                    if isinstance(value, bool) or not isinstance(value, int | float):
                        return f"{name} must be a number"
                    setattr(gpu, attr, float(value))
        return None

    def reset(self) -> None:
        with self._lock:
            for gpu in self._gpus.values():
                for attr, value in REST.items():
                    setattr(gpu, attr, value)

    def state(self) -> list[dict[str, Any]]:
        with self._lock:
            return [asdict(g) for g in self._gpus.values()]

    def exposition(self) -> str:
        lines: list[str] = []
        with self._lock:
            gpus = list(self._gpus.values())
            for metric, kind, help_text, attr in SERIES:
                lines += [f"# HELP {metric} {help_text}", f"# TYPE {metric} {kind}"]
                for g in gpus:
                    labels = (
                        f'gpu="{g.index}",UUID="{g.uuid}",device="nvidia{g.index}",modelName="{g.model}",'
                        f'Hostname="{g.node}"'
                    )
                    lines.append(f"{metric}{{{labels}}} {getattr(g, attr):g}")
        return "\n".join(lines) + "\n"


def admin(path: str, body: dict[str, Any] | None = None, url: str = "http://127.0.0.1:18094") -> Any:
    """One admin call to a running fake (``/admin/gpu`` with a body, ``/admin/reset``, ``/admin/state``)."""
    import urllib.request  # noqa: PLC0415 (clients only)

    data = None if body is None and path == "/admin/state" else json.dumps(body or {}).encode()
    req = urllib.request.Request(f"{url}{path}", data=data, method="GET" if data is None else "POST")
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=5) as reply:
        return json.loads(reply.read())


def fleet_of(stack_file: Path) -> Fleet:
    gpus: list[Gpu] = []
    for flavor in sim_nodes.load_flavors(stack_file):
        model = flavor.node_labels.get("nvidia.com/gpu.product", flavor.name)
        for i in range(flavor.node_count):
            node = sim_nodes.node_name(flavor, i)
            gpus += [Gpu(node, g, model) for g in range(flavor.gpus_per_node)]
    return Fleet(gpus)


def handler(fleet: Fleet) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "fake-dcgm-exporter"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def _send(self, status: int, body: str, content_type: str = "application/json") -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/metrics":
                self._send(200, fleet.exposition(), "text/plain; version=0.0.4")
            elif self.path == "/admin/state":
                self._send(200, json.dumps(fleet.state()))
            else:
                self._send(404, json.dumps({"error": f"no {self.path}"}))

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self._send(413, json.dumps({"error": f"body over {MAX_BODY} bytes"}))
                return
            raw = self.rfile.read(length)
            if self.path == "/admin/reset":
                fleet.reset()
                self._send(200, json.dumps({"reset": True}))
                return
            if self.path != "/admin/gpu":
                self._send(404, json.dumps({"error": f"no {self.path}"}))
                return
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._send(400, json.dumps({"error": "the body is not JSON"}))
                return
            problem = fleet.set(body)
            self._send(400 if problem else 200, json.dumps({"error": problem} if problem else {"set": body}))

    return Handler


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sim/fake_dcgm.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--listen", default="127.0.0.1:18094", help="HOST:PORT to serve on")
    parser.add_argument("--stack", type=Path, default=sim_nodes.DEFAULT_STACK, help="the stack whose nodes to fake")
    args = parser.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    try:
        fleet = fleet_of(args.stack)
    except sim_nodes.InventoryError as e:
        print(f"sim/fake_dcgm.py: error: {e}", file=sys.stderr)
        return 2
    server = ThreadingHTTPServer((host or "127.0.0.1", int(port)), handler(fleet))
    print(f"fake dcgm-exporter on http://{args.listen}/metrics", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
