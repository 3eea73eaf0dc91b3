"""What ``sim/processes.py`` runs its daemons with: the simulated cluster's kubectl, what Pulumi deployed read back
(ConfigMaps, Secrets, a ServiceAccount's token as a kubeconfig), :class:`Daemon`, one local process with its pid
file, log, readiness probe and configuration fingerprint, and :class:`Stack`, what every daemon's builder reads.

``sim/processes.py`` holds the builders of what stands around the stack and the command line, ``sim/outside.py``
the builders of what stands for the world outside the cluster; this module holds what they share, so that none
grows past what one reads at once.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
STATE = ROOT / ".state"
DAEMONS_STATE = STATE / "daemons"
ADMIN_KUBECONFIG = STATE / "sim" / "kubeconfig"
VENV_BIN = ROOT / ".venv" / "bin"
KUBECTL_TIMEOUT = 60

#: Programs the simulated cluster takes from Debian packages (tools/install-debian-deps.sh installs them); every
#: other program is a pinned tool (make tools) or the project's interpreter (make venv).
DEBIAN_PROGRAMS = frozenset({"prometheus"})


class DaemonError(RuntimeError):
    """A daemon could not be prepared or started; the message says which and why."""


# ---------------------------------------------------------------------------------------------------------------
# Programs, the cluster and its objects
# ---------------------------------------------------------------------------------------------------------------


def tools_bin() -> Path:
    """The pinned tools' bin directory, as tools/bin-dir.sh says (it may not exist yet: make tools)."""
    try:
        out = subprocess.run([str(ROOT / "tools" / "bin-dir.sh")], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        raise DaemonError(f"tools/bin-dir.sh cannot say where the pinned tools are: {e}") from None
    return Path(out.stdout.strip())


def python() -> str:
    venv = VENV_BIN / "python"
    return str(venv) if venv.exists() else sys.executable


def missing_program(program: str) -> DaemonError:
    """The error for a program that is not there, saying what to run to get it."""
    name = Path(program).name
    if name in DEBIAN_PROGRAMS:
        return DaemonError(f"{name} not found: run make debian-deps")
    if os.sep not in program:
        return DaemonError(f"{name} not found on PATH: install it")
    where = Path(program).parent
    return DaemonError(f"{name} not found in {where}: run {'make venv' if where == VENV_BIN else 'make tools'}")


def require_program(program: str, env: Mapping[str, str] | None = None) -> str:
    """The executable ``program`` names (a path, or a name looked up on ``env``'s PATH), or a DaemonError."""
    if os.sep in program:
        if os.path.isfile(program) and os.access(program, os.X_OK):
            return program
        raise missing_program(program)
    found = shutil.which(program, path=(os.environ if env is None else env).get("PATH", os.defpath))
    if found is None:
        raise missing_program(program)
    return found


def kubectl(*args: str, kubeconfig: Path | None = None, input: str | None = None, check: bool = True) -> str:
    """``kubectl ARGS`` against the simulated cluster (the admin kubeconfig unless told otherwise); its stdout."""
    program = require_program(str(tools_bin() / "kubectl"))
    config = ADMIN_KUBECONFIG if kubeconfig is None else kubeconfig
    try:
        proc = subprocess.run(
            [program, "--kubeconfig", str(config), *args],
            capture_output=True,
            text=True,
            input=input,
            timeout=KUBECTL_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise DaemonError(f"kubectl {' '.join(args)}: no answer within {KUBECTL_TIMEOUT}s") from None
    except OSError as e:
        raise DaemonError(f"kubectl {' '.join(args)}: cannot run {program}: {e.strerror}") from None
    if check and proc.returncode != 0:
        raise DaemonError(f"kubectl {' '.join(args)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def kubectl_json(*args: str) -> dict[str, Any]:
    """``kubectl ARGS -o json``, parsed."""
    out = kubectl(*args, "-o", "json")
    try:
        data = json.loads(out)
    except json.JSONDecodeError:
        raise DaemonError(f"kubectl {' '.join(args)} -o json: the reply is not JSON") from None
    if not isinstance(data, dict):
        raise DaemonError(f"kubectl {' '.join(args)} -o json: the reply is not an object")
    return data


def sa_kubeconfig(namespace: str, service_account: str, out: Path) -> Path:
    """A kubeconfig for the simulated API server that authenticates as a ServiceAccount of the stack."""
    token = kubectl("create", "token", service_account, "-n", namespace, "--duration=24h").strip()
    if not token:
        raise DaemonError(f"no token for serviceaccount {namespace}/{service_account}")
    try:
        cluster = kubectl_json("config", "view", "--raw", "--minify")["clusters"][0]["cluster"]
    except (KeyError, IndexError, TypeError):
        raise DaemonError(f"the admin kubeconfig {ADMIN_KUBECONFIG} names no cluster") from None
    user = f"{namespace}-{service_account}"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "sim", "cluster": cluster}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "sim", "user": user}}],
        "current-context": "sa",
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(config))
    out.chmod(0o600)
    return out


def configmap_data(namespace: str, name: str) -> dict[str, str]:
    data = kubectl_json("get", "configmap", name, "-n", namespace).get("data") or {}
    return {str(k): str(v) for k, v in data.items()}


def deployed_text(namespace: str, configmap: str, key: str) -> str:
    """One key of a ConfigMap Pulumi deployed (a daemon's settings file)."""
    data = configmap_data(namespace, configmap)
    if key not in data:
        raise DaemonError(f"ConfigMap {namespace}/{configmap} has no key {key}: deploy the stack first (make up)")
    return data[key]


def write_deployed(namespace: str, configmap: str, key: str, out: Path) -> Path:
    """Write one key of a deployed ConfigMap to ``out``, as a ConfigMap volume mount would."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(deployed_text(namespace, configmap, key))
    return out


def secret_data(namespace: str, name: str) -> dict[str, str]:
    """A Secret's data (base64 values), as the API server returns it."""
    data = kubectl_json("get", "secret", name, "-n", namespace).get("data") or {}
    return {str(k): str(v) for k, v in data.items()}


def secret_to_dir(namespace: str, name: str, out: Path) -> Path:
    """Write a Secret's keys as files (mode 0600), as a Secret volume mount would."""
    data = secret_data(namespace, name)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True, mode=0o700)
    for key, value in data.items():
        f = out / key
        f.write_bytes(_decoded(namespace, name, key, value))
        f.chmod(0o600)
    return out


def secret_value(namespace: str, name: str, key: str) -> bytes:
    """One key of a Secret, decoded."""
    data = secret_data(namespace, name)
    if key not in data:
        raise DaemonError(f"Secret {namespace}/{name} has no key {key}: deploy the stack first (make up)")
    return _decoded(namespace, name, key, data[key])


def _decoded(namespace: str, name: str, key: str, value: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise DaemonError(f"Secret {namespace}/{name}: key {key} is not base64") from None


def labelled_name(kind: str, namespace: str, selector: str) -> str:
    """The name of the first object of ``kind`` in ``namespace`` matching ``selector`` ('' when there is none)."""
    return kubectl("get", kind, "-n", namespace, "-l", selector, "-o", "jsonpath={.items[0].metadata.name}").strip()


def http_ok(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            status: int = r.status
            return 200 <= status < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


def node_ready(name: str) -> bool:
    out = kubectl("get", "node", name, "-o", "json", check=False)
    if not out:
        return False
    try:
        conditions = json.loads(out).get("status", {}).get("conditions") or []
    except (json.JSONDecodeError, AttributeError):
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


# ---------------------------------------------------------------------------------------------------------------
# One local process
# ---------------------------------------------------------------------------------------------------------------


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
    #: Where its pid file, log and configuration fingerprint live.
    state: Path = DAEMONS_STATE

    @property
    def fingerprint_file(self) -> Path:
        return self.state / f"{self.name}.config-sha256"

    @property
    def pid_file(self) -> Path:
        return self.state / f"{self.name}.pid"

    @property
    def log_file(self) -> Path:
        return self.state / "logs" / f"{self.name}.log"

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
        env = {**os.environ, **self.env}
        require_program(cmd[0], env)
        self.fingerprint_file.parent.mkdir(parents=True, exist_ok=True)
        self.fingerprint_file.write_text(current)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with self.log_file.open("ab") as log:
            log.write(f"\n=== {time.strftime('%Y-%m-%dT%H:%M:%S')} start: {' '.join(cmd)}\n".encode())
            try:
                proc = subprocess.Popen(
                    cmd,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    cwd=ROOT,
                    env=env,
                    start_new_session=True,
                )
            except OSError as e:
                raise DaemonError(f"{self.name}: cannot run {cmd[0]}: {e.strerror}") from None
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


def stack_config(stack_file: Path | None = None) -> Any:
    sys.path.insert(0, str(ROOT))
    try:
        from components.config import StackConfigError, load_stack_file  # noqa: PLC0415 (needs ROOT on the path)
    except ImportError as e:
        raise DaemonError(f"{sys.executable} cannot import {e.name}: run make venv") from None

    path = stack_file or Path(os.environ.get("GPUCLUSTER_SIM_STACK", ROOT / "stacks" / "Pulumi.local.yaml"))
    try:
        return load_stack_file(path)
    except StackConfigError as e:
        raise DaemonError(str(e)) from e


@dataclass(frozen=True)
class Stack:
    """What every daemon's builder reads: the stack's config, the pinned tools, the interpreter, the state."""

    config: Any
    bin_dir: Path
    python: str
    state: Path

    @property
    def burst(self) -> Any:
        """The burst provider service's settings (providers, virtual node)."""
        return self.config.burst.settings

    def tool(self, name: str) -> str:
        return str(self.bin_dir / name)

    def daemon(self, name: str, prepare: Callable[[], list[str]], **kwargs: Any) -> Daemon:
        return Daemon(name, prepare, state=self.state, **kwargs)
