"""``gpucluster-fabric-exporter``: InfiniBand and NVLink metrics for Prometheus.

Serves ``/metrics`` (Prometheus text format) and ``/healthz``. Logs are JSON, one object per line, on
stderr. SIGTERM and SIGINT stop the server gracefully: the in-flight scrape finishes, NVML is shut down,
exit status 0.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any

from prometheus_client.exposition import CONTENT_TYPE_LATEST

from daemons.fabric_exporter.collectors import (
    FabricCollector,
    InfinibandCollector,
    NvlinkCollector,
    SubCollector,
)
from daemons.fabric_exporter.logs import OnceLogger, setup_logging
from daemons.fabric_exporter.nvml_api import FakeNvml, NvmlApi, PynvmlApi

log = logging.getLogger("fabric_exporter")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gpucluster-fabric-exporter",
        description=(
            "Export InfiniBand port counters (from sysfs) and NVLink state/error counters (from NVML) "
            "for Prometheus. Every metric is prefixed gpucluster_fabric_; "
            "gpucluster_fabric_collector_success{collector} is 0 when a collector failed."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--listen-address", default="0.0.0.0", help="address to serve /metrics on")
    p.add_argument("--port", type=int, default=9402, help="TCP port to serve /metrics on (0: pick a free one)")
    p.add_argument(
        "--sysfs-root",
        default="/sys",
        help="sysfs mount point; InfiniBand devices are read from <root>/class/infiniband",
    )
    p.add_argument(
        "--collectors",
        default="infiniband,nvlink",
        help="comma-separated collectors to run: infiniband, nvlink",
    )
    p.add_argument(
        "--node-name",
        default=os.environ.get("NODE_NAME") or socket.gethostname(),
        help="value of the `node` label on every series (default: $NODE_NAME, else the hostname); "
        "an empty string leaves the label off",
    )
    p.add_argument(
        "--nvml-fixture",
        default=None,
        metavar="JSON",
        help="serve NVLink data from this JSON description instead of the NVML library "
        "(tests and benchmarks; see daemons/fabric_exporter/nvml_api.py FakeNvml.from_json)",
    )
    p.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="minimum level of the JSON log lines written to stderr",
    )
    return p


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def make_handler(collector: FabricCollector) -> type[BaseHTTPRequestHandler]:
    """``/metrics`` (Prometheus text), ``/healthz``, a link page at ``/``; 404 elsewhere."""

    class Handler(BaseHTTPRequestHandler):
        server_version = "gpucluster-fabric-exporter"
        # keep-alive, as Prometheus scrapes: no new connection and thread per scrape
        protocol_version = "HTTP/1.1"
        timeout = 60  # an idle kept-alive connection is closed after a minute
        # Headers and body go out without waiting for the client's delayed ACK (Nagle would hold the
        # second write up to 40 ms on a kept-alive connection); buffered so small replies are one segment.
        disable_nagle_algorithm = True
        wbufsize = -1

        def _send(self, code: int, content_type: str, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, CONTENT_TYPE_LATEST, collector.render())
            elif path == "/healthz":
                self._send(200, "text/plain", b"ok\n")
            elif path == "/":
                self._send(200, "text/html", b"<html><body><a href='/metrics'>/metrics</a></body></html>\n")
            else:
                self._send(404, "text/plain", b"not found\n")

        def do_HEAD(self) -> None:
            self.do_GET()

        def log_message(self, format: str, *args: Any) -> None:
            if log.isEnabledFor(logging.DEBUG):
                log.debug("http request", extra={"client": self.client_address[0], "request": format % args})

    return Handler


def build_collectors(
    args: argparse.Namespace, parser: argparse.ArgumentParser
) -> tuple[list[SubCollector], NvlinkCollector | None, dict[str, str]]:
    const_labels = {"node": args.node_name} if args.node_name else {}
    wanted = [c.strip() for c in args.collectors.split(",") if c.strip()]
    unknown = sorted(set(wanted) - {"infiniband", "nvlink"})
    if unknown or not wanted:
        parser.error(f"--collectors: unknown or empty {unknown or wanted}; choose from infiniband, nvlink")
    subs: list[SubCollector] = []
    nvlink: NvlinkCollector | None = None
    if "infiniband" in wanted:
        subs.append(InfinibandCollector(args.sysfs_root, const_labels))
    if "nvlink" in wanted:
        api: NvmlApi
        if args.nvml_fixture:
            try:
                api = FakeNvml.from_json(args.nvml_fixture)
            except ValueError as exc:
                parser.error(f"--nvml-fixture: {exc}")
        else:
            api = PynvmlApi()
        nvlink = NvlinkCollector(api, const_labels)
        subs.append(nvlink)
    return subs, nvlink, const_labels


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not 0 <= args.port <= 65535:
        parser.error(f"--port: {args.port} is not a TCP port (0-65535)")
    setup_logging(args.log_level)
    subs, _, const_labels = build_collectors(args, parser)

    collector = FabricCollector(subs, OnceLogger(log), const_labels)
    try:
        server = _Server((args.listen_address, args.port), make_handler(collector))
    except OSError as exc:
        log.error("cannot listen", extra={"address": args.listen_address, "port": args.port, "error": str(exc)})
        return 1

    # One scrape before serving opens the sysfs descriptors and fills the series caches (problems found here
    # are logged now, at start). The caches live as long as the process: freezing them keeps the garbage
    # collector from re-scanning them, and a larger first-generation threshold lets a scrape's short-lived
    # rows go without a collection in the middle of a scrape.
    collector.render()
    gc.freeze()
    gc.set_threshold(20_000, 10, 10)

    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("shutting down", extra={"signal": signal.Signals(signum).name})
        stop.set()
        # shutdown() blocks until serve_forever returns, so it must not run on the serving thread.
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log.info(
        "serving",
        extra={
            "address": args.listen_address,
            "port": server.server_address[1],
            "sysfs_root": args.sysfs_root,
            "collectors": [s.name for s in subs],
            "node": args.node_name,
        },
    )
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
        for sub in subs:
            if isinstance(sub, NvlinkCollector | InfinibandCollector):
                sub.close()
    log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
