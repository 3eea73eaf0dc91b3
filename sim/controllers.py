"""A registered controller of the stack as scenarios handle it, wherever the stack runs it.

The local stack places a controller on the real node (its Deployment's pods, ``sim/deployed.py``) or leaves it to
``sim/processes.py`` (two local processes, ``<name>-a`` and ``<name>-b``); a benchmark stack may do either. Tests and
benchmarks stop, start and crash a controller, and ask which replica leads, through :func:`controller`, the same way
for both.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from sim import processes
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
