"""The queues' quotas of one flavor from its usable GPUs: the stack's numbers are the shares at full capacity.

Pure integer arithmetic. With ``declared`` GPUs declared and ``usable`` healthy, a queue of share ``q`` gets
``q * usable / declared``, rounded by the largest remainder: the floors first, then one GPU each to the queues with
the largest remainders (ties: the larger share, then the name) until the quotas add up to
``floor(sum(shares) * usable / declared)``. So the quotas never add up to more than the usable GPUs (the shares add
up to at most ``declared``, which the stack check and the policy pack hold), none goes negative, and at full
capacity every queue gets exactly its share. A borrowing limit scales the same way, rounded down.
"""

from __future__ import annotations

from collections.abc import Mapping


def apportion(shares: Mapping[str, int], declared: int, usable: int) -> dict[str, int]:
    """Queue -> quota of this flavor. ``declared`` > 0; ``usable`` is clamped to ``[0, declared]``."""
    if declared <= 0:
        raise ValueError(f"declared GPUs must be positive, got {declared}")
    if any(s < 0 for s in shares.values()):
        raise ValueError(f"shares must not be negative: {dict(shares)}")
    usable = max(0, min(usable, declared))
    floors = {q: s * usable // declared for q, s in shares.items()}
    remainders = {q: s * usable % declared for q, s in shares.items()}
    total = sum(shares.values()) * usable // declared
    extra = total - sum(floors.values())
    for q in sorted(shares, key=lambda q: (-remainders[q], -shares[q], q))[:extra]:
        floors[q] += 1
    return floors


def scaled_limit(limit: int, declared: int, usable: int) -> int:
    """A borrowing limit at ``usable`` of ``declared`` GPUs, rounded down."""
    if declared <= 0:
        raise ValueError(f"declared GPUs must be positive, got {declared}")
    return max(0, limit) * max(0, min(usable, declared)) // declared
