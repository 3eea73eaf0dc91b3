"""Scrape latency and series count: our fabric exporter vs node_exporter's infiniband collector.

Generates a large fixture (8 HCAs x 1 port with every counter and a ConnectX-7-sized hw_counters set; 8 GPUs x
18 NVLinks through the fake NVML), starts both exporters on it in the same run and scrapes each N times,
alternating. Prints median / p90 latency, series counts and the ratios.

Target: no slower than node_exporter (latency ratio <= 1.0) while exporting >= 1.5x its InfiniBand series.

Usage: python benchmarks/bench_fabric_exporter.py [--scrapes N]
Needs Debian's prometheus-node-exporter (tools/install-debian-deps.sh).
"""

from __future__ import annotations

import argparse
import http.client
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

COUNTERS = [
    "symbol_error", "link_downed", "link_error_recovery", "port_rcv_errors", "port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors", "port_xmit_discards", "port_rcv_constraint_errors",
    "port_xmit_constraint_errors", "local_link_integrity_errors", "excessive_buffer_overrun_errors",
    "VL15_dropped", "port_xmit_wait", "port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets",
    "unicast_xmit_packets", "unicast_rcv_packets", "multicast_xmit_packets", "multicast_rcv_packets",
]  # fmt: skip
HW_COUNTERS = [
    "duplicate_request", "implied_nak_seq_err", "lifespan", "local_ack_timeout_err", "np_cnp_sent",
    "np_ecn_marked_roce_packets", "out_of_buffer", "out_of_sequence", "packet_seq_err", "req_cqe_error",
    "req_cqe_flush_error", "req_remote_access_errors", "req_remote_invalid_request", "resp_cqe_error",
    "resp_cqe_flush_error", "resp_local_length_error", "resp_remote_access_errors", "rnr_nak_retry_err",
    "roce_adp_retrans", "roce_adp_retrans_to", "roce_slow_restart", "roce_slow_restart_cnps",
    "roce_slow_restart_trans", "rp_cnp_handled", "rp_cnp_ignored", "rx_atomic_requests", "rx_dct_connect",
    "rx_icrc_encapsulated", "rx_read_requests", "rx_write_requests",
]  # fmt: skip


def make_fixture(root: Path, hcas: int = 8) -> None:
    for d in range(hcas):
        dev = root / "class" / "infiniband" / f"mlx5_{d}"
        port = dev / "ports" / "1"
        (port / "counters").mkdir(parents=True)
        (port / "hw_counters").mkdir()
        (dev / "fw_ver").write_text("28.39.1002\n")
        (dev / "board_id").write_text("MT_0000000838\n")
        (dev / "hca_type").write_text("MT4129\n")
        (port / "state").write_text("4: ACTIVE\n")
        (port / "phys_state").write_text("5: LinkUp\n")
        (port / "rate").write_text("400 Gb/sec (4X NDR)\n")
        (port / "link_layer").write_text("InfiniBand\n")
        for i, name in enumerate(COUNTERS):
            (port / "counters" / name).write_text(f"{(d + 1) * 1000 + i}\n")
        for i, name in enumerate(HW_COUNTERS):
            (port / "hw_counters" / name).write_text(f"{i}\n")


def make_nvml(path: Path, gpus: int = 8, links: int = 18) -> None:
    doc = {
        "gpus": [
            {
                "uuid": f"GPU-{g:08d}-0000-0000-0000-000000000000",
                "links": [
                    {"up": True, "errors": {"crc_flit": g, "crc_data": 0, "replay": link, "recovery": 0}}
                    for link in range(links)
                ],
            }
            for g in range(gpus)
        ]
    }
    path.write_text(json.dumps(doc))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(url: str) -> tuple[float, str]:
    """One scrape on a new connection."""
    start = time.perf_counter()
    with urllib.request.urlopen(url, timeout=10) as resp:
        body = resp.read().decode()
    return time.perf_counter() - start, body


class KeepAlive:
    """Scrapes over one persistent HTTP/1.1 connection, as Prometheus does."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)

    def scrape(self) -> tuple[float, str]:
        start = time.perf_counter()
        self.conn.request("GET", "/metrics")
        resp = self.conn.getresponse()
        body = resp.read().decode()
        if resp.status != 200:
            raise SystemExit(f"scrape failed: HTTP {resp.status}")
        return time.perf_counter() - start, body


def wait_up(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"exporter exited early ({url})")
        try:
            scrape(url)
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"exporter at {url} did not come up")


def series(body: str, prefix: str = "") -> int:
    return sum(1 for line in body.splitlines() if line and not line.startswith("#") and line.startswith(prefix))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scrapes", type=int, default=200, help="scrapes of each exporter (after 5 warm-up scrapes)")
    args = ap.parse_args()
    node_exporter = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
    if node_exporter is None:
        print("prometheus-node-exporter not installed: run tools/install-debian-deps.sh", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="bench-fabric-") as tmp:
        t = Path(tmp)
        make_fixture(t / "sys")
        make_nvml(t / "nvml.json")
        ours_port, ne_port, ib_port = free_port(), free_port(), free_port()
        ours = subprocess.Popen(
            [sys.executable, "-m", "daemons.fabric_exporter", "--listen-address=127.0.0.1", f"--port={ours_port}",
             f"--sysfs-root={t / 'sys'}", f"--nvml-fixture={t / 'nvml.json'}", "--node-name=bench",
             "--log-level=warning"],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        # the same scope as node_exporter's collector: InfiniBand only
        ours_ib = subprocess.Popen(
            [sys.executable, "-m", "daemons.fabric_exporter", "--listen-address=127.0.0.1", f"--port={ib_port}",
             f"--sysfs-root={t / 'sys'}", "--collectors=infiniband", "--node-name=bench", "--log-level=warning"],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        ne = subprocess.Popen(
            [node_exporter, f"--web.listen-address=127.0.0.1:{ne_port}", f"--path.sysfs={t / 'sys'}",
             "--collector.disable-defaults", "--collector.infiniband"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            ours_url, ne_url = f"http://127.0.0.1:{ours_port}/metrics", f"http://127.0.0.1:{ne_port}/metrics"
            wait_up(ours_url, ours)
            wait_up(ne_url, ne)
            wait_up(f"http://127.0.0.1:{ib_port}/metrics", ours_ib)
            for _ in range(5):
                scrape(ours_url)
                scrape(ne_url)
            ka_ours, ka_ne, ka_ib = KeepAlive(ours_port), KeepAlive(ne_port), KeepAlive(ib_port)
            for _ in range(5):
                ka_ours.scrape()
                ka_ne.scrape()
                ka_ib.scrape()
            lat: dict[str, list[float]] = {"ours": [], "ne": [], "ours_new": [], "ne_new": [], "ib": []}
            body_ours = body_ne = body_ib = ""
            for _ in range(args.scrapes):
                dt, body_ours = ka_ours.scrape()
                lat["ours"].append(dt)
                dt, body_ne = ka_ne.scrape()
                lat["ne"].append(dt)
                lat["ours_new"].append(scrape(ours_url)[0])
                lat["ne_new"].append(scrape(ne_url)[0])
                dt, body_ib = ka_ib.scrape()
                lat["ib"].append(dt)
        finally:
            for p in (ours, ne, ours_ib):
                p.terminate()
                p.wait(timeout=10)

    def p90(xs: list[float]) -> float:
        return sorted(xs)[int(0.9 * (len(xs) - 1))]

    ib_ours = series(body_ours, "gpucluster_fabric_infiniband_")
    nvl_ours = series(body_ours, "gpucluster_fabric_nvlink_")
    ib_ne = series(body_ne, "node_infiniband_")
    print("fixture: 8 HCAs x 1 port (21 counters, 30 hw_counters each); 8 GPUs x 18 NVLinks (fake NVML)")
    print(f"scrapes per exporter and mode: {args.scrapes} (interleaved, after warm-up)")
    print(f"{'exporter':<34}{'connection':>12}{'median ms':>11}{'p90 ms':>9}{'series':>9}{'IB series':>11}")
    rows = [
        ("gpucluster-fabric-exporter", "keep-alive", lat["ours"], body_ours, ib_ours),
        ("node_exporter (infiniband only)", "keep-alive", lat["ne"], body_ne, ib_ne),
        ("gpucluster-fabric-exporter", "new", lat["ours_new"], body_ours, ib_ours),
        ("node_exporter (infiniband only)", "new", lat["ne_new"], body_ne, ib_ne),
        (
            "ours, --collectors=infiniband",
            "keep-alive",
            lat["ib"],
            body_ib,
            series(body_ib, "gpucluster_fabric_infiniband_"),
        ),
    ]
    for name, mode, xs, body, ib in rows:
        print(f"{name:<34}{mode:>12}{statistics.median(xs) * 1e3:>11.2f}{p90(xs) * 1e3:>9.2f}{series(body):>9}{ib:>11}")
    print(f"NVLink series (ours only): {nvl_ours}")
    ratio_ka = statistics.median(lat["ours"]) / statistics.median(lat["ne"])
    ratio_new = statistics.median(lat["ours_new"]) / statistics.median(lat["ne_new"])
    ratio_ib = statistics.median(lat["ib"]) / statistics.median(lat["ne"])
    ib_ratio = ib_ours / ib_ne if ib_ne else float("inf")
    print(f"latency ratio ours/node_exporter (median): keep-alive {ratio_ka:.2f}, new connection {ratio_new:.2f}"
          "  (target <= 1.00)")  # fmt: skip
    print(f"latency ratio, InfiniBand only on both sides (keep-alive): {ratio_ib:.2f}")
    print(f"InfiniBand series ratio ours/node_exporter: {ib_ratio:.2f}  (target >= 1.50)")
    print(
        f"target met (keep-alive, as Prometheus scrapes): latency {'yes' if ratio_ka <= 1.0 else 'NO'}, "
        f"series {'yes' if ib_ratio >= 1.5 else 'NO'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
