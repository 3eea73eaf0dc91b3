"""The simulated cluster's Services as kube-proxy makes them, and a model server behind every in-cluster replica.

kwok pods run nothing and their IPs lead nowhere, so on the simulated cluster no request could reach an inference
replica. This process makes the path real: one TCP listener per InferenceService on loopback (``SERVING_PORT_BASE``
plus the service's index in the stack) stands for the Service's cluster IP, and every in-cluster replica gets the
same model-server stand-in the fake cloud gives a rented one (``sim/fakes/replica.py``) on a
loopback port of its own. Rented replicas answer on their own addresses (the fakes' routed range).

Routing is kube-proxy's (iptables mode), per connection:

- endpoints come from the Service's EndpointSlices only, never from pods: the ready ones, or, when none is ready,
  the serving and terminating ones (kube-proxy's terminating-endpoints fallback, GA in Kubernetes 1.28);
- a new connection goes to one of them at random; an established one stays with its endpoint (conntrack) until a
  side closes it, even after the endpoint left the slice;
- a connection to an endpoint that refuses is reset to the client: no retry on another endpoint;
- the table is re-read every ``SYNC_SECONDS`` (kube-proxy's ``minSyncPeriod`` is 1 s): a change reaches traffic up
  to a second late.

An in-cluster stand-in answers 503 until its pod is Ready (the kwok stage that plays its readiness probe) and 200
after. Once the pod is being deleted it keeps serving for its preStop sleep (``lifecycle.preStop.sleep.seconds``,
0 without one), then refuses, as a server that stops on SIGTERM does.

Each proxy also counts the HTTP requests it carries (the request heads in the client's bytes) and serves the
counts on ``--metrics-port`` as ``gpucluster_sim_service_requests_total{namespace,service}``: the request rate a
Service receives, measured where its traffic enters, as a gateway or ingress reports it in a real cluster. The
metrics adapter's query reads it, so the HPA sees rented replicas' requests as well as in-cluster ones. Only
requests without a body are counted once each (a body holding a blank line would count twice): the load generator
sends GETs.

What it does not model: session affinity, topology-aware routing, traffic policies, NodePorts, UDP, IPv6, and a
cluster's many kube-proxies converging each at its own pace.

``python sim/serving.py --kubeconfig FILE --node gpu-burst --rented-network 198.18.0.0/15 --service
inference/sd-serve=18100 ...``
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import ipaddress
import random
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from daemons.burst_provider import pods  # noqa: E402
from daemons.toolkit.kube import KubeError, load_kube_config  # noqa: E402
from daemons.toolkit.kube_api import KubeApi  # noqa: E402
from sim.fakes.replica import ReplicaServer  # noqa: E402

#: kube-proxy's minSyncPeriod: how late a change of the EndpointSlices reaches traffic, at most.
SYNC_SECONDS = 1.0
#: How long a connection to an endpoint may take to open before the client's connection is reset.
CONNECT_TIMEOUT = 1.0
#: One request's service time of an in-cluster stand-in (the fakes' default for rented ones).
REQUEST_SECONDS = 0.05
SERVICE_NAME_LABEL = "kubernetes.io/service-name"

Endpoint = tuple[str, int]


# --- pure: what kube-proxy would route to ---------------------------------------------------------------------------


def route_targets(slices: Sequence[Mapping[str, Any]], port_name: str) -> list[Endpoint]:
    """(address, port) of every endpoint a new connection may go to: the ready ones, else the serving and
    terminating ones. ``port_name`` is the Service port's name, as each slice names its ports."""
    ready: list[Endpoint] = []
    terminating: list[Endpoint] = []
    for es in slices:
        ports = [p for p in es.get("ports") or [] if (p.get("name") or "") == port_name and p.get("port")]
        if not ports or es.get("addressType") not in ("IPv4", "FQDN"):
            continue
        port = int(ports[0]["port"])
        for ep in es.get("endpoints") or []:
            cond = ep.get("conditions") or {}
            ready_ = cond.get("ready") is not False  # nil means ready (the API's rule)
            serving = cond.get("serving", ready_) is not False
            for address in (ep.get("addresses") or [])[:1]:
                if ready_:
                    ready.append((str(address), port))
                elif serving and cond.get("terminating"):
                    terminating.append((str(address), port))
    return sorted(ready) if ready else sorted(terminating)


def prestop_sleep_seconds(pod: Mapping[str, Any]) -> float:
    """How long the pod serves once deleted: its preStop sleep, as the burst provider drains a rented replica
    (``daemons/burst_provider/pods.prestop_sleep_seconds``); 0 for a hook that is not a sleep."""
    try:
        return pods.prestop_sleep_seconds(pod)
    except pods.PodTranslationError:
        return 0.0


def pod_ready(pod: Mapping[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


# --- the in-cluster replicas' stand-ins -----------------------------------------------------------------------------


@dataclass
class StandIn:
    """The model server of one in-cluster pod, on a loopback port; ``ready`` follows the pod."""

    server: ReplicaServer
    ready: bool = False
    prestop: float = 0.0  # the pod's preStop sleep: how long it serves once told to stop
    stop_at: float | None = None  # being deleted: refuses from then on


@dataclass
class Replicas:
    """Stand-ins by pod IP, kept in step with the pods the cluster lists."""

    #: Rented replicas' addresses: traffic goes to them directly. Any other address must be an in-cluster pod's.
    rented: ipaddress.IPv4Network | ipaddress.IPv6Network
    clock: Callable[[], float] = time.monotonic
    by_ip: dict[str, StandIn] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def sync(self, pods: Sequence[Mapping[str, Any]], virtual_node: str) -> None:
        now = self.clock()
        seen: set[str] = set()
        for pod in pods:
            ip = (pod.get("status") or {}).get("podIP")
            if not ip or (pod.get("spec") or {}).get("nodeName") in (None, virtual_node):
                continue
            seen.add(ip)
            with self.lock:
                stand_in = self.by_ip.get(ip)
                if stand_in is None:
                    stand_in = self._start(ip)
                stand_in.ready = pod_ready(pod)
                stand_in.prestop = prestop_sleep_seconds(pod)
                deleting = (pod.get("metadata") or {}).get("deletionTimestamp")
                if deleting and stand_in.stop_at is None:
                    stand_in.stop_at = now + stand_in.prestop
        with self.lock:
            for ip, stand_in in list(self.by_ip.items()):
                if ip not in seen and stand_in.stop_at is None:
                    # kwok deletes a pod at once; the kubelet would run its preStop sleep first, serving meanwhile
                    stand_in.stop_at = now + stand_in.prestop
                if stand_in.stop_at is not None and now >= stand_in.stop_at:
                    stand_in.server.stop()
                    del self.by_ip[ip]

    def _start(self, ip: str) -> StandIn:
        holder: list[StandIn] = []
        server = ReplicaServer(
            ip,
            "127.0.0.1",
            0,
            started_at=0.0,
            load_seconds=0.0,
            service_seconds=REQUEST_SECONDS,
            is_loaded=lambda: bool(holder) and holder[0].ready,
        )
        stand_in = StandIn(server)
        holder.append(stand_in)
        self.by_ip[ip] = stand_in
        return stand_in

    def local(self, address: str, port: int) -> Endpoint | None:
        """Where an endpoint's traffic goes on this machine: the address itself for a rented replica, a stand-in's
        port for an in-cluster pod IP; None (refused) for a pod IP without a stand-in (gone, or not seen yet)."""
        try:
            if ipaddress.ip_address(address) in self.rented:
                return (address, port)
        except ValueError:
            return None
        with self.lock:
            stand_in = self.by_ip.get(address)
            return ("127.0.0.1", stand_in.server.port) if stand_in is not None else None

    def close(self) -> None:
        with self.lock:
            for stand_in in self.by_ip.values():
                stand_in.server.stop()
            self.by_ip.clear()


# --- kube-proxy for one Service -------------------------------------------------------------------------------------


class RequestCounter:
    """HTTP/1.1 request heads in one direction of a connection: each ends with an empty line (CRLF CRLF), which may
    fall across two reads."""

    def __init__(self) -> None:
        self.tail = b""

    def feed(self, data: bytes) -> int:
        joined = self.tail + data
        self.tail = joined[-3:]
        return joined.count(b"\r\n\r\n")


class ServiceProxy:
    """A Service's cluster IP on 127.0.0.1:``port``: each connection to a random routable endpoint, bytes relayed,
    requests counted."""

    def __init__(self, name: str, port: int, replicas: Replicas, rng: random.Random | None = None) -> None:
        self.name = name
        self.requests = 0
        self._count_lock = threading.Lock()
        self.targets: list[Endpoint] = []
        self.replicas = replicas
        self.rng = rng or random.Random(1)
        self.listener = socket.create_server(("127.0.0.1", port), reuse_port=False)
        self.port = self.listener.getsockname()[1]
        self._stop = threading.Event()
        threading.Thread(target=self._accept, name=f"proxy-{name}", daemon=True).start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        targets = list(self.targets)
        target = self.replicas.local(*self.rng.choice(targets)) if targets else None
        try:
            upstream = socket.create_connection(target, timeout=CONNECT_TIMEOUT) if target else None
        except OSError:
            upstream = None
        if upstream is None:  # nothing to route to, or it refused: the client's connection is reset
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            client.close()
            return
        upstream.settimeout(None)
        threading.Thread(target=_pump, args=(upstream, client), daemon=True).start()
        counter = RequestCounter()
        _pump(client, upstream, lambda data: self._count(counter.feed(data)))

    def _count(self, n: int) -> None:
        if n:
            with self._count_lock:
                self.requests += n

    def close(self) -> None:
        self._stop.set()
        self.listener.close()


def _pump(src: socket.socket, dst: socket.socket, seen: Callable[[bytes], None] | None = None) -> None:
    """Copy bytes until one side closes, then close both; ``seen`` reads each chunk on its way."""
    try:
        while data := src.recv(65536):
            if seen is not None:
                seen(data)
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()


# --- the process ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServiceRef:
    namespace: str
    name: str
    port: int  # where its proxy listens


def parse_service(text: str) -> ServiceRef:
    ref, _, port = text.rpartition("=")
    namespace, _, name = ref.partition("/")
    if not namespace or not name or not port.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not NAMESPACE/NAME=PORT")
    return ServiceRef(namespace, name, int(port))


@dataclass(frozen=True)
class Sim:
    """What the sync loop keeps in step: the proxies by Service name and the in-cluster stand-ins."""

    services: Sequence[ServiceRef]
    proxies: Mapping[str, ServiceProxy]
    replicas: Replicas
    node: str  # the virtual node: its pods are rented, without a stand-in


REQUESTS_METRIC = "gpucluster_sim_service_requests_total"


def exposition(services: Sequence[ServiceRef], proxies: Mapping[str, ServiceProxy]) -> str:
    """The request counters in Prometheus's text format (0.0.4)."""
    lines = [
        f"# HELP {REQUESTS_METRIC} HTTP requests a Service received, wherever its replicas run.",
        f"# TYPE {REQUESTS_METRIC} counter",
    ]
    for svc in services:
        lines.append(
            f'{REQUESTS_METRIC}{{namespace="{svc.namespace}",service="{svc.name}"}} {proxies[svc.name].requests}'
        )
    return "\n".join(lines) + "\n"


def serve_metrics(port: int, body: Callable[[], str]) -> http.server.ThreadingHTTPServer:
    """``/metrics`` on 127.0.0.1:``port``, in a thread of its own."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            data = body().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server


def sync_forever(api: KubeApi, sim: Sim, stop: threading.Event) -> None:
    """Every SYNC_SECONDS: the stand-ins follow the pods, each proxy's table follows its EndpointSlices."""
    while not stop.is_set():
        try:
            for ns in sorted({s.namespace for s in sim.services}):
                sim.replicas.sync(api.list_all(f"/api/v1/namespaces/{ns}/pods", "list pods"), sim.node)
            for svc in sim.services:
                service = api.request("GET", f"/api/v1/namespaces/{svc.namespace}/services/{svc.name}", "service")
                port_name = str(((service.get("spec") or {}).get("ports") or [{}])[0].get("name") or "")
                slices = api.list_all(
                    f"/apis/discovery.k8s.io/v1/namespaces/{svc.namespace}/endpointslices",
                    "list endpoint slices",
                    [("labelSelector", f"{SERVICE_NAME_LABEL}={svc.name}")],
                )
                sim.proxies[svc.name].targets = route_targets(slices, port_name)
        except KubeError as exc:  # the API unreachable: keep the last table, as kube-proxy does
            print(f"serving: sync failed: {exc}", file=sys.stderr, flush=True)
        stop.wait(SYNC_SECONDS)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sim/serving.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--node", required=True, help="the virtual node: its pods are rented, no stand-in")
    parser.add_argument("--service", type=parse_service, action="append", default=[], help="NAMESPACE/NAME=PORT")
    parser.add_argument("--rented-network", type=ipaddress.ip_network, required=True, help="rented replicas' range")
    parser.add_argument("--metrics-port", type=int, default=0, help="serves /metrics on 127.0.0.1 (0: none)")
    args = parser.parse_args(argv)
    api = KubeApi(load_kube_config(args.kubeconfig), 5.0, "sim-serving")
    replicas = Replicas(rented=args.rented_network)
    proxies = {s.name: ServiceProxy(s.name, s.port, replicas) for s in args.service}
    metrics = serve_metrics(args.metrics_port, lambda: exposition(args.service, proxies)) if args.metrics_port else None
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    print(f"serving: {', '.join(f'{s.namespace}/{s.name} on 127.0.0.1:{s.port}' for s in args.service)}", flush=True)
    sync_forever(api, Sim(args.service, proxies, replicas, args.node), stop)
    for proxy in proxies.values():
        proxy.close()
    if metrics is not None:
        metrics.shutdown()
    replicas.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
