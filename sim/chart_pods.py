"""The upstream charts' controller pods on the simulated cluster: Kueue, JobSet and the descheduler.

Their charts create the Deployments as in production; on the simulated cluster those pods can run only on the
real node (``sim/node.py``): on a kwok node nothing runs, and kwok would report a Kueue that serves no webhook as
Ready. They run there from the images ``sim/upstream_images.py`` builds from the modules the tools pin, as nothing
is pulled. So before ``pulumi up`` a stack is checked to

- place Kueue's and JobSet's controllers on the real node (``podNodeSelector`` ``sim.gpucluster.io/real-node:
  "true"`` and a toleration of its taint), and
- name, for each chart pod placed there, the image built here (the release the tools pin).

The descheduler may stay off the real node: ``sim/processes.py`` then runs it as a local process.

``python sim/chart_pods.py check`` (the stack of ``GPUCLUSTER_SIM_STACK``, default the local stack): exit 0, or 2
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
class ChartPod:
    """One upstream chart's controller as a stack configures it."""

    section: str
    tool: str
    image: str
    node_selector: dict[str, str]
    tolerated: bool
    #: It can run nowhere else here (no local process stands in for it).
    node_only: bool

    @property
    def placed(self) -> bool:
        return self.node_selector.get(REAL_NODE_KEY) == "true"


def _tolerates(tolerations: Sequence[Any]) -> bool:
    return any(t.key == REAL_NODE_KEY and t.effect in (None, "NoSchedule") for t in tolerations)


def chart_pods(config: Any) -> list[ChartPod]:
    """The enabled charts whose controller pods the stack deploys."""
    out = [
        ChartPod(
            "kueue",
            "kueue",
            config.kueue.controller_image,
            dict(config.kueue.pod_node_selector),
            _tolerates(config.kueue.pod_tolerations),
            node_only=True,
        )
    ]
    if config.jobset.enabled:
        j = config.jobset
        out.append(
            ChartPod(
                "jobset", "jobset", j.controller_image, dict(j.pod_node_selector), _tolerates(j.pod_tolerations), True
            )
        )
    if config.descheduler.enabled:
        d = config.descheduler
        out.append(
            ChartPod(
                "descheduler", "descheduler", d.image, dict(d.pod_node_selector), _tolerates(d.pod_tolerations), False
            )
        )
    return out


def placed(config: Any, section: str) -> bool:
    """The stack places ``section``'s chart pod on the real node (False when the section is off)."""
    return any(p.section == section and p.placed for p in chart_pods(config))


def problems(config: Any) -> list[str]:
    """Why the stack's chart pods could not run on the simulated cluster: one line per problem, by stack key."""
    out: list[str] = []
    for pod in chart_pods(config):
        key = f"gpucluster:{pod.section}"
        if pod.node_only and not pod.placed:
            out.append(
                f'{key}.podNodeSelector does not select the real node ({REAL_NODE_KEY}: "true"): the controller '
                "would land on a kwok node, where nothing runs it and nothing serves its webhooks"
            )
        if pod.placed and not pod.tolerated:
            out.append(f"{key}.podTolerations does not tolerate the real node's taint {REAL_NODE_KEY} (NoSchedule)")
        if pod.placed:
            built = upstream_images.ALL[pod.tool].image_name()
            if pod.image != built:
                out.append(
                    f"{key}.image is {pod.image}, but the real node has {built} alone (built from the module "
                    f"tools/{pod.tool} pins; nothing is pulled): name that image"
                )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args != ["check"]:
        print("usage: sim/chart_pods.py check", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT))
    try:
        from components.config import StackConfigError, load_stack_file  # noqa: PLC0415 (needs ROOT on the path)
    except ImportError as e:
        print(f"sim/chart_pods.py: {sys.executable} cannot import {e.name}: run make venv", file=sys.stderr)
        return 2
    stack = Path(os.environ.get("GPUCLUSTER_SIM_STACK", ROOT / "stacks" / "Pulumi.local.yaml"))
    try:
        found = problems(load_stack_file(stack))
    except (StackConfigError, upstream_images.UpstreamImageError) as e:
        print(f"sim/chart_pods.py: {e}", file=sys.stderr)
        return 2
    for line in found:
        print(f"sim/chart_pods.py: {stack}: {line}", file=sys.stderr)
    return 2 if found else 0


if __name__ == "__main__":
    sys.exit(main())
