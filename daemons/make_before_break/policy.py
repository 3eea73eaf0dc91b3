"""The decision rules' knobs (:class:`Policy`), in seconds, and how the controller's settings give them.

Apart from ``decide`` so that the phases ``decide`` calls (``cycle``, ``flip_out``, ...) can name it without a loop.
"""

from __future__ import annotations

from dataclasses import dataclass

from contract.constants import RESERVATION_KEY
from contract.make_before_break_settings import MakeBeforeBreakSettings


@dataclass(frozen=True)
class Policy:
    #: How long a workload may be held; measured from QuotaReserved.
    max_hold_s: float = 600.0
    #: How long a reserved node that is not Ready keeps counting.
    node_grace_s: float = 60.0
    #: Deployments coming home at the same time.
    max_returning: int = 2
    #: The pod-deletion-cost that marks a replica to go first.
    deletion_cost: int = -1000
    reservation_key: str = RESERVATION_KEY
    #: On its way off: no new room is made (a pending check goes Ready at once); reservations are released and
    #: moved Deployments come home as usual.
    draining: bool = False

    def __post_init__(self) -> None:
        if not self.max_hold_s > 0:
            raise ValueError(f"max_hold_s must be above 0 (got {self.max_hold_s})")
        if not 0 <= self.node_grace_s < self.max_hold_s:
            raise ValueError(f"node_grace_s ({self.node_grace_s}) must be >= 0 and below max_hold_s")
        if self.max_returning < 1:
            raise ValueError(f"max_returning must be at least 1 (got {self.max_returning})")
        if not self.reservation_key:
            raise ValueError("reservation_key must not be empty")


def policy_of(settings: MakeBeforeBreakSettings) -> Policy:
    """The decision rules' knobs from the controller's settings."""
    return Policy(
        max_hold_s=settings.max_hold_seconds,
        node_grace_s=settings.node_grace_seconds,
        max_returning=settings.return_batch,
        deletion_cost=settings.deletion_cost,
        reservation_key=settings.reservation_key,
        draining=settings.draining,
    )
