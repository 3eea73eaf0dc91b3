"""A fake of NVIDIA's dcgm-exporter for the simulated cluster: the GPU series our alert rules read, per fake node.

kwok nodes have no GPUs, so no dcgm-exporter runs on them; this one process stands for the exporter of every
node and serves, on ``GET /metrics``, the Prometheus text dcgm-exporter serves (its metric names and its labels
``gpu``, ``UUID``, ``device``, ``modelName``, ``Hostname``): ``DCGM_FI_DEV_GPU_TEMP`` (°C),
``DCGM_FI_DEV_GPU_UTIL`` (%), ``DCGM_FI_PROF_PIPE_TENSOR_ACTIVE`` (ratio) and ``DCGM_FI_DEV_XID_ERRORS`` (last XID),
each with the counters CSV's label fields (``DCGM_FI_DRIVER_VERSION``, ``DCGM_FI_DEV_SERIAL``).
``Hostname`` is the node name, as dcgm-exporter reports it in a pod with ``NODE_NAME`` set; ``--host-label
hostname`` writes it as dcgm-exporter's next release does (NVIDIA/dcgm-exporter#655, ``contract/dcgm.py``).

Pod mapping, as dcgm-exporter 4.2.0 does it (``internal/pkg/transformation/kubernetes.go``; our chart values turn
it on): the series of a GPU that a pod's container holds also carry ``pod``, ``namespace`` and ``container``, and,
with ``--enable-pod-labels`` (the chart's ``kubernetes.enablePodLabels``), every label of the pod with its name
sanitised the way ``utils.SanitizeLabelName`` does (each character outside ``[a-zA-Z0-9_]`` becomes ``_``:
``gpucluster.io/training-job`` -> ``gpucluster_io_training_job``). A GPU nobody holds carries none of them. The
real exporter asks the kubelet's pod-resources socket which device IDs the device plugin gave each container;
kwok has neither, so with ``--kubeconfig`` this fake lists the Running pods bound to its nodes on each scrape and
gives each container that asks for ``nvidia.com/gpu`` (its limit) the lowest free indices of its node, keeping a
container's GPUs for its life as the device plugin does. What it does not model: MIG and shared GPUs, the
pod-resources call failing (the list failing here serves the GPUs unmapped until the next scrape), a stale
informer cache. The pod labels arrive with the first scrape after the pod runs, never sooner.

Faults are set through ``POST /admin/gpu`` with a JSON object ``{"node": ..., "gpu": 0, "temperature": 85}`` (any
of ``temperature``, ``util``, ``tensorActive``, ``xid``), ``POST /admin/reset`` puts every GPU back at rest, and
``GET /admin/state`` returns every GPU's values. The program's load is set per pod, as the fake trainer plays it:
``POST /admin/load`` with ``{"pods": [{"namespace": ..., "pod": ..., "util": 97, "tensorActive": 0.45}]}`` replaces
every pod's load; the GPUs a listed pod holds (the pod mapping below) show its ``util`` and ``tensorActive`` instead
of their own, and go back to their own when it is no longer listed or holds them no more. Nodes and their GPU
counts come from the stack (``sim/nodes.py``).

The same process stands for our fabric exporter's InfiniBand data counters (``GET /fabric/metrics``:
``gpucluster_fabric_infiniband_port_transmit_data_bytes_total`` and ``..._receive_...`` per node, HCA and port,
each node's four HCAs as ``mlx5_0``..``mlx5_3``), so the stall detector reads traffic that follows the program: a
GPU a pod holds that computes (tensor activity above zero) makes its node exchange gradients at
``FABRIC_BYTES_PER_TENSOR`` x activity bytes a second both ways, spread over the HCAs; a hung, writing or idle
gang moves nothing but the subnet manager's trickle (``FABRIC_BACKGROUND`` bytes a second a port), which every real
port shows too. The counters advance with the wall clock between scrapes, 64 bits wide. What it does not model:
link errors and transport counters (the fleet benchmark's fakes play those), a collective that moves data while
the tensor cores idle (NCCL's own hang with a spinning proxy thread), uneven traffic between HCAs.

``python sim/fake_dcgm.py --listen 127.0.0.1:18094 [--stack FILE] [--kubeconfig FILE [--enable-pod-labels]]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from contract.dcgm import HOST_LABELS  # noqa: E402 (run as a script: the repository first on the path)
from sim import nodes as sim_nodes  # noqa: E402

#: A GPU at rest: cool, idle.
REST = {"temperature": 45.0, "util": 0.0, "tensor_active": 0.0, "xid": 0.0}
FIELDS = {"temperature": "temperature", "util": "util", "tensorActive": "tensor_active", "xid": "xid"}
SERIES = (
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", "temperature"),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", "util"),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Ratio of cycles the tensor (HMMA) pipe is active.", "tensor_active"),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", "xid"),
)
#: Gradient traffic a node's NICs carry per unit of tensor activity of each GPU it holds for a pod (bytes a second,
#: both ways): about 9 GB/s for a GPU at 0.45, the order of an 8-GPU node's all-reduce share on 4 x 400 Gb/s.
FABRIC_BYTES_PER_TENSOR = 2.5e9
#: What a quiet port still moves a second (subnet management, keep-alives).
FABRIC_BACKGROUND = 2048.0
HCAS = ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3")
FABRIC_SERIES = (
    ("gpucluster_fabric_infiniband_port_transmit_data_bytes_total", "Data octets transmitted on the port."),
    ("gpucluster_fabric_infiniband_port_receive_data_bytes_total", "Data octets received on the port."),
)
MAX_BODY = 1 << 20  # /admin/load lists every pod of every gang
#: The counters CSV's ``label`` fields (components/telemetry/counters.py) other than the serial, as dcgm-exporter
#: adds them to every series.
LABEL_FIELDS = 'DCGM_FI_DRIVER_VERSION="570.133.20",'
#: The device plugin's resource (dcgm-exporter's ``appconfig.NvidiaResourceName``).
GPU_RESOURCE = "nvidia.com/gpu"
#: dcgm-exporter's ``invalidLabelCharRE`` (``internal/pkg/utils/utils.go``), copied, not derived from ours.
_INVALID_LABEL_CHAR = re.compile(r"[^a-zA-Z0-9_]")


def sanitize_label_name(name: str) -> str:
    """dcgm-exporter's ``utils.SanitizeLabelName``."""
    return _INVALID_LABEL_CHAR.sub("_", name)


@dataclass(frozen=True)
class PodInfo:
    """The container holding a GPU, as dcgm-exporter's pod mapper attaches it."""

    name: str
    namespace: str
    container: str
    #: The pod's labels, names sanitised; empty without --enable-pod-labels.
    labels: tuple[tuple[str, str], ...] = ()

    def attributes(self) -> list[tuple[str, str]]:
        # As dcgm-exporter's template renders them (internal/pkg/rendermetrics): the labels, then the attributes,
        # each written even when a pod label has an attribute's name; Prometheus then refuses the whole scrape for
        # the duplicate label name, and the node's GPUs go unwatched.
        own = {"pod": self.name, "namespace": self.namespace, "container": self.container}
        return list(self.labels) + list(own.items())


def _gpu_limit(container: Mapping[str, Any]) -> int:
    limits = (container.get("resources") or {}).get("limits") or {}
    try:
        return max(0, int(str(limits.get(GPU_RESOURCE, 0))))
    except ValueError:
        return 0


class Allocator:
    """Which container holds which GPU of each node, kept for the container's life (the device plugin's part)."""

    def __init__(self, gpus_per_node: Mapping[str, int], pod_labels: bool) -> None:
        self._capacity = dict(gpus_per_node)
        self._pod_labels = pod_labels
        #: (node, index) -> (pod uid, PodInfo)
        self._held: dict[tuple[str, int], tuple[str, PodInfo]] = {}

    def update(self, pods: Iterable[Mapping[str, Any]]) -> dict[tuple[str, int], PodInfo]:
        """Follow the Running pods bound to our nodes; the GPUs each container now holds."""
        running: list[tuple[str, str, str, str, Mapping[str, Any]]] = []
        for pod in pods:
            meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
            node = spec.get("nodeName") or ""
            if node in self._capacity and (pod.get("status") or {}).get("phase") == "Running":
                key = (str(meta.get("creationTimestamp") or ""), str(meta.get("namespace")), str(meta.get("name")))
                running.append((*key, node, pod))
        alive = {str((p.get("metadata") or {}).get("uid") or "") for *_, p in running}
        self._held = {k: v for k, v in self._held.items() if v[0] in alive}
        for _created, namespace, name, node, pod in sorted(running, key=lambda r: r[:3]):
            meta = pod.get("metadata") or {}
            uid = str(meta.get("uid") or "")
            labels = (
                tuple(sorted((sanitize_label_name(k), str(v)) for k, v in (meta.get("labels") or {}).items()))
                if self._pod_labels
                else ()
            )
            for c in (pod.get("spec") or {}).get("containers") or []:
                info = PodInfo(name, namespace, str(c.get("name") or ""), labels)
                have = [k for k, v in self._held.items() if v[0] == uid and v[1].container == info.container]
                want = _gpu_limit(c) - len(have)
                free = [(node, i) for i in range(self._capacity[node]) if (node, i) not in self._held]
                for k in free[: max(0, want)]:
                    self._held[k] = (uid, info)
                for k in have:  # the labels may have changed since
                    self._held[k] = (uid, info)
        return {k: v[1] for k, v in self._held.items()}


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

    @property
    def serial(self) -> str:
        """A 13-digit board serial, as NVML reports one; stable like the UUID."""
        return f"{zlib.crc32(f'serial/{self.node}/{self.index}'.encode()):013d}"


class Fleet:
    """Every fake GPU, behind one lock; ``list_pods`` (None: no pod mapping) is called on each scrape."""

    def __init__(
        self,
        gpus: Sequence[Gpu],
        list_pods: Callable[[], list[Mapping[str, Any]]] | None = None,
        pod_labels: bool = False,
        clock: Callable[[], float] = time.monotonic,
        host_label: str = HOST_LABELS[0],
    ) -> None:
        if host_label not in HOST_LABELS:
            raise ValueError(f"host_label {host_label!r}: dcgm-exporter writes one of {', '.join(HOST_LABELS)}")
        self._host_label = host_label
        self._gpus = {(g.node, g.index): g for g in gpus}
        self._clock = clock
        self._lock = threading.Lock()
        self._list_pods = list_pods
        #: (namespace, pod) -> (util, tensor activity) the program puts on the GPUs the pod holds.
        self._loads: dict[tuple[str, str], tuple[float, float]] = {}
        per_node: dict[str, int] = {}
        for g in gpus:
            per_node[g.node] = max(per_node.get(g.node, 0), g.index + 1)
        self._allocator = Allocator(per_node, pod_labels)
        #: node -> bytes each of its ports moved each way so far, and when last advanced.
        self._fabric: dict[str, float] = dict.fromkeys(per_node, 0.0)
        self._fabric_at = clock()

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
            self._loads = {}
            for gpu in self._gpus.values():
                for attr, value in REST.items():
                    setattr(gpu, attr, value)

    def set_loads(self, body: Any) -> str | None:
        """Apply one ``/admin/load`` request (every pod's load at once); the problem, or None."""
        pods = body.get("pods") if isinstance(body, dict) else None
        if not isinstance(pods, list):
            return 'expected {"pods": [{"namespace", "pod", "util", "tensorActive"}, ...]}'
        loads: dict[tuple[str, str], tuple[float, float]] = {}
        for i, p in enumerate(pods):
            if not isinstance(p, dict) or set(p) != {"namespace", "pod", "util", "tensorActive"}:
                return f"pods[{i}]: expected exactly namespace, pod, util and tensorActive"
            util, tensor = p["util"], p["tensorActive"]
            if any(isinstance(v, bool) or not isinstance(v, int | float) for v in (util, tensor)):
                return f"pods[{i}]: util and tensorActive must be numbers"
            if not (0 <= util <= 100 and 0 <= tensor <= 1):
                return f"pods[{i}]: util must be 0-100 and tensorActive 0-1"
            loads[(str(p["namespace"]), str(p["pod"]))] = (float(util), float(tensor))
        with self._lock:
            self._loads = loads
        return None

    def state(self) -> list[dict[str, Any]]:
        with self._lock:
            return [{**asdict(g), "uuid": g.uuid, "serial": g.serial} for g in self._gpus.values()]

    def holders(self) -> dict[tuple[str, int], PodInfo]:
        """Which container holds each GPU now; empty without pod mapping or when the pods cannot be listed."""
        if self._list_pods is None:
            return {}
        try:
            pods = self._list_pods()
        except Exception as e:  # any failure of the list: serve the GPUs unmapped
            print(f"fake dcgm-exporter: listing pods failed, serving unmapped: {e}", file=sys.stderr, flush=True)
            return {}
        with self._lock:
            return self._allocator.update(pods)

    def _node_rates(self, holders: Mapping[tuple[str, int], PodInfo]) -> dict[str, float]:
        """Bytes a second each port of each node moves each way now (under the lock)."""
        rates = dict.fromkeys(self._fabric, FABRIC_BACKGROUND)
        for (node, _index), holder in holders.items():
            load = self._loads.get((holder.namespace, holder.name))
            if load is not None and node in rates:
                rates[node] += FABRIC_BYTES_PER_TENSOR * load[1] / len(HCAS)
        return rates

    def fabric_exposition(self) -> str:
        holders = self.holders()
        lines: list[str] = []
        with self._lock:
            now = self._clock()
            elapsed, self._fabric_at = now - self._fabric_at, now
            for node, rate in self._node_rates(holders).items():
                self._fabric[node] += rate * elapsed
            for metric, help_text in FABRIC_SERIES:
                lines += [f"# HELP {metric} {help_text}", f"# TYPE {metric} counter"]
                for node, moved in self._fabric.items():
                    lines += [f'{metric}{{node="{node}",device="{hca}",port="1"}} {int(moved)}' for hca in HCAS]
        return "\n".join(lines) + "\n"

    def exposition(self) -> str:
        holders = self.holders()
        lines: list[str] = []
        with self._lock:
            gpus = list(self._gpus.values())
            for metric, kind, help_text, attr in SERIES:
                lines += [f"# HELP {metric} {help_text}", f"# TYPE {metric} {kind}"]
                for g in gpus:
                    labels = (
                        f'gpu="{g.index}",UUID="{g.uuid}",device="nvidia{g.index}",modelName="{g.model}",'
                        f'{self._host_label}="{g.node}",{LABEL_FIELDS}DCGM_FI_DEV_SERIAL="{g.serial}"'
                    )
                    holder = holders.get((g.node, g.index))
                    value = getattr(g, attr)
                    if holder is not None:
                        labels += "".join(f',{k}="{_escape(v)}"' for k, v in holder.attributes())
                        load = self._loads.get((holder.namespace, holder.name))
                        if load is not None and attr in ("util", "tensor_active"):
                            value = load[0] if attr == "util" else load[1]
                    lines.append(f"{metric}{{{labels}}} {value:g}")
        return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def admin(path: str, body: dict[str, Any] | None = None, url: str = "http://127.0.0.1:18094") -> Any:
    """One admin call to a running fake (``/admin/gpu`` with a body, ``/admin/reset``, ``/admin/state``)."""
    import urllib.request  # noqa: PLC0415 (clients only)

    data = None if body is None and path == "/admin/state" else json.dumps(body or {}).encode()
    req = urllib.request.Request(f"{url}{path}", data=data, method="GET" if data is None else "POST")
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=5) as reply:
        return json.loads(reply.read())


def fleet_of(
    stack_file: Path,
    list_pods: Callable[[], list[Mapping[str, Any]]] | None = None,
    pod_labels: bool = False,
    host_label: str = HOST_LABELS[0],
) -> Fleet:
    gpus: list[Gpu] = []
    for flavor in sim_nodes.load_flavors(stack_file):
        model = flavor.node_labels.get("nvidia.com/gpu.product", flavor.name)
        for i in range(flavor.node_count):
            node = sim_nodes.node_name(flavor, i)
            gpus += [Gpu(node, g, model) for g in range(flavor.gpus_per_node)]
    return Fleet(gpus, list_pods, pod_labels, host_label=host_label)


def pod_lister(kubeconfig: Path) -> Callable[[], list[Mapping[str, Any]]]:
    """Running pods of every namespace, through the API server (2 s timeout)."""
    from daemons.toolkit.kube import load_kube_config  # noqa: PLC0415 (only with --kubeconfig)
    from daemons.toolkit.kube_api import KubeApi  # noqa: PLC0415

    api = KubeApi(load_kube_config(str(kubeconfig)), 2.0, "fake-dcgm-exporter")

    def list_pods() -> list[Mapping[str, Any]]:
        return api.list_all("/api/v1/pods", "list running pods", [("fieldSelector", "status.phase=Running")])

    return list_pods


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
            elif self.path == "/fabric/metrics":
                self._send(200, fleet.fabric_exposition(), "text/plain; version=0.0.4")
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
            if self.path not in ("/admin/gpu", "/admin/load"):
                self._send(404, json.dumps({"error": f"no {self.path}"}))
                return
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._send(400, json.dumps({"error": "the body is not JSON"}))
                return
            problem = fleet.set(body) if self.path == "/admin/gpu" else fleet.set_loads(body)
            self._send(400 if problem else 200, json.dumps({"error": problem} if problem else {"set": body}))

    return Handler


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sim/fake_dcgm.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--listen", default="127.0.0.1:18094", help="HOST:PORT to serve on")
    parser.add_argument("--stack", type=Path, default=sim_nodes.DEFAULT_STACK, help="the stack whose nodes to fake")
    parser.add_argument(
        "--kubeconfig", type=Path, help="map GPUs to the pods holding them (dcgm-exporter's pod mapping)"
    )
    parser.add_argument(
        "--enable-pod-labels", action="store_true", help="copy the pod's labels, names sanitised (needs --kubeconfig)"
    )
    parser.add_argument(
        "--host-label",
        choices=HOST_LABELS,
        default=HOST_LABELS[0],
        help="the node's label: Hostname (dcgm-exporter up to 4.8.2) or hostname (its next release)",
    )
    args = parser.parse_args(argv)
    if args.enable_pod_labels and args.kubeconfig is None:
        parser.error("--enable-pod-labels needs --kubeconfig")
    host, _, port = args.listen.rpartition(":")
    try:
        lister = pod_lister(args.kubeconfig) if args.kubeconfig else None
        fleet = fleet_of(args.stack, lister, args.enable_pod_labels, args.host_label)
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
