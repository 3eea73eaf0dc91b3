"""Our daemons as scenarios handle them: the pods the stack deploys on the real node.

Every controller of ours runs as its Deployment's pods on the real node (``sim/deployed.py``; ``sim/placement.py``
refuses a stack that leaves one off it). Tests and benchmarks stop, start and crash a controller, and ask which
replica leads, through :func:`controller`. The virtual node's two parts, the node binary and the provider service
(two containers of its pod), are crashed and read through :func:`burst_part` and :func:`provider_metrics_url`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from sim import deployed, processes
from sim.deployed import controller as deployed_controller


class Controller(Protocol):
    def start(self) -> None: ...
    def stop(self) -> None: ...
    def running(self) -> bool: ...
    def leader(self, lease: str) -> str: ...
    def kill(self, identity: str | None = None) -> list[str]: ...
    def metrics_urls(self) -> list[str]: ...


def controller(spec_name: str, stack_file: Path | None = None) -> Controller:
    """The controller ``spec_name`` (contract/registry.py) of the stack ``make up`` deployed."""
    return deployed_controller(processes.stack_config(stack_file), spec_name)


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


def burst_part(name: Literal["virtual-node", "provider"], stack_file: Path | None = None) -> BurstPart:
    """The virtual node's binary or its provider service: a container of the virtual node's pod."""
    config: Any = processes.stack_config(stack_file)
    container = deployed.NODE_CONTAINER if name == "virtual-node" else deployed.PROVIDER_CONTAINER
    return PodContainer(deployed.virtual_node(config), container)


def provider_metrics_url(config: Any) -> str:
    """Where the provider service serves /metrics: its pod's address."""
    urls = deployed.virtual_node(config).metrics_urls()
    if not urls:
        raise processes.DaemonError("the virtual node's pod has no address yet")
    return urls[0]
