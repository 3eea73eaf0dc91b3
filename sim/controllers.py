"""Our daemons as scenarios handle them, wherever the stack runs them.

The local stack places a controller on the real node (its Deployment's pods, ``sim/deployed.py``) or leaves it to
``sim/processes.py`` (two local processes, ``<name>-a`` and ``<name>-b``); a benchmark stack may do either. Tests and
benchmarks stop, start and crash a controller, and ask which replica leads, through :func:`controller`, the same way
for both. The virtual node's two parts, the node binary and the provider service (two containers of its pod, or two
processes), are crashed and read through :func:`burst_part` and :func:`provider_metrics_url`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from sim import deployed, processes
from sim.deployed import controller as deployed_controller
from sim.deployed import lease_holder


class Controller(Protocol):
    def start(self) -> None: ...
    def stop(self) -> None: ...
    def running(self) -> bool: ...
    def leader(self, lease: str) -> str: ...
    def kill(self, identity: str | None = None) -> list[str]: ...
    def metrics_urls(self) -> list[str]: ...


@dataclass(frozen=True)
class Processes:
    """A controller's two local processes (sim/processes.py), each its own Lease identity."""

    namespace: str
    daemons: tuple[processes.Daemon, ...]
    #: Each process's metrics port on loopback, in the order of ``daemons``.
    ports: tuple[int, ...] = ()

    def start(self) -> None:
        for d in self.daemons:
            d.start()

    def stop(self) -> None:
        for d in self.daemons:
            d.stop()

    def running(self) -> bool:
        return any(d.running() for d in self.daemons)

    def leader(self, lease: str) -> str:
        return lease_holder(self.namespace, lease)

    def kill(self, identity: str | None = None) -> list[str]:
        """SIGKILL the process ``identity`` names (each when None); it stays down until :meth:`start`."""
        return [d.name for d in self.daemons if identity in (None, d.name) and d.kill()]

    def metrics_urls(self) -> list[str]:
        return [f"http://127.0.0.1:{port}/metrics" for port in self.ports]


def controller(spec_name: str, stack_file: Path | None = None) -> Controller:
    """The controller ``spec_name`` (daemons/registry.py) of the stack ``make up`` deployed."""
    config: Any = processes.stack_config(stack_file)
    pod = deployed_controller(config, spec_name)
    if not any(spec.name == spec_name for spec in processes.process_controllers(config)):
        return pod
    registry = processes.registry(stack_file)
    ports = processes.controller_ports(spec_name)
    return Processes(pod.namespace, tuple(registry[name] for name in ports), tuple(ports.values()))


class BurstPart(Protocol):
    """The virtual node or the provider service."""

    def kill(self) -> bool: ...
    def start(self) -> object: ...
    def running(self) -> bool: ...
    def log_tail(self, lines: int) -> str: ...


@dataclass(frozen=True)
class PodContainer:
    """One container of the virtual node's pod: a kill is SIGKILL through the node's containerd, after which the
    kubelet restarts it in place (with its restart back-off: 10 s, 20 s, 40 s... after repeated crashes, reset after
    10 minutes running); ``start`` waits until the pod is Ready again and scales nothing."""

    deployment: deployed.Deployed
    container: str

    def kill(self) -> bool:
        try:
            return bool(self.deployment.kill(container=self.container))
        except processes.DaemonError:  # no running container to kill
            return False

    def start(self) -> None:
        self.deployment.wait_ready()

    def running(self) -> bool:
        return self.deployment.running()

    def log_tail(self, lines: int) -> str:
        return self.deployment.logs(container=self.container, tail=lines)


@dataclass(frozen=True)
class Process:
    """A local process of sim/processes.py (a stack that leaves the virtual node off the real node)."""

    daemon: processes.Daemon

    def kill(self) -> bool:
        return self.daemon.kill()

    def start(self) -> object:
        return self.daemon.start()

    def running(self) -> bool:
        return self.daemon.running()

    def log_tail(self, lines: int) -> str:
        log = self.daemon.log_file
        if not log.exists():
            return f"({log}: none)"
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def burst_part(name: Literal["virtual-node", "provider"], stack_file: Path | None = None) -> BurstPart:
    """The virtual node's binary or its provider service, as the stack ``make up`` deployed runs it."""
    config: Any = processes.stack_config(stack_file)
    if processes.virtual_node_placed(config):
        container = deployed.NODE_CONTAINER if name == "virtual-node" else deployed.PROVIDER_CONTAINER
        return PodContainer(deployed.virtual_node(config), container)
    return Process(processes.registry(stack_file)[name])


def provider_metrics_url(config: Any) -> str:
    """Where the provider service serves /metrics: its pod's address, or loopback for a local process."""
    if not processes.virtual_node_placed(config):
        return f"http://127.0.0.1:{processes.provider_metrics_port()}/metrics"
    urls = deployed.virtual_node(config).metrics_urls()
    if not urls:
        raise processes.DaemonError("the virtual node's pod has no address yet")
    return urls[0]
