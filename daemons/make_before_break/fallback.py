"""Ready before the room was made (maxHold passed, or no capacity to move to), and holding an admitted workload.

Training always wins: the check goes Ready anyway. Deployments whose replicas are still on the reserved nodes go
back to their previous placement (nothing is left half-moved); the reservation is kept, and passed on in
podSetUpdates, only if its healthy nodes can hold the gang once the scheduler has preempted what is left on them;
otherwise it is released and the gang is admitted without one. An admitted workload keeps its room while it holds
quota, and the same revert runs for it, so a crash between Ready and the revert is caught.
"""

from __future__ import annotations

from collections import Counter

from daemons.make_before_break.actions import Fallback, WorkloadReport
from daemons.make_before_break.cycle import Cycle, gpu_pod_sets
from daemons.make_before_break.model import Workload
from daemons.make_before_break.plan import CannotFit, Plan, choose_room
from daemons.make_before_break.replace import replace_bad_nodes


def fall_back(c: Cycle, w: Workload, kind: Fallback, why: str) -> None:
    mine = c.mine[w.uid]
    reverted = revert_stuck(c, w)
    healthy = tuple(c.nodes[name] for name in sorted(mine) if c.nodes[name].healthy)
    fit: Plan | CannotFit = CannotFit("no node is reserved for it", 0, 0)
    if healthy:
        fit = choose_room(gpu_pod_sets(w), healthy, c.pods, reserved_for=w.uid, leaving=c.leaving())
    if isinstance(fit, Plan):
        c.taken.update(mine)
        left = len(fit.moves)
        message = (
            f"{why}: admitted on the {len(mine)} reserved nodes; the scheduler preempts the {left} inference "
            f"replicas still in the way"
        )
        updates = c.updates(w)
    else:
        for name in sorted(mine):
            c.release(name, w.uid, f"{w.ref} was admitted without a reservation")
        message = f"{why}: admitted without a reservation ({fit.reason})"
        updates = ()
    if reverted:
        message += f"; {reverted} Deployments left where they were"
    c.ready(w, updates, kind, message, "fallback")


def revert_stuck(c: Cycle, w: Workload) -> int:
    """Deployments moved for ``w`` whose replicas still stand on its nodes go back to their previous template."""
    mine = c.mine[w.uid]
    count = 0
    for key in sorted(c.flips):
        if w.uid not in c.flips[key]:
            continue
        stuck = [p for p in c.pods_of[key] if p.node in mine and not p.terminating and p.epoch != c.epoch[key]]
        if not stuck:
            continue
        epochs = Counter(p.epoch for p in stuck)
        previous = min(epochs, key=lambda e: (-epochs[e], e or ""))
        c.flips[key].discard(w.uid)
        c.epoch[key] = previous
        c.why[key].append(f"{len(stuck)} of its replicas could not leave the GPUs of {w.ref} in time")
        count += 1
    return count


def hold(c: Cycle, w: Workload) -> None:
    """Admitted (or the check is not ours to drive): keep the room until the workload is done, a bad node replaced."""
    c.taken.update(c.mine[w.uid])
    replace_bad_nodes(c, w)
    revert_stuck(c, w)
    c.reports.append(
        WorkloadReport(
            w.uid,
            w.ref,
            "admitted",
            c.held(w),
            len(c.mine[w.uid]),
            f"check {w.check.value if w.check else 'not listed'}; the reservation stays while it holds quota",
        )
    )
