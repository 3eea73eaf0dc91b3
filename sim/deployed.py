"""Our daemons that run as the stack's own pods on the real node (``sim/node.py``), as tests and benchmarks handle them.

A daemon the stack places on the real node is no local process (``sim/processes.py`` leaves it out): its
Deployment's pods run there, from our images. What a scenario does to a daemon is done the way an operator would:

- ``stop`` scales the Deployment to zero and waits for its pods to be gone; ``start`` scales it back to the
  replicas the stack asks for and waits for the rollout (a later ``pulumi up`` would set them again anyway);
- ``kill`` is a crash: SIGKILL to the container's process from the machine, through containerd (nothing is
  flushed, no Lease is released), after which the kubelet restarts it in place, as it would a crashed daemon;
- ``leader`` reads the Lease's holder identity (``<pod>_<n>``), which ``kill`` takes; ``logs`` is ``kubectl logs``.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sim.daemon_runtime import DaemonError, kubectl
from sim.node import CONTAINERD_NAMESPACE, Paths


def _items(*args: str) -> list[dict[str, Any]]:
    out = kubectl("get", *args, "-o", "json")
    try:
        items: list[dict[str, Any]] = json.loads(out).get("items", [])
    except ValueError as exc:
        raise DaemonError(f"kubectl get {' '.join(args)}: not JSON ({exc})") from None
    return items


def _ready(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def lease_holder(namespace: str, lease: str) -> str:
    """The holder identity of the Lease ``namespace/lease``; DaemonError when none holds it."""
    out = kubectl("get", "lease", "-n", namespace, lease, "-o", "jsonpath={.spec.holderIdentity}", check=False)
    if not out.strip():
        raise DaemonError(f"lease {namespace}/{lease} has no holder")
    return out.strip()


@dataclass(frozen=True)
class Deployed:
    """One Deployment of ours and the replicas the stack gives it."""

    namespace: str
    name: str
    replicas: int
    #: The node's containerd (the real node's, unless a test says otherwise).
    node: Paths = field(default_factory=Paths)

    def __str__(self) -> str:
        return f"deployment {self.namespace}/{self.name}"

    @property
    def selector(self) -> str:
        return f"app.kubernetes.io/name={self.name}"

    def pods(self) -> list[dict[str, Any]]:
        """Its pods that are not being deleted, oldest first."""
        pods = [
            p
            for p in _items("pods", "-n", self.namespace, "-l", self.selector)
            if "deletionTimestamp" not in p["metadata"]
        ]
        return sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp", ""))

    def running(self) -> bool:
        """At least one pod is Ready."""
        return any(_ready(p) for p in self.pods())

    def _wait(self, what: str, check: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise DaemonError(
                    f"deployment {self.namespace}/{self.name}: timed out after {timeout:.0f}s waiting for {what}"
                )
            time.sleep(0.5)

    def start(self, timeout: float = 120) -> None:
        """Scale back to the stack's replicas and wait until every one is Ready."""
        kubectl("scale", "deployment", "-n", self.namespace, self.name, f"--replicas={self.replicas}")
        self._wait(
            f"{self.replicas} Ready pod(s)",
            lambda: sum(_ready(p) for p in self.pods()) >= self.replicas,
            timeout,
        )

    def stop(self, timeout: float = 60) -> None:
        """Scale to zero and wait until no pod of it is left."""
        kubectl("scale", "deployment", "-n", self.namespace, self.name, "--replicas=0")
        self._wait(
            "its pods to be gone",
            lambda: not _items("pods", "-n", self.namespace, "-l", self.selector),
            timeout,
        )

    def leader(self, lease: str) -> str:
        """The holder identity of ``lease`` (``<pod>_<n>``); DaemonError when none holds it."""
        return lease_holder(self.namespace, lease)

    def kill(self, identity: str | None = None) -> list[str]:
        """SIGKILL the daemon's process in the pod a Lease holder ``identity`` (``<pod>_<n>``) or pod name names, each
        pod's when None, through the node's containerd: a crash, which the kubelet answers by restarting the container
        in place. The containers killed."""
        names = {p["metadata"]["name"] for p in self.pods()}
        pod = identity if identity is None or identity in names else identity.rsplit("_", 1)[0]
        killed = []
        for p in self.pods():
            if pod is not None and p["metadata"]["name"] != pod:
                continue
            for status in (p.get("status") or {}).get("containerStatuses") or []:
                container = str(status.get("containerID", "")).removeprefix("containerd://")
                if not container:
                    continue
                argv = ["ctr", "--address", str(self.node.socket), "-n", CONTAINERD_NAMESPACE, "tasks", "kill"]
                done = subprocess.run(
                    [*argv, "-s", "SIGKILL", container], capture_output=True, text=True, timeout=30, check=False
                )
                if done.returncode != 0:
                    raise DaemonError(f"SIGKILL to {p['metadata']['name']}: {done.stderr.strip()[:300]}")
                killed.append(f"{p['metadata']['name']}/{status.get('name')}")
        if pod is not None and not killed:
            raise DaemonError(f"deployment {self.namespace}/{self.name} has no running pod {pod}")
        return killed

    def restarts(self) -> int:
        """Container restarts over its pods (a kill shows here once the kubelet has restarted it)."""
        return sum(
            int(s.get("restartCount", 0))
            for p in self.pods()
            for s in (p.get("status") or {}).get("containerStatuses") or []
        )

    def logs(self, pod: str | None = None) -> str:
        """``kubectl logs`` of ``pod`` (the oldest when None)."""
        pods = [p["metadata"]["name"] for p in self.pods()]
        target = pod or (pods[0] if pods else None)
        if target is None:
            raise DaemonError(f"deployment {self.namespace}/{self.name} has no pod")
        return kubectl("logs", "-n", self.namespace, target)


def controller(config: Any, spec_name: str) -> Deployed:
    """The registered controller ``spec_name`` as the stack deploys it (its namespace, app and replicas)."""
    from daemons.registry import by_name  # noqa: PLC0415 (needs the venv: without one this module still answers)

    spec = by_name(spec_name)
    settings = config.controller_settings(spec.stack_key)
    if settings is None or not settings.enabled:
        raise DaemonError(f"the stack does not run {spec_name}")
    return Deployed(settings.namespace, spec.app, settings.replicas)
