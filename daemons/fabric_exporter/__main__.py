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
import socket
import sys
from collections.abc import Sequence

from daemons.fabric_exporter.collectors import (
    FabricCollector,
    FilesystemCollector,
    InfinibandCollector,
    NvlinkCollector,
    SubCollector,
)
from daemons.fabric_exporter.nvml_api import FakeNvml, NvmlApi, PynvmlApi
from daemons.toolkit.cli import add_log_level, daemon_parser
from daemons.toolkit.http import HttpService, Request, Response, Routes
from daemons.toolkit.listen import ListenError, check_port
from daemons.toolkit.logs import OnceLogger, setup_logging
from daemons.toolkit.shutdown import StopSignal, drain

log = logging.getLogger("fabric_exporter")

#: Seconds SIGTERM may take: the scrape in flight, then closing NVML and the sysfs descriptors.
DRAIN_SECONDS = 20.0


def build_parser() -> argparse.ArgumentParser:
    p = daemon_parser(
        "gpucluster-fabric-exporter",
        "Export InfiniBand port counters (from sysfs), NVLink state/error counters (from NVML) and the filesystem "
        "clients' reads, writes and RPC errors (NFS mountstats, Lustre llite stats) for Prometheus. "
        "Every metric is prefixed gpucluster_fabric_; gpucluster_fabric_collector_success{collector} is 0 when a "
        "collector failed.",
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
        help="comma-separated collectors to run: infiniband, nvlink, filesystem",
    )
    p.add_argument(
        "--mountstats",
        default="/proc/self/mountstats",
        help="the NFS client's per-mount statistics (filesystem collector): the exporter's own, which lists the "
        "kubelet's volume mounts when the pod mounts the kubelet's directory with HostToContainer propagation",
    )
    p.add_argument(
        "--lustre-llite-dirs",
        default="/proc/fs/lustre/llite",
        help="comma-separated directories holding Lustre's llite/<fsname>-<instance>/stats (filesystem collector; "
        "an absent directory: no Lustre client)",
    )
    p.add_argument(
        "--node-name",
        default=os.environ.get("NODE_NAME") or socket.gethostname(),
        help="value of the `node` label on every series (default: $NODE_NAME, else the hostname); "
        "an empty string leaves the label off",
    )
    p.add_argument(
        "--expected-hcas",
        type=int,
        default=0,
        metavar="N",
        help="InfiniBand devices this node should have; fewer (or no sysfs at all) fails the infiniband collector "
        "and shows in gpucluster_fabric_devices vs gpucluster_fabric_devices_expected (0: no expectation)",
    )
    p.add_argument(
        "--expected-gpus",
        type=int,
        default=0,
        metavar="N",
        help="GPUs NVML should report on this node; fewer fails the nvlink collector (0: no expectation)",
    )
    p.add_argument(
        "--nvml-fixture",
        default=None,
        metavar="JSON",
        help="serve NVLink data from this JSON description instead of the NVML library "
        "(tests and benchmarks; see daemons/fabric_exporter/nvml_api.py FakeNvml.from_json)",
    )
    return add_log_level(p)


def http_app(collector: FabricCollector) -> Routes:
    """``/metrics`` (Prometheus text), ``/healthz``, a link page at ``/``; 404 elsewhere."""

    def index(_request: Request) -> Response:
        return Response(200, b"<html><body><a href='/metrics'>/metrics</a></body></html>\n", "text/html")

    return Routes(metrics=collector.render, get={"/": index})


def build_collectors(
    args: argparse.Namespace, parser: argparse.ArgumentParser
) -> tuple[list[SubCollector], NvlinkCollector | None, dict[str, str]]:
    const_labels = {"node": args.node_name} if args.node_name else {}
    wanted = [c.strip() for c in args.collectors.split(",") if c.strip()]
    unknown = sorted(set(wanted) - {"infiniband", "nvlink", "filesystem"})
    if unknown or not wanted:
        parser.error(f"--collectors: unknown or empty {unknown or wanted}; choose from infiniband, nvlink, filesystem")
    subs: list[SubCollector] = []
    nvlink: NvlinkCollector | None = None
    for flag, value in (("--expected-hcas", args.expected_hcas), ("--expected-gpus", args.expected_gpus)):
        if not 0 <= value <= 4096:
            parser.error(f"{flag}: {value} is not a device count (0-4096)")
    if "infiniband" in wanted:
        subs.append(InfinibandCollector(args.sysfs_root, const_labels, expected_devices=args.expected_hcas))
    if "nvlink" in wanted:
        api: NvmlApi
        if args.nvml_fixture:
            try:
                api = FakeNvml.from_json(args.nvml_fixture)
            except ValueError as exc:
                parser.error(f"--nvml-fixture: {exc}")
        else:
            api = PynvmlApi()
        nvlink = NvlinkCollector(api, const_labels, expected_devices=args.expected_gpus)
        subs.append(nvlink)
    if "filesystem" in wanted:
        llite = [d.strip() for d in args.lustre_llite_dirs.split(",") if d.strip()]
        subs.append(FilesystemCollector(args.mountstats, llite, const_labels))
    return subs, nvlink, const_labels


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        check_port(args.port)
    except ListenError as exc:
        parser.error(str(exc))
    setup_logging(args.log_level)
    subs, _, const_labels = build_collectors(args, parser)

    collector = FabricCollector(subs, OnceLogger(log), const_labels)
    try:
        service = HttpService(
            args.listen_address,
            args.port,
            http_app(collector),
            log=log,
            server_version="gpucluster-fabric-exporter",
            poll_interval=0.2,
        )
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

    stop = StopSignal(log).install()
    service.start()
    log.info(
        "serving",
        extra={
            "address": args.listen_address,
            "port": service.port,
            "sysfs_root": args.sysfs_root,
            "collectors": [s.name for s in subs],
            "node": args.node_name,
        },
    )
    stop.wait()

    def close_collectors() -> None:
        for sub in subs:
            if isinstance(sub, NvlinkCollector | InfinibandCollector):
                sub.close()

    # the scrape in flight finishes (the collectors' locks wait for it), then NVML and the sysfs descriptors close
    drain([("http", service.stop), ("collectors", close_collectors)], timeout_s=DRAIN_SECONDS, log=log)
    log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
