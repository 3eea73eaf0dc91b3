"""A real Prometheus (Debian package) scrapes the fabric exporter over a fixture tree and a fake DCGM target.

* ``rate()`` over counters the test advances at a known pace returns that pace (and the x4 data unit);
* every dashboard query runs without error and returns series: the GPU ones over the fake DCGM target (GPU 0
  attributed to a training pod the way dcgm-exporter's pod mapping does), the training row over the interruption
  accounting daemon's own metrics (its collector, figures set by hand), scraped with honor_labels as it must be.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.config import parse_stack_config
from components.telemetry import TelemetrySettings, dashboard, panel_queries
from components.telemetry.dashboard import DCGM_JOB_LABEL
from components.training.manifest import checkpoint_interval, job_context, jobset_manifest
from components.training.spec import parse_spec
from daemons.interruptions.classify import Cause
from daemons.interruptions.metrics import Figures, JobFigures, Metrics
from sim.fake_dcgm import Allocator
from tests.components.training.conftest import local_raw, spec_doc
from tests.support.require import debian_tool
from tests.support.telemetry import (
    NVML_FIXTURE,
    SYSFS_FIXTURE,
    ExporterProcess,
    free_port,
    llite_dirs,
    procfs_mountstats,
    start_exporter,
)

NODE = "fixture-node"
GPUS = 2
#: A second node whose dcgm-exporter is the next release's: it writes the node as ``hostname``, not ``Hostname``
#: (contract/dcgm.py). The fake serves it at NEXT_PATH, as a rolling upgrade leaves a cluster half way.
NODE_NEXT = "fixture-node-next"
NEXT_PATH = "/next/metrics"


def trainer_pod() -> dict[str, Any]:
    """Rank 0's pod of the JobSet a spec named ``llm`` becomes, as the API server lists it once it runs on NODE."""
    stack = parse_stack_config(local_raw())
    spec = parse_spec(spec_doc(name="llm", nodes=1, gpusPerNode=1))
    manifest = jobset_manifest(spec, job_context(spec, stack, checkpoint_interval(spec, stack, None)))
    template = manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    meta = {**template["metadata"], "name": "llm-node-0-0", "namespace": "team-a", "uid": "u-1"}
    return {"metadata": meta, "spec": {**template["spec"], "nodeName": NODE}, "status": {"phase": "Running"}}


#: The container holding GPU 0: what the fake dcgm-exporter's pod mapping (dcgm-exporter 4.2.0's rule, with pod
#: labels) makes of the trainer pod; the job label comes from the pod's own labels, not from this test.
TRAINER = Allocator({NODE: 1}, pod_labels=True).update([trainer_pod()])[(NODE, 0)]


class FakeDcgm(BaseHTTPRequestHandler):
    """A dcgm-exporter-like /metrics: same names, types and labels; counters grow with each scrape."""

    scrapes = 0
    lock = threading.Lock()

    def do_GET(self) -> None:
        with FakeDcgm.lock:
            FakeDcgm.scrapes += 1
            n = FakeDcgm.scrapes
        host, node, gpus = ("hostname", NODE_NEXT, 1) if self.path == NEXT_PATH else ("Hostname", NODE, GPUS)
        lines = []
        for field, kind, value in (
            ("DCGM_FI_DEV_GPU_TEMP", "gauge", 65),
            ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", 70),
            ("DCGM_FI_DEV_GPU_UTIL", "gauge", 97),
            ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", 0.42),
            ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", 0.95),
            ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge", 0.6),
            ("DCGM_FI_DEV_THERMAL_VIOLATION", "counter", 1000 * n),
            ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gauge", 0),
            ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "counter", n),
            ("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "counter", 0),
            ("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "counter", 2 * n),
            ("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "counter", 0),
            ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", 0),
            ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", 0),
            ("DCGM_FI_DEV_XID_ERRORS", "gauge", 0),
        ):
            lines.append(f"# HELP {field} {field}.")
            lines.append(f"# TYPE {field} {kind}")
            for gpu in range(gpus):
                labels = (
                    f'gpu="{gpu}",UUID="GPU-{gpu}",pci_bus_id="00000000:{gpu + 10}:00.0",device="nvidia{gpu}",'
                    f'modelName="NVIDIA H100 80GB HBM3",{host}="{node}",DCGM_FI_DRIVER_VERSION="550.90.07"'
                )
                if gpu == 0 and node == NODE:  # in use by a training pod: dcgm-exporter's pod mapping and pod labels
                    labels += "".join(f',{k}="{v}"' for k, v in TRAINER.attributes())
                lines.append(f"{field}{{{labels}}} {value}")
        body = ("\n".join(lines) + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


def interruptions_metrics() -> Metrics:
    metrics = Metrics()
    counts = dict.fromkeys(Cause, 0) | {Cause.PROGRAM: 2, Cause.NODE: 1}
    job = JobFigures("team-a", "llm", "a", counts, 3, 95.0, 400.0, 0.91, 120.0, 1314.0, 6, False)
    metrics.figures.figures = Figures([job], cluster_ettr=0.91, node_mtbi_s=7200.0)
    return metrics


class InterruptionsTarget(BaseHTTPRequestHandler):
    metrics = interruptions_metrics()

    def do_GET(self) -> None:
        body = self.metrics.render()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


class CounterPacer(threading.Thread):
    """Keeps sysfs counters at base + pace x elapsed seconds, rewritten in place every 50 ms.

    In place, as the kernel updates an attribute: the exporter keeps descriptors open and re-reads them.
    The value is padded to a fixed width so a concurrent read never sees a shorter, truncated number.
    """

    def __init__(self, files: dict[Path, float]) -> None:
        super().__init__(daemon=True)
        self.files = {p: (int(p.read_text()), pace) for p, pace in files.items()}
        self.stop = threading.Event()
        self.t0 = time.monotonic()

    def run(self) -> None:
        while not self.stop.is_set():
            dt = time.monotonic() - self.t0
            for path, (base, pace) in self.files.items():
                fd = os.open(path, os.O_WRONLY)
                try:
                    os.pwrite(fd, f"{int(base + pace * dt):>20d}\n".encode(), 0)
                finally:
                    os.close(fd)
            self.stop.wait(0.05)


def api(port: int, query: str) -> dict[str, Any]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return dict(json.loads(resp.read()))
    except urllib.error.HTTPError as err:  # bad PromQL comes back as 400 with a JSON body
        return dict(json.loads(err.read()))


def wait_for(port: int, query: str, timeout: float = 40) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    last: dict[str, Any] = {}
    while time.monotonic() < deadline:
        last = api(port, query)
        if last.get("status") == "success" and last["data"]["result"]:
            return list(last["data"]["result"])
        time.sleep(0.5)
    raise AssertionError(f"no result for {query!r} within {timeout}s: {last}")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    prometheus = debian_tool("prometheus")
    tmp = tmp_path_factory.mktemp("prom-e2e")

    sysfs = tmp / "sys"
    shutil.copytree(SYSFS_FIXTURE, sysfs)
    port_dir = sysfs / "class/infiniband/mlx5_0/ports/1/counters"
    pacer = CounterPacer({port_dir / "port_xmit_wait": 1000.0, port_dir / "port_xmit_data": 1_000_000.0})
    pacer.start()

    # the filesystem collector on the captured NFS mountstats and Lustre llite stats, as the DaemonSet runs it
    (tmp / "mountstats").write_text(procfs_mountstats())
    exporter: ExporterProcess = start_exporter(
        f"--sysfs-root={sysfs}",
        f"--nvml-fixture={NVML_FIXTURE}",
        f"--node-name={NODE}",
        "--collectors=infiniband,nvlink,filesystem",
        f"--mountstats={tmp / 'mountstats'}",
        f"--lustre-llite-dirs={llite_dirs(tmp)}",
    )
    dcgm = ThreadingHTTPServer(("127.0.0.1", 0), FakeDcgm)
    threading.Thread(target=dcgm.serve_forever, daemon=True).start()
    training = ThreadingHTTPServer(("127.0.0.1", 0), InterruptionsTarget)
    threading.Thread(target=training.serve_forever, daemon=True).start()

    prom_port = free_port()
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {"job_name": "fabric", "static_configs": [{"targets": [f"127.0.0.1:{exporter.port}"]}]},
            {"job_name": "dcgm", "static_configs": [{"targets": [f"127.0.0.1:{dcgm.server_address[1]}"]}]},
            {
                "job_name": "dcgm-next",
                "metrics_path": NEXT_PATH,
                "static_configs": [{"targets": [f"127.0.0.1:{dcgm.server_address[1]}"]}],
            },
            {
                "job_name": "interruptions",
                # its job and namespace labels are the training job's, not the target's
                "honor_labels": True,
                "static_configs": [{"targets": [f"127.0.0.1:{training.server_address[1]}"]}],
            },
        ],
    }
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    log = (tmp / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [
            prometheus,
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
            "--storage.tsdb.retention.time=1h",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{prom_port}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"prometheus did not start: {(tmp / 'prometheus.log').read_text()[-2000:]}")
            time.sleep(0.2)
        # enough samples for 5s rate windows
        wait_for(prom_port, 'count_over_time(up{job="fabric"}[10s]) >= 6', timeout=40)
        yield {"port": prom_port, "exporter": exporter}
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()
        pacer.stop.set()
        exporter.stop()
        dcgm.shutdown()
        training.shutdown()


def test_targets_are_up(stack: dict[str, Any]) -> None:
    up = wait_for(stack["port"], "up")
    assert {r["metric"]["job"]: r["value"][1] for r in up} == {
        "fabric": "1",
        "dcgm": "1",
        "dcgm-next": "1",
        "interruptions": "1",
    }


def test_rate_over_an_advancing_counter(stack: dict[str, Any]) -> None:
    (wait,) = wait_for(
        stack["port"], 'rate(gpucluster_fabric_infiniband_port_transmit_wait_total{device="mlx5_0"}[5s])'
    )
    assert wait["metric"]["node"] == NODE
    assert float(wait["value"][1]) == pytest.approx(1000.0, rel=0.1)
    (data,) = wait_for(
        stack["port"], 'rate(gpucluster_fabric_infiniband_port_transmit_data_bytes_total{device="mlx5_0"}[5s])'
    )
    assert float(data["value"][1]) == pytest.approx(4_000_000.0, rel=0.1)  # 1e6 words/s x 4 octets
    # a counter nobody advances has no rate
    (still,) = wait_for(
        stack["port"], 'rate(gpucluster_fabric_infiniband_port_transmit_wait_total{device="mlx5_3"}[5s])'
    )
    assert float(still["value"][1]) == 0.0


def test_every_dashboard_query_returns_series(stack: dict[str, Any]) -> None:
    """Every query answers; every per-node GPU panel names both nodes, whichever host label their exporter wrote."""
    doc = dashboard(TelemetrySettings())
    failures = []
    per_node = 0
    for title, expr in panel_queries(doc):
        q = expr.replace("$__rate_interval", "5s").replace("$node", ".*")
        res = api(stack["port"], q)
        if res.get("status") != "success":
            failures.append(f"{title}: {q}: {res.get('error')}")
        elif not res["data"]["result"]:
            failures.append(f"{title}: {q}: no series")
        elif "DCGM_FI_" in q and "by (node, gpu)" in q:
            per_node += 1
            nodes = {r["metric"].get("node") for r in res["data"]["result"]}
            if nodes != {NODE, NODE_NEXT}:
                failures.append(f"{title}: {q}: nodes {sorted(map(str, nodes))}, not both {NODE} and {NODE_NEXT}")
    assert not failures, "\n".join(failures)
    assert per_node >= 10, per_node
    # One node picked: only its series, under either spelling.
    for picked in (NODE, NODE_NEXT):
        temp = next(e for t, e in panel_queries(doc) if "DCGM_FI_DEV_GPU_TEMP" in e and "by (node, gpu)" in e)
        res = api(stack["port"], temp.replace("$node", picked))["data"]["result"]
        assert {r["metric"]["node"] for r in res} == {picked}, res
    var = doc["templating"]["list"][1]["definition"]  # label_values(<metric>, node)
    metric = var.split("(")[1].split(",")[0]
    assert wait_for(stack["port"], metric)[0]["metric"]["node"] == NODE


def test_the_per_job_gpu_view_and_the_training_row_name_the_job(stack: dict[str, Any]) -> None:
    doc = dashboard(TelemetrySettings())
    queries = dict(panel_queries(doc)[::-1])  # the first query of each panel
    (tensor,) = api(stack["port"], queries["Tensor activity and temperature per job"])["data"]["result"]
    assert tensor["metric"] == {"namespace": "team-a", DCGM_JOB_LABEL: "llm"}
    assert float(tensor["value"][1]) == pytest.approx(0.42)
    (ettr,) = api(stack["port"], queries["ETTR per job and cluster"])["data"]["result"]
    assert ettr["metric"] == {"namespace": "team-a", "job": "llm"}
    assert float(ettr["value"][1]) == pytest.approx(0.91)
    causes = api(stack["port"], queries["Interruptions by cause (last hour)"])["data"]["result"]
    assert {r["metric"]["cause"] for r in causes} == {c.value for c in Cause}
