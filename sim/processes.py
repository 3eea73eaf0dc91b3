"""Local processes standing in for the cluster's own daemons on the simulated cluster.

On a real cluster the virtual node, the burst provider service, the taint controller and the descheduler run as the
Deployments Pulumi created. On the simulated cluster those pods land on kwok nodes, where nothing runs, so this
module runs the same programs as local processes, each with:

- the configuration Pulumi deployed (read back from the cluster's ConfigMaps and Secrets), and
- a kubeconfig holding a token of the ServiceAccount Pulumi created for it (``kubectl create token``), so the RBAC
  the stack grants is the RBAC they run with.

It also runs what the simulated cluster needs around them: kube-state-metrics and a Prometheus (Debian) that
scrapes it and the daemons, and the fake GPU cloud the local stack's fake provider points at.

``python sim/processes.py start [NAME ...]`` (default: all, in dependency order), ``stop``, ``status``, ``kill NAME``
(SIGKILL, as a crash), ``restart NAME``. State, logs and pid files live in ``.state/daemons/``.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
STATE = ROOT / ".state"
DAEMONS_STATE = STATE / "daemons"
ADMIN_KUBECONFIG = STATE / "sim" / "kubeconfig"


class DaemonError(RuntimeError):
    """A daemon could not be prepared or started; the message says which and why."""


def tools_bin() -> Path:
    out = subprocess.run([str(ROOT / "tools" / "bin-dir.sh")], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def python() -> str:
    venv = ROOT / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def kubectl(*args: str, kubeconfig: Path = ADMIN_KUBECONFIG, input: str | None = None, check: bool = True) -> str:
    proc = subprocess.run(
        [str(tools_bin() / "kubectl"), "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        input=input,
        timeout=60,
        check=False,
    )
    if check and proc.returncode != 0:
        raise DaemonError(f"kubectl {' '.join(args)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def sa_kubeconfig(namespace: str, service_account: str, out: Path) -> Path:
    """A kubeconfig for the simulated API server that authenticates as a ServiceAccount of the stack."""
    token = kubectl("create", "token", service_account, "-n", namespace, "--duration=24h").strip()
    if not token:
        raise DaemonError(f"no token for serviceaccount {namespace}/{service_account}")
    admin = json.loads(kubectl("config", "view", "--raw", "--minify", "-o", "json"))
    cluster = admin["clusters"][0]["cluster"]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "sim", "cluster": cluster}],
        "users": [{"name": f"{namespace}-{service_account}", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "sim", "user": f"{namespace}-{service_account}"}}],
        "current-context": "sa",
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(config))
    out.chmod(0o600)
    return out


def configmap_data(namespace: str, name: str) -> dict[str, str]:
    obj = json.loads(kubectl("get", "configmap", name, "-n", namespace, "-o", "json"))
    data = obj.get("data") or {}
    return {str(k): str(v) for k, v in data.items()}


def secret_to_dir(namespace: str, name: str, out: Path) -> Path:
    """Write a Secret's keys as files (mode 0600), as a Secret volume mount would."""
    obj = json.loads(kubectl("get", "secret", name, "-n", namespace, "-o", "json"))
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True, mode=0o700)
    for key, value in (obj.get("data") or {}).items():
        f = out / key
        f.write_bytes(base64.b64decode(value))
        f.chmod(0o600)
    return out


def http_ok(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return 200 <= r.status < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


@dataclass
class Daemon:
    """One local process: how to prepare it, run it and know it is ready."""

    name: str
    prepare: Callable[[], list[str]]  # returns the command line; writes config files it needs
    ready_url: str | None = None
    ready_check: Callable[[], bool] | None = None
    ready_timeout: float = 90.0
    env: dict[str, str] = field(default_factory=dict)
    #: What the daemon was configured from (e.g. the ConfigMap Pulumi deployed); a running daemon whose
    #: configuration changed since it started is restarted by ``start``, so ``make up`` after a config change
    #: leaves no daemon on stale settings.
    fingerprint: Callable[[], str] | None = None

    @property
    def fingerprint_file(self) -> Path:
        return DAEMONS_STATE / f"{self.name}.config-sha256"

    @property
    def pid_file(self) -> Path:
        return DAEMONS_STATE / f"{self.name}.pid"

    @property
    def log_file(self) -> Path:
        return DAEMONS_STATE / "logs" / f"{self.name}.log"

    def pid(self) -> int | None:
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            return pid
        # A zombie child of ours counts as dead.
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            if stat.rsplit(")", 1)[1].split()[0] == "Z":
                return None
        except OSError:
            return None
        return pid

    def running(self) -> bool:
        return self.pid() is not None

    def start(self) -> int:
        current = hashlib.sha256(self.fingerprint().encode()).hexdigest() if self.fingerprint else ""
        if (pid := self.pid()) is not None:
            recorded = self.fingerprint_file.read_text() if self.fingerprint_file.exists() else ""
            if current == recorded:
                return pid
            print(f"==> {self.name}: its configuration changed since it started; restarting it")
            self.stop()
        cmd = self.prepare()
        self.fingerprint_file.parent.mkdir(parents=True, exist_ok=True)
        self.fingerprint_file.write_text(current)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with self.log_file.open("ab") as log:
            log.write(f"\n=== {time.strftime('%Y-%m-%dT%H:%M:%S')} start: {' '.join(cmd)}\n".encode())
            proc = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=ROOT,
                env={**os.environ, **self.env},
                start_new_session=True,
            )
        self.pid_file.write_text(str(proc.pid))
        if self.ready_url or self.ready_check:
            deadline = time.monotonic() + self.ready_timeout
            while not self.is_ready():
                if proc.poll() is not None:
                    raise DaemonError(f"{self.name} exited with {proc.returncode} at start; log: {self.log_file}")
                if time.monotonic() > deadline:
                    raise DaemonError(f"{self.name} not ready after {self.ready_timeout:.0f}s; log: {self.log_file}")
                time.sleep(0.3)
        return proc.pid

    def is_ready(self) -> bool:
        if self.ready_url and not http_ok(self.ready_url):
            return False
        return not (self.ready_check and not self.ready_check())

    def signal(self, sig: signal.Signals) -> bool:
        pid = self.pid()
        if pid is None:
            return False
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return False
        return True

    def kill(self) -> bool:
        """SIGKILL, as a crash would: nothing gets to clean up."""
        killed = self.signal(signal.SIGKILL)
        self._reap()
        return killed

    def stop(self, timeout: float = 15.0) -> None:
        if self.signal(signal.SIGTERM):
            deadline = time.monotonic() + timeout
            while self.running() and time.monotonic() < deadline:
                self._reap()
                time.sleep(0.2)
            if self.running():
                self.kill()
        self._reap()
        self.pid_file.unlink(missing_ok=True)

    def _reap(self) -> None:
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass


def wait_for(what: str, check: Callable[[], Any], timeout: float, interval: float = 0.5) -> Any:
    """Poll ``check`` until it returns something truthy; DaemonError naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise DaemonError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


# ---------------------------------------------------------------------------------------------------------------
# The daemons of the local stack
# ---------------------------------------------------------------------------------------------------------------

#: Where the sim's monitoring listens (the local stack's taint controller queries PROMETHEUS_URL).
KSM_PORT = 18090
KSM_TELEMETRY_PORT = 18091
PROMETHEUS_PORT = 9090
TAINT_CONTROLLER_PORTS = {"taint-controller-a": 9102, "taint-controller-b": 9103}
#: The fake cloud's knobs, overridable from the environment (the flip scenario and chaos runs set them).
FAKE_CLOUD_ENV = {
    "boot-seconds": "GPUCLUSTER_FAKE_BOOT_SECONDS",
    "create-failure-rate": "GPUCLUSTER_FAKE_CREATE_FAILURE_RATE",
    "death-rate": "GPUCLUSTER_FAKE_DEATH_RATE",
}
FAKE_CLOUD_DEFAULTS = {"boot-seconds": "5", "create-failure-rate": "0", "death-rate": "0"}


def stack_config(stack_file: Path | None = None) -> Any:
    sys.path.insert(0, str(ROOT))
    from components.config import StackConfigError, load_stack_file  # noqa: PLC0415 (needs ROOT on the path)

    path = stack_file or Path(os.environ.get("GPUCLUSTER_SIM_STACK", ROOT / "stacks" / "Pulumi.local.yaml"))
    try:
        return load_stack_file(path)
    except StackConfigError as e:
        raise DaemonError(str(e)) from e


def _node_ready(name: str) -> bool:
    out = kubectl("get", "node", name, "-o", "json", check=False)
    if not out:
        return False
    conditions = json.loads(out).get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def registry(stack_file: Path | None = None) -> dict[str, Daemon]:
    """Every daemon of the stack, in start order (stop runs it backwards)."""
    from components.taint_controller import APP as TC_APP  # noqa: PLC0415
    from components.virtual_node import APP as VN_APP  # noqa: PLC0415
    from components.virtual_node import NODE_TAINT  # noqa: PLC0415

    cfg = stack_config(stack_file)
    if not cfg.burst_enabled:
        raise DaemonError("the stack has no enabled gpucluster:burst section: nothing to run")
    burst = cfg.burst.settings
    vn = burst.virtual_node
    ns = vn.namespace
    state = DAEMONS_STATE
    bin_dir = tools_bin()
    py = python()
    out: dict[str, Daemon] = {}

    fakes = [p for p in burst.providers if p.fake is not None]
    for p in fakes:
        url = p.fake.url
        port = url.rsplit(":", 1)[-1].rstrip("/")

        def fake_cmd(p: Any = p, port: str = port) -> list[str]:
            knobs = {k: os.environ.get(env, FAKE_CLOUD_DEFAULTS[k]) for k, env in FAKE_CLOUD_ENV.items()}
            cap = sum(x.max_gpus for x in burst.providers) * 4
            cmd = [py, "-m", "daemons.burst_provider.fakes.cloud_server", "--listen", f"127.0.0.1:{port}"]
            for k, v in knobs.items():
                cmd += [f"--{k}", v]
            for gpu, offer in p.gpu_types.items():
                cmd += ["--capacity", f"{gpu}={cap}", "--price", f"{gpu}={offer.price_per_gpu_hour}"]
            return [
                *cmd,
                "--seed",
                os.environ.get("GPUCLUSTER_FAKE_SEED", "1"),
                "--state-file",
                str(state / f"fake-cloud-{p.name}.json"),
            ]

        out[f"fake-cloud-{p.name}"] = Daemon(f"fake-cloud-{p.name}", fake_cmd, ready_url=f"{url}/offers")

    def provider_config() -> str:
        secret = json.loads(kubectl("get", "secret", f"{VN_APP}-provider-secrets", "-n", ns, "-o", "json"))
        return configmap_data(ns, f"{VN_APP}-settings")["settings.json"] + json.dumps(secret.get("data") or {})

    def provider_cmd() -> list[str]:
        d = state / "provider"
        kc = sa_kubeconfig(ns, VN_APP, d / "kubeconfig")
        settings = d / "settings.json"
        settings.write_text(configmap_data(ns, f"{VN_APP}-settings")["settings.json"])
        secrets = secret_to_dir(ns, f"{VN_APP}-provider-secrets", d / "secrets")
        return [
            py,
            "-m",
            "daemons.burst_provider",
            "--settings",
            str(settings),
            "--kubeconfig",
            str(kc),
            "--secrets-dir",
            str(secrets),
            "--listen",
            f"127.0.0.1:{vn.port}",
        ]

    out["provider"] = Daemon(
        "provider", provider_cmd, ready_url=f"http://127.0.0.1:{vn.port}/healthz", fingerprint=provider_config
    )

    def node_cmd() -> list[str]:
        kc = sa_kubeconfig(ns, VN_APP, state / "virtual-node" / "kubeconfig")
        return [
            str(bin_dir / "gpucluster-virtual-node"),
            f"--nodename={vn.node_name}",
            f"--kubeconfig={kc}",
            f"--provider-url=http://127.0.0.1:{vn.port}",
            f"--taint={NODE_TAINT}",
        ]

    # The node reads its capacity from the provider service once, at start: it follows the provider settings.
    out["virtual-node"] = Daemon(
        "virtual-node", node_cmd, ready_check=lambda: _node_ready(vn.node_name), fingerprint=provider_config
    )

    def ksm_cmd() -> list[str]:
        return [
            str(bin_dir / "kube-state-metrics"),
            f"--kubeconfig={ADMIN_KUBECONFIG}",
            "--host=127.0.0.1",
            f"--port={KSM_PORT}",
            "--telemetry-host=127.0.0.1",
            f"--telemetry-port={KSM_TELEMETRY_PORT}",
            "--resources=nodes,pods",
        ]

    out["kube-state-metrics"] = Daemon(
        "kube-state-metrics", ksm_cmd, ready_url=f"http://127.0.0.1:{KSM_TELEMETRY_PORT}/metrics"
    )

    def prometheus_cmd() -> list[str]:
        d = state / "prometheus"
        d.mkdir(parents=True, exist_ok=True)
        targets = {
            "kube-state-metrics": [f"127.0.0.1:{KSM_PORT}"],
            "taint-controller": [f"127.0.0.1:{p}" for p in TAINT_CONTROLLER_PORTS.values()],
            "burst-provider": [f"127.0.0.1:{vn.port}"],
        }
        config = {
            "global": {"scrape_interval": "2s", "evaluation_interval": "2s"},
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": t}]} for job, t in targets.items()],
        }
        (d / "prometheus.yml").write_text(json.dumps(config, indent=2))
        return [
            "prometheus",
            f"--config.file={d / 'prometheus.yml'}",
            f"--storage.tsdb.path={d / 'data'}",
            f"--web.listen-address=127.0.0.1:{PROMETHEUS_PORT}",
            "--storage.tsdb.retention.time=1d",
            "--log.level=warn",
        ]

    out["prometheus"] = Daemon("prometheus", prometheus_cmd, ready_url=f"http://127.0.0.1:{PROMETHEUS_PORT}/-/ready")

    tc_ns = cfg.burst.taint_controller.namespace
    for name, port in TAINT_CONTROLLER_PORTS.items():

        def tc_cmd(name: str = name, port: int = port) -> list[str]:
            d = state / name
            kc = sa_kubeconfig(tc_ns, TC_APP, d / "kubeconfig")
            settings = d / "settings.json"
            settings.parent.mkdir(parents=True, exist_ok=True)
            settings.write_text(configmap_data(tc_ns, f"{TC_APP}-settings")["settings.json"])
            return [
                py,
                "-m",
                "daemons.taint_controller",
                "--settings",
                str(settings),
                "--kubeconfig",
                str(kc),
                "--listen",
                f"127.0.0.1:{port}",
                "--identity",
                name,
            ]

        out[name] = Daemon(
            name,
            tc_cmd,
            ready_url=f"http://127.0.0.1:{port}/healthz",
            fingerprint=lambda: configmap_data(tc_ns, f"{TC_APP}-settings")["settings.json"],
        )

    dns = cfg.descheduler.namespace

    def descheduler_cmd() -> list[str]:
        d = state / "descheduler"
        sa = kubectl(
            "get",
            "serviceaccount",
            "-n",
            dns,
            "-l",
            "app.kubernetes.io/name=descheduler",
            "-o",
            "jsonpath={.items[0].metadata.name}",
        ).strip()
        if not sa:
            raise DaemonError(f"no descheduler ServiceAccount in namespace {dns}: deploy the stack first (make up)")
        kc = sa_kubeconfig(dns, sa, d / "kubeconfig")
        cm = kubectl(
            "get",
            "configmap",
            "-n",
            dns,
            "-l",
            "app.kubernetes.io/name=descheduler",
            "-o",
            "jsonpath={.items[0].metadata.name}",
        ).strip()
        policy = d / "policy.yaml"
        policy.write_text(configmap_data(dns, cm)["policy.yaml"])
        interval = os.environ.get("GPUCLUSTER_DESCHEDULER_INTERVAL", cfg.descheduler.interval)
        return [
            str(bin_dir / "descheduler"),
            f"--kubeconfig={kc}",
            f"--policy-config-file={policy}",
            f"--descheduling-interval={interval}",
            "--secure-port=0",
            "--disable-metrics",
            "--v=3",
        ]

    def descheduler_config() -> str:
        cm = kubectl("get", "configmap", "-n", dns, "-l", "app.kubernetes.io/name=descheduler", "-o", "json")
        return json.dumps([c.get("data") for c in json.loads(cm).get("items", [])], sort_keys=True)

    out["descheduler"] = Daemon("descheduler", descheduler_cmd, fingerprint=descheduler_config)
    return out


def main(argv: Sequence[str] | None = None, registry: Callable[[], dict[str, Daemon]] = registry) -> int:
    parser = argparse.ArgumentParser(prog="sim/processes.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["start", "stop", "status", "kill", "restart"])
    parser.add_argument("names", nargs="*", help="daemons to act on (default: all)")
    args = parser.parse_args(argv)
    try:
        known = registry()
    except DaemonError as e:
        print(f"sim/processes.py: error: {e}", file=sys.stderr)
        return 1
    unknown = [n for n in args.names if n not in known]
    if unknown:
        print(f"sim/processes.py: error: unknown daemon(s) {unknown}; known: {list(known)}", file=sys.stderr)
        return 2
    names = list(args.names) or list(known)
    try:
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
                pid = d.pid()
                print(f"{n:20s} {'running pid ' + str(pid) if pid else 'stopped'}")
    except DaemonError as e:
        print(f"sim/processes.py: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
