"""What runs on the simulated cluster's real node: every pod of ours and of the upstream charts the stack deploys.

On a real cluster the stack's Deployments put our controllers, the metrics adapter, the virtual node (the node and
its provider service) and the charts' controllers (Kueue, JobSet, the descheduler) on the nodes its selectors name.
On the simulated cluster the only node that runs anything is the real node (``sim/node.py``): on a kwok node a pod
runs nothing, yet kwok reports it Ready, so a controller the stack left there would look healthy and do nothing,
and a Kueue left there would serve no webhook. Nothing here stands in for them as a local process either: what the
stack deploys is what runs. So before ``pulumi up`` a stack is checked to

- place each of those pods on the real node (its section's ``nodeSelector``, or ``podNodeSelector`` for a chart,
  ``sim.gpucluster.io/real-node: "true"``) and tolerate the node's taint, and
- name, for each chart's pod, the image built here (the release the tools pin, ``sim/upstream_images.py``); ours
  are the images ``make images`` builds.

A metrics adapter with ``externalAddress`` is not deployed in the cluster at all (the stack makes an ExternalName
Service for it); ``sim/processes.py`` runs that one, as what stands outside.

``python sim/placement.py check`` (the stack of ``GPUCLUSTER_SIM_STACK``, default the local stack): exit 0, or 2
with every problem named by its stack key.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sim import upstream_images
from sim.node import REAL_NODE_KEY

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Pod:
    """One Deployment's pods as a stack places them: ours, or an upstream chart's controller."""

    #: What the sim and its scenarios call it: a controller's spec name, ``metrics-adapter``, ``virtual-node``, or
    #: the chart's section (``kueue``, ``jobset``, ``descheduler``).
    name: str
    #: The stack key of its selector and tolerations, e.g. ``gpucluster:makeBeforeBreak.nodeSelector``.
    selector_key: str
    tolerations_key: str
    node_selector: dict[str, str]
    tolerated: bool
    #: A chart's: the image the stack names and the tool of sim/upstream_images.py that builds it. None: ours.
    image: str | None = None
    tool: str | None = None

    @property
    def placed(self) -> bool:
        return self.node_selector.get(REAL_NODE_KEY) == "true"


def _tolerates(tolerations: Sequence[Any]) -> bool:
    return any(t.key == REAL_NODE_KEY and t.effect in (None, "NoSchedule") for t in tolerations)


def _ours(name: str, key: str, settings: Any) -> Pod:
    return Pod(
        name,
        f"gpucluster:{key}.nodeSelector",
        f"gpucluster:{key}.tolerations",
        dict(settings.node_selector),
        _tolerates(settings.tolerations),
    )


def _chart(section: str, tool: str, image: str, settings: Any) -> Pod:
    return Pod(
        section,
        f"gpucluster:{section}.podNodeSelector",
        f"gpucluster:{section}.podTolerations",
        dict(settings.pod_node_selector),
        _tolerates(settings.pod_tolerations),
        image=image,
        tool=tool,
    )


def pods(config: Any) -> list[Pod]:
    """Every Deployment the stack puts in the cluster that must run: the registered controllers it turns on (in the
    registry's order), the metrics adapter unless it runs outside, the virtual node, and the charts' controllers."""
    from contract.registry import CONTROLLERS  # noqa: PLC0415 (needs the venv: without one this module still answers)

    out = []
    for spec in CONTROLLERS:
        settings = config.running(spec)
        if settings is not None:
            out.append(_ours(spec.name, spec.stack_key, settings))
    adapter = config.metrics_adapter
    if adapter.enabled and adapter.external_address is None:
        out.append(_ours("metrics-adapter", "metricsAdapter", adapter))
    if config.burst_enabled:
        out.append(_ours("virtual-node", "burst.virtualNode", config.burst.settings.virtual_node))
    out.append(_chart("kueue", "kueue", config.kueue.controller_image, config.kueue))
    if config.jobset.enabled:
        out.append(_chart("jobset", "jobset", config.jobset.controller_image, config.jobset))
    if config.descheduler.enabled:
        out.append(_chart("descheduler", "descheduler", config.descheduler.image, config.descheduler))
    return out


def problems(config: Any) -> list[str]:
    """Why the stack's pods could not run on the simulated cluster: one line per problem, by stack key."""
    out: list[str] = []
    for pod in pods(config):
        if not pod.placed:
            out.append(
                f'{pod.selector_key} does not select the real node ({REAL_NODE_KEY}: "true"): {pod.name} would land '
                "on a kwok node, where nothing runs it though kwok reports it Ready"
            )
            continue
        if not pod.tolerated:
            out.append(f"{pod.tolerations_key} does not tolerate the real node's taint {REAL_NODE_KEY} (NoSchedule)")
        if pod.tool is not None:
            built = upstream_images.ALL[pod.tool].image_name()
            if pod.image != built:
                section = pod.selector_key.rpartition(".")[0]
                out.append(
                    f"{section}.image is {pod.image}, but the real node has {built} alone (built from the module "
                    f"tools/{pod.tool} pins; nothing is pulled): name that image"
                )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args != ["check"]:
        print("usage: sim/placement.py check", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT))
    try:
        from components.config import StackConfigError, load_stack_file  # noqa: PLC0415 (needs ROOT on the path)
    except ImportError as e:
        print(f"sim/placement.py: {sys.executable} cannot import {e.name}: run make venv", file=sys.stderr)
        return 2
    stack = Path(os.environ.get("GPUCLUSTER_SIM_STACK", ROOT / "stacks" / "Pulumi.local.yaml"))
    try:
        found = problems(load_stack_file(stack))
    except (StackConfigError, upstream_images.UpstreamImageError) as e:
        print(f"sim/placement.py: {e}", file=sys.stderr)
        return 2
    for line in found:
        print(f"sim/placement.py: {stack}: {line}", file=sys.stderr)
    return 2 if found else 0


if __name__ == "__main__":
    sys.exit(main())
