"""The simulated cluster with the local stack applied, brought up once per test session by `make up`'s script.

``local_stack`` runs ``sim/stack-up.sh`` (simulated cluster, ``pulumi up --stack local``, the Kueue controller)
and, at the end of the session, ``sim/stack-down.sh`` -- unless the stack was already up when the session
started (someone's ``make up``), which is then reused and left running. ``GPUCLUSTER_SIM_KEEP=1`` keeps a
cluster the session created. Tests skip, saying why, only when the pinned tools are not built or the Debian programs
it runs are not installed (under CI=true they fail instead).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from components.training.manifest import reservation_toleration
from contract.constants import PODSET_UNCONSTRAINED_TOPOLOGY, RESERVATION_KEY
from tests.support.require import debian_tool, missing
from tests.support.sim import tools_bin

ROOT = Path(__file__).resolve().parents[2]
STATE = ROOT / ".state"
KUBECONFIG = STATE / "sim" / "kubeconfig"
NEEDED_TOOLS = (
    "kwokctl",
    "kwok",
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "kueue",
    "jobset",
    "descheduler",
    "pulumi",
    "pulumi-language-python",
    "pulumi-resource-kubernetes",
    "gpucluster-virtual-node",
    "kube-state-metrics",
)
#: What sim/stack-up.sh runs from Debian packages (make debian-deps) besides the real node's parts, which
#: sim/node.py checks itself: the daemons' Prometheus.
DEBIAN_PROGRAMS = ("prometheus",)


@dataclass(frozen=True)
class LocalStack:
    """How tests reach the simulated cluster and the engine."""

    root: Path
    bin: Path
    kubeconfig: Path
    env: Mapping[str, str] = field(default_factory=dict)

    def run(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        """Run a command with the stack's environment (tools on PATH, KUBECONFIG, Pulumi backend)."""
        proc = subprocess.run(
            list(args),
            input=input,
            capture_output=True,
            text=True,
            cwd=self.root,
            env=dict(self.env),
            timeout=timeout,
            check=False,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"{' '.join(args)} exited {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}\n"
                f"--- stderr\n{proc.stderr[-4000:]}"
            )
        return proc

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        return self.run("kubectl", *args, input=input, check=check).stdout

    def get(self, *args: str) -> dict[str, Any]:
        """``kubectl get ... -o json`` parsed."""
        data = json.loads(self.kubectl("get", *args, "-o", "json"))
        assert isinstance(data, dict)
        return data

    def items(self, *args: str) -> list[dict[str, Any]]:
        return list(self.get(*args).get("items", []))

    def apply(self, manifest: Mapping[str, Any]) -> None:
        self.kubectl("apply", "-f", "-", input=json.dumps(manifest))

    def pulumi(self, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return self.run("pulumi", *args, "--non-interactive", check=check, timeout=timeout)

    def watch(self, *args: str) -> Watch:
        """Every version of the objects ``kubectl get ARGS --watch`` streams, from now on (see :class:`Watch`)."""
        return Watch(self, args)


class Watch:
    """Records every object version a ``kubectl get --watch -o json`` stream delivers, in a background thread.

    Polling can miss a short-lived state (a Failed pod that the virtual node deletes as soon as its replacement
    exists lives for at most one GC interval); a watch sees every update the API server commits. Use as a context
    manager so the kubectl process is stopped.
    """

    def __init__(self, stack: LocalStack, args: Sequence[str]) -> None:
        self._proc = subprocess.Popen(
            ["kubectl", "get", *args, "--watch", "-o", "json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=stack.root,
            env=dict(stack.env),
        )
        self._lock = threading.Lock()
        self._seen: list[dict[str, Any]] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        decoder = json.JSONDecoder()
        buffer = ""
        for line in self._proc.stdout:
            buffer += line
            while buffer.strip():
                try:
                    obj, end = decoder.raw_decode(buffer.lstrip())
                except json.JSONDecodeError:
                    break  # an object split across lines: read on
                buffer = buffer.lstrip()[end:]
                if isinstance(obj, dict):
                    with self._lock:
                        self._seen.append(obj)

    def seen(self) -> list[dict[str, Any]]:
        """Every object version received so far, oldest first."""
        with self._lock:
            return list(self._seen)

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc: object) -> None:
        self._proc.terminate()
        self._proc.wait(timeout=10)
        self._thread.join(timeout=10)


def stack_env(bin_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "PATH": f"{bin_dir}:{env.get('PATH', '')}",
            "KUBECONFIG": str(KUBECONFIG),
            "PULUMI_SKIP_UPDATE_CHECK": "1",
            "PULUMI_CONFIG_PASSPHRASE": "gpucluster-local",
            "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "1",
            "PULUMI_HOME": str(STATE / "pulumi-home"),
            "PULUMI_BACKEND_URL": f"file://{STATE / 'pulumi'}",
        }
    )
    return env


def _already_up(stack: LocalStack) -> bool:
    if not KUBECONFIG.exists() or not (STATE / "pulumi").is_dir():
        return False
    probe = stack.run("kubectl", "get", "clusterqueues.kueue.x-k8s.io", "-o", "name", check=False, timeout=30)
    if probe.returncode != 0 or not probe.stdout.strip():
        return False
    # Kueue's controller is the chart's pod on the real node: up once its Deployment has an available replica.
    kueue = stack.run(
        "kubectl",
        "get",
        "deployments",
        "-A",
        "-l",
        "app.kubernetes.io/name=kueue",
        "-o",
        "jsonpath={.items[*].status.availableReplicas}",
        check=False,
        timeout=30,
    )
    return kueue.returncode == 0 and any(int(n) > 0 for n in kueue.stdout.split() if n.isdigit())


def _script(stack: LocalStack, name: str, log: Path, **env: str) -> None:
    with log.open("w") as out:
        proc = subprocess.run(
            [str(ROOT / "sim" / name)],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env={**stack.env, **env},
            check=False,
        )
    if proc.returncode != 0:
        tail = "\n".join(log.read_text().splitlines()[-40:])
        pytest.fail(f"sim/{name} failed (exit {proc.returncode}); log {log}:\n{tail}", pytrace=False)


def require_programs(bin_dir: Path) -> None:
    """Skip (or, under CI=true, fail) naming what to run when a program sim/stack-up.sh needs is missing."""
    absent = [t for t in NEEDED_TOOLS if not (bin_dir / t).is_file()]
    if absent:
        missing(f"pinned tools not built in {bin_dir} (missing: {', '.join(absent)}); run make tools")
    for program in DEBIAN_PROGRAMS:
        debian_tool(program)


@pytest.fixture(scope="session")
def local_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    bin_dir = tools_bin()
    require_programs(bin_dir)
    stack = LocalStack(root=ROOT, bin=bin_dir, kubeconfig=KUBECONFIG, env=stack_env(bin_dir))
    reuse = _already_up(stack)
    logs = tmp_path_factory.mktemp("sim")
    # No preview pass before the update: test_stack.py's test_preview_after_up_shows_no_changes previews on its own,
    # and the policy pack runs during the update as during a preview.
    _script(stack, "stack-up.sh", logs / "up.log", GPUCLUSTER_UP_SKIP_PREVIEW="1")
    yield stack
    if not reuse and os.environ.get("GPUCLUSTER_SIM_KEEP") != "1":
        _script(stack, "stack-down.sh", logs / "down.log")


def wait_for(what: str, check: Callable[[], Any], timeout: float = 90, interval: float = 1.0) -> Any:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def condition(obj: Mapping[str, Any], kind: str) -> str | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return str(c.get("status"))
    return None


def gpu_job(
    name: str,
    namespace: str,
    *,
    parallelism: int,
    gpus: int,
    queue: str = "training",
    workload_priority: str | None = "research-default",
    pod_priority: str | None = "gpucluster-training",
    run_for: str = "1h",
    tolerate_reservations: str | None = RESERVATION_KEY,
) -> dict[str, Any]:
    """A Kueue-managed batch Job: ``parallelism`` pods of ``gpus`` GPUs each, running ``run_for`` in kwok.

    Like the JobSets ``gpucluster submit`` makes for a flavor placed by topology, its pods tolerate any
    make-before-break reservation (``tolerate_reservations``, the taint key): Kueue's topology-aware scheduling
    counts a node's untolerated taints against the pod set, so without it a gang cannot be assigned the nodes
    reserved for the gang it preempts. It names the local stack's research priority every team may name
    (``workload_priority``): the API server refuses a team's job that names none."""
    labels = {"kueue.x-k8s.io/queue-name": queue}
    if workload_priority:
        labels["kueue.x-k8s.io/priority-class"] = workload_priority
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "train",
                "image": "registry.invalid/train:sim",
                "resources": {"requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}},
            }
        ],
    }
    if pod_priority:
        pod_spec["priorityClassName"] = pod_priority
    annotations = {"sim.gpucluster.io/run-for": run_for}
    if tolerate_reservations:
        pod_spec["tolerations"] = [reservation_toleration(tolerate_reservations)]
        # Placed by topology, said as the API server asks of a team's job that tolerates a reservation.
        annotations[PODSET_UNCONSTRAINED_TOPOLOGY] = "true"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "template": {"metadata": {"annotations": annotations}, "spec": pod_spec},
        },
    }


def delete(stack: LocalStack, kinds: Sequence[str], namespace: str, selector: str) -> None:
    stack.kubectl(
        "delete", ",".join(kinds), "-n", namespace, "-l", selector, "--ignore-not-found", "--wait=true", "--timeout=60s"
    )
