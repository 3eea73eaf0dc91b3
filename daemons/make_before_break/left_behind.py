"""What of make-before-break is on the cluster: reserved nodes, Deployments it moved, pods it marked.

Pure. While it runs, these are its working state; while it drains (``draining: true``), they are what it still has
to undo, and all three at zero say that ``enabled: false`` leaves nothing behind.
"""

from __future__ import annotations

from dataclasses import dataclass

from daemons.make_before_break.model import Observation


@dataclass(frozen=True)
class LeftBehind:
    #: Nodes carrying the reservation label or taint.
    nodes: int
    #: Deployments with a flips, epoch or phase annotation of ours (moved, waiting to come home, coming home).
    deployments: int
    #: Pods carrying our deletion cost.
    pods: int

    @property
    def nothing(self) -> bool:
        return self.nodes == self.deployments == self.pods == 0

    def as_dict(self) -> dict[str, int]:
        return {"nodes": self.nodes, "deployments": self.deployments, "pods": self.pods}


def left_behind(o: Observation, deletion_cost: int) -> LeftBehind | None:
    """What is left; None when a list is unknown (then nothing can be said to be gone)."""
    if o.nodes is None or o.pods is None or o.deployments is None:
        return None
    return LeftBehind(
        nodes=sum(1 for n in o.nodes if n.reserved_for is not None),
        deployments=sum(1 for d in o.deployments if d.flips or d.epoch is not None or d.phase is not None),
        pods=sum(1 for p in o.pods if p.deletion_cost == deletion_cost and not p.terminating),
    )
