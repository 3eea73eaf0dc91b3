"""What stands around the stack on the simulated cluster, as local processes.

Everything the stack deploys as a pod runs as that pod on the real node (``sim/node.py``; ``sim/placement.py``
refuses, before ``pulumi up``, a stack that leaves one off it): our controllers, the metrics adapter, the virtual
node with its provider service, Kueue, JobSet and the descheduler. This module writes no command line, port or
scrape target for any of them. It runs what the cluster needs around the stack and what stands for the world
outside it:

- kube-state-metrics and a Prometheus (Debian) scraping it, the fake dcgm-exporter (kwok nodes have no GPUs), the
  Services' request counters (``sim/serving.py``), and the real node's pods as the stack's scrape contract finds
  them (``sim/scrape_targets.py``);
- what stands for the world outside the cluster (``sim/outside.py``): the fake GPU cloud each fake provider points
  at, and the fake of RunPod's API for each runpod provider whose URL is on loopback. They listen on this machine's
  loopback, which a pod of the real node reaches at the node's address (the stacks' provider URLs name it);
- a metrics adapter the stack runs outside the cluster (``externalAddress``), with a token of the ServiceAccount
  Pulumi created for it.

``python sim/processes.py start [NAME ...]`` (default: all, in dependency order), ``stop``, ``status``, ``kill NAME``
(SIGKILL, as a crash), ``restart NAME``. State, logs and pid files live in ``.state/daemons/``. A program that is
missing (not built, not installed) is one line saying what to run, e.g. ``prometheus not found: run make
debian-deps``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

# Run as a script, the repository must come first on the path for the sim package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sim.daemon_runtime import (
    ADMIN_KUBECONFIG,
    DAEMONS_STATE,
    DEBIAN_PROGRAMS,
    KUBECTL_TIMEOUT,
    ROOT,
    STATE,
    VENV_BIN,
    Daemon,
    DaemonError,
    Stack,
    configmap_data,
    deployed_text,
    http_ok,
    kubectl,
    kubectl_json,
    labelled_name,
    missing_program,
    node_ready,
    python,
    require_program,
    sa_kubeconfig,
    secret_data,
    secret_to_dir,
    secret_value,
    stack_config,
    tools_bin,
    wait_for,
    write_deployed,
)
from sim.outside import RENTED_NETWORK, REPLICA_MODULE, fake_clouds, fake_runpods

#: What callers and tests take from here: this module's own names, and the runtime's they use through it.
__all__ = [
    "ADMIN_KUBECONFIG",
    "DAEMONS_STATE",
    "DEBIAN_PROGRAMS",
    "KUBECTL_TIMEOUT",
    "ROOT",
    "STATE",
    "VENV_BIN",
    "Daemon",
    "DaemonError",
    "Stack",
    "configmap_data",
    "deployed_text",
    "http_ok",
    "kubectl",
    "kubectl_json",
    "labelled_name",
    "missing_program",
    "node_ready",
    "python",
    "require_program",
    "sa_kubeconfig",
    "secret_data",
    "secret_to_dir",
    "secret_value",
    "stack_config",
    "tools_bin",
    "wait_for",
    "write_deployed",
]

# ---------------------------------------------------------------------------------------------------------------
# The daemons of the local stack
# ---------------------------------------------------------------------------------------------------------------

#: Where the sim's monitoring listens (pods on the real node reach Prometheus at the node's address, 100.127.0.1).
KSM_PORT = 18090
KSM_TELEMETRY_PORT = 18091
PROMETHEUS_PORT = 9090


#: The fake dcgm-exporter standing for every fake node's (sim/fake_dcgm.py).
FAKE_DCGM_PORT = 18094
#: The alert rules' ConfigMap (components/telemetry/resources.py, a stack without the Prometheus operator).
RULES_CONFIGMAP = "gpucluster-gpu-fabric"
RULES_KEY = "gpucluster-telemetry.rules.yaml"


#: The simulated cluster's Services (sim/serving.py): the stack's n-th InferenceService is on 127.0.0.1:BASE+n.
SERVING_PORT_BASE = 18100
#: Where sim/serving.py serves its request counters (scraped by the sim's Prometheus as job "serving").
SERVING_METRICS_PORT = 18099


def service_ports(config: Any) -> dict[str, int]:
    """``namespace/name`` -> where the simulated cluster serves that InferenceService (sim/serving.py)."""
    return {f"{spec.namespace}/{spec.name}": SERVING_PORT_BASE + i for i, spec in enumerate(config.inference_services)}


def serving(s: Stack) -> Iterable[Daemon]:
    """The InferenceServices' cluster IPs as kube-proxy makes them, and a model server behind every in-cluster
    replica (sim/serving.py); none when the stack serves nothing."""
    ports = service_ports(s.config)
    if not ports:
        return

    def cmd() -> list[str]:
        line = [s.python, str(ROOT / "sim" / "serving.py"), "--kubeconfig", str(ADMIN_KUBECONFIG)]
        line += ["--node", s.burst.virtual_node.node_name, "--rented-network", RENTED_NETWORK]
        line += ["--metrics-port", str(SERVING_METRICS_PORT)]
        for name, port in ports.items():
            line += ["--service", f"{name}={port}"]
        return line

    def fingerprint() -> str:  # older code of the proxy or the stand-in is restarted
        return "".join(p.read_text() for p in (ROOT / "sim" / "serving.py", ROOT / REPLICA_MODULE))

    first = min(ports.values())
    yield s.daemon("serving", cmd, ready_check=lambda: port_open(first), fingerprint=fingerprint)


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def kube_state_metrics(s: Stack) -> Iterable[Daemon]:
    """kube-state-metrics for the taint controller's queries (nodes and pods), with the admin kubeconfig."""
    from contract.taint_controller_queries import (  # noqa: PLC0415 (needs ROOT on the path)
        KSM_ANNOTATIONS_ALLOWLIST,
        KSM_LABELS_ALLOWLIST,
        KSM_OPT_IN_METRICS,
    )

    def cmd() -> list[str]:
        return [
            s.tool("kube-state-metrics"),
            f"--kubeconfig={ADMIN_KUBECONFIG}",
            "--host=127.0.0.1",
            f"--port={KSM_PORT}",
            "--telemetry-host=127.0.0.1",
            f"--telemetry-port={KSM_TELEMETRY_PORT}",
            "--resources=nodes,pods",
            # What the taint controller's by-type queries read (harmless for a stack of one GPU type).
            f"--metric-labels-allowlist={KSM_LABELS_ALLOWLIST}",
            f"--metric-annotations-allowlist={KSM_ANNOTATIONS_ALLOWLIST}",
            f"--metric-opt-in-list={KSM_OPT_IN_METRICS}",
        ]

    yield s.daemon("kube-state-metrics", cmd, ready_url=f"http://127.0.0.1:{KSM_TELEMETRY_PORT}/metrics")


#: Where Prometheus reads the real node's pods from (sim/scrape_targets.py writes them there).
DISCOVERY_DIR = "discovery"
#: How often the real node's pods are listed again (the scrape interval's pace).
DISCOVERY_EVERY = "2"


def scrape_targets(s: Stack) -> Iterable[Daemon]:
    """The discovery of the real node's pods by the stack's scrape contract (sim/scrape_targets.py), which the
    Prometheus below reads: what runs there as a pod is scraped as its manifest says, never from a list here."""
    from sim.scrape_targets import FILES  # noqa: PLC0415 (needs the venv: without one this module still answers)

    out = s.state / "prometheus" / DISCOVERY_DIR

    def cmd() -> list[str]:
        line = [s.python, str(ROOT / "sim" / "scrape_targets.py"), "--out", str(out)]
        line += ["--kubectl", s.tool("kubectl"), "--kubeconfig", str(ADMIN_KUBECONFIG)]
        return [*line, "--every", DISCOVERY_EVERY]

    def fingerprint() -> str:  # a watcher of older code is restarted
        return (ROOT / "sim" / "scrape_targets.py").read_text() + (ROOT / "components" / "scraping.py").read_text()

    yield s.daemon(
        "scrape-targets",
        cmd,
        ready_check=lambda: all((out / f).is_file() for f in FILES.values()),
        fingerprint=fingerprint,
    )


def discovered_jobs(directory: Path) -> list[dict[str, Any]]:
    """The scrape jobs of the pods sim/scrape_targets.py discovers: one per honour-labels setting (a job's setting),
    each pod's own ``job`` label from its manifest."""
    from sim.scrape_targets import FILES  # noqa: PLC0415 (needs the venv: without one this module still answers)

    return [
        {
            "job_name": "kubernetes-pods-honor-labels" if honor else "kubernetes-pods",
            "honor_labels": honor,
            "file_sd_configs": [{"files": [str(directory / name)], "refresh_interval": "5s"}],
        }
        for honor, name in FILES.items()
    ]


def prometheus(s: Stack) -> Iterable[Daemon]:
    """Prometheus (Debian) scraping, every 2s, what stands in for the cluster around the stack (kube-state-metrics,
    the fake dcgm-exporter, the Services' request counters) and every pod of the real node as sim/scrape_targets.py
    discovers it by the stack's scrape contract: our daemons are scraped as their manifests say, never from a list
    here."""
    flags = [
        "--storage.tsdb.retention.time=1d",
        "--log.level=warn",
        # The tests' cleanup deletes leftover ALERTS series (node_faults.forget_alerts); it listens on 127.0.0.1.
        "--web.enable-admin-api",
    ]

    def targets() -> dict[str | None, list[str]]:
        return {
            "kube-state-metrics": [f"127.0.0.1:{KSM_PORT}"],
            # under the job the stack's quarantine alerts match
            s.config.telemetry.dcgm_scrape_job: [f"127.0.0.1:{FAKE_DCGM_PORT}"],
            **({"serving": [f"127.0.0.1:{SERVING_METRICS_PORT}"]} if service_ports(s.config) else {}),
        }

    def cmd() -> list[str]:
        d = s.state / "prometheus"
        d.mkdir(parents=True, exist_ok=True)
        rules = write_deployed(s.config.telemetry.namespace, RULES_CONFIGMAP, RULES_KEY, d / "rules.yaml")
        jobs = [
            {
                "job_name": job,
                "static_configs": [{"targets": t}],
                # dcgm-exporter's pod mapping labels each GPU with the namespace and pod holding it: those win
                "honor_labels": job == s.config.telemetry.dcgm_scrape_job,
            }
            for job, t in targets().items()
        ]
        jobs += discovered_jobs(d / DISCOVERY_DIR)
        if s.config.telemetry.fabric_scrape_job:
            # the fake dcgm-exporter also stands for the fabric exporter's data counters
            jobs.append(
                {
                    "job_name": s.config.telemetry.fabric_scrape_job,
                    "metrics_path": "/fabric/metrics",
                    "static_configs": [{"targets": [f"127.0.0.1:{FAKE_DCGM_PORT}"]}],
                    "honor_labels": False,
                }
            )
        config = {
            "global": {"scrape_interval": "2s", "evaluation_interval": "2s"},
            # The alert rules the stack deployed (a ConfigMap: the local stack runs no Prometheus operator).
            "rule_files": [str(rules)],
            # The interruption accounting labels its series with the workload's namespace and job (the training
            # job's name), dcgm-exporter with the namespace and pod holding each GPU: theirs must win over the
            # scrape's own.
            "scrape_configs": jobs,
        }
        (d / "prometheus.yml").write_text(json.dumps(config, indent=2))
        return [
            "prometheus",
            f"--config.file={d / 'prometheus.yml'}",
            f"--storage.tsdb.path={d / 'data'}",
            f"--web.listen-address=127.0.0.1:{PROMETHEUS_PORT}",
            *flags,
        ]

    def fingerprint() -> str:  # a running Prometheus started with other flags, targets or rules is restarted
        scraped = json.dumps([{str(k): v for k, v in targets().items()}, s.config.telemetry.fabric_scrape_job])
        return "\n".join([*flags, scraped, deployed_text(s.config.telemetry.namespace, RULES_CONFIGMAP, RULES_KEY)])

    yield s.daemon("prometheus", cmd, ready_url=f"http://127.0.0.1:{PROMETHEUS_PORT}/-/ready", fingerprint=fingerprint)


def metrics_adapter(s: Stack) -> Iterable[Daemon]:
    """The metrics adapter (Go) as its ServiceAccount, with the file the stack deployed, where the stack runs it
    outside the cluster (``externalAddress``: the stack deploys no pod of it, only an ExternalName Service); none
    while it is off or deployed as pods (sim/placement.py checks those are on the real node). The API server reaches
    it through the stack's ExternalName Service and APIService, and it answers once the HPA controller can read a
    metric through them."""
    from components.metrics_adapter import APP, CONFIG_FILE  # noqa: PLC0415 (needs ROOT on the path)

    ma = s.config.metrics_adapter
    if not ma.enabled or ma.external_address is None:
        return
    # where the stack's ExternalName Service sends the API server
    port = int(ma.external_address.rpartition(":")[2])
    d = s.state / "metrics-adapter"

    def cmd() -> list[str]:
        kubeconfig = sa_kubeconfig(ma.namespace, APP, d / "kubeconfig")
        config = write_deployed(ma.namespace, APP, CONFIG_FILE, d / CONFIG_FILE)
        return [
            s.tool("gpucluster-metrics-adapter"),
            f"--config={config}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={d / 'serving-cert'}",
            f"--lister-kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
        ]

    def fingerprint() -> str:  # a running adapter started with another metrics file is restarted
        return deployed_text(ma.namespace, APP, CONFIG_FILE)

    yield s.daemon(
        "metrics-adapter", cmd, ready_check=lambda: custom_metrics_served(ma.namespace), fingerprint=fingerprint
    )


def custom_metrics_served(namespace: str) -> bool:
    """The API server routes custom.metrics.k8s.io to the adapter: its discovery document answers through it."""
    from contract.metrics_adapter_settings import API_GROUP, API_VERSION  # noqa: PLC0415 (needs ROOT on the path)

    try:
        kubectl("get", "--raw", f"/apis/{API_GROUP}/{API_VERSION}")
    except DaemonError:
        return False
    return True


def fake_dcgm(s: Stack) -> Iterable[Daemon]:
    """The fake dcgm-exporter for every node of the stack (test double: kwok nodes have no GPUs)."""

    def cmd() -> list[str]:
        stack = os.environ.get("GPUCLUSTER_SIM_STACK", str(ROOT / "stacks" / "Pulumi.local.yaml"))
        return [
            s.python,
            str(ROOT / "sim" / "fake_dcgm.py"),
            "--listen",
            f"127.0.0.1:{FAKE_DCGM_PORT}",
            "--stack",
            stack,
            # dcgm-exporter's pod mapping with the chart's kubernetes.enablePodLabels, as components/telemetry sets
            "--kubeconfig",
            str(ADMIN_KUBECONFIG),
            "--enable-pod-labels",
        ]

    def fingerprint() -> str:  # a running fake of older code (an admin endpoint it lacks) is restarted
        return (ROOT / "sim" / "fake_dcgm.py").read_text()

    yield s.daemon("fake-dcgm", cmd, ready_url=f"http://127.0.0.1:{FAKE_DCGM_PORT}/metrics", fingerprint=fingerprint)


#: Every daemon's builder, in start order (stop runs it backwards): the fake cloud and the fake RunPod, which the
#: provider's pod rents from, then what stands in around the cluster, kube-state-metrics and the fake dcgm-exporter
#: before the Prometheus that scrapes them. Nothing the stack deploys as a pod is here (sim/placement.py).
BUILDERS: tuple[Callable[[Stack], Iterable[Daemon]], ...] = (
    fake_clouds,
    fake_runpods,
    serving,
    kube_state_metrics,
    fake_dcgm,
    scrape_targets,
    prometheus,
    metrics_adapter,
)


#: What stands for the world outside the cluster: the fake providers. They start before the stack is deployed
#: (``start --outside``, run by make up ahead of ``pulumi up``), as real providers are there before any cluster: the
#: virtual node's pod, which ``pulumi up`` waits for, lists their instances as it starts.
OUTSIDE: tuple[Callable[[Stack], Iterable[Daemon]], ...] = (fake_clouds, fake_runpods)


def registry(
    stack_file: Path | None = None,
    state: Path | None = None,
    builders: Sequence[Callable[[Stack], Iterable[Daemon]]] = BUILDERS,
) -> dict[str, Daemon]:
    """Every daemon of the stack (of ``builders``), in start order (stop runs it backwards)."""
    cfg = stack_config(stack_file)
    if not cfg.burst_enabled:
        raise DaemonError("the stack has no enabled gpucluster:burst section: nothing to run")
    stack = Stack(config=cfg, bin_dir=tools_bin(), python=python(), state=state or DAEMONS_STATE)
    return {d.name: d for build in builders for d in build(stack)}


def outside_registry() -> dict[str, Daemon]:
    """The daemons standing for the world outside the cluster (:data:`OUTSIDE`), in start order."""
    return registry(builders=OUTSIDE)


def stop_departed(known: Mapping[str, Daemon]) -> list[str]:
    """Stop every process a pid file names that the registry no longer has (a daemon the stack now runs as a pod
    of the real node, or turned off): it would otherwise go on beside its replacement. The names stopped."""
    if not known:
        return []
    state = next(iter(known.values())).state
    stopped = []
    for pid_file in sorted(state.glob("*.pid")):
        name = pid_file.name.removesuffix(".pid")
        if name in known:
            continue
        departed = Daemon(name, list, state=state)
        if departed.running():
            departed.stop()
            stopped.append(name)
        pid_file.unlink(missing_ok=True)
    return stopped


def main(argv: Sequence[str] | None = None, registry: Callable[[], dict[str, Daemon]] = registry) -> int:
    parser = argparse.ArgumentParser(prog="sim/processes.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["start", "stop", "status", "kill", "restart"])
    parser.add_argument("names", nargs="*", help="daemons to act on (default: all)")
    parser.add_argument(
        "--outside", action="store_true", help="only what stands for the world outside the cluster (the fake providers)"
    )
    args = parser.parse_args(argv)
    try:
        known = outside_registry() if args.outside else registry()
    except DaemonError as e:
        print(f"sim/processes.py: error: {e}", file=sys.stderr)
        return 1
    unknown = [n for n in args.names if n not in known]
    if unknown:
        print(f"sim/processes.py: error: unknown daemon(s) {unknown}; known: {list(known)}", file=sys.stderr)
        return 2
    names = list(args.names) or list(known)
    try:
        if args.action == "start" and not args.names and not args.outside:
            for n in stop_departed(known):
                print(f"==> {n} stopped (the stack no longer runs it as a process here)")
        if args.action == "start":
            for n in names:
                t0 = time.monotonic()
                pid = known[n].start()
                print(f"==> {n} running (pid {pid}, ready in {time.monotonic() - t0:.1f}s, log {known[n].log_file})")
        elif args.action == "stop":
            for n in reversed(names):
                known[n].stop()
                print(f"==> {n} stopped")
        elif args.action == "kill":
            for n in names:
                print(f"==> {n} {'killed (SIGKILL)' if known[n].kill() else 'was not running'}")
        elif args.action == "restart":
            for n in names:
                known[n].stop()
                print(f"==> {n} restarted (pid {known[n].start()})")
        else:
            for n, d in known.items():
                running = d.pid()
                print(f"{n:20s} {'running pid ' + str(running) if running else 'stopped'}")
    except DaemonError as e:
        print(f"sim/processes.py: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
