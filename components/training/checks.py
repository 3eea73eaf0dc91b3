"""Checks of a job spec against the stack it is submitted to: each a small function ``(spec, stack) ->
Iterable[ConfigIssue]``, registered once in :data:`CHECKS` (the way ``components/config/rules.py`` registers the
stack's rules). A spec that passes every one can be admitted by Kueue: its team has a namespace and a queue, its
priority is a class Kueue knows, and some flavor of its queue has nodes big enough and enough of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from components.config.stack import StackConfig
from components.issues import ConfigIssue, shown_names
from components.queues_settings import GpuFlavor, Team
from components.training.spec import SPEC_PATH, JobSpec, SpecError

Check = Callable[[JobSpec, StackConfig], Iterable[ConfigIssue]]


def team_of(spec: JobSpec, stack: StackConfig) -> Team | None:
    return next((t for t in stack.teams if t.name == spec.team), None)


def team_exists(spec: JobSpec, stack: StackConfig) -> Iterator[ConfigIssue]:
    if team_of(spec, stack) is None:
        names = [t.name for t in stack.teams]
        why = f"no team {spec.team!r} in the stack (teams: {shown_names(names)})"
        yield ConfigIssue(f"{SPEC_PATH}.team", spec.team, why)


def priority_exists(spec: JobSpec, stack: StackConfig) -> Iterator[ConfigIssue]:
    names = [p.name for p in stack.priorities.workload]
    if spec.priority not in names:
        yield ConfigIssue(
            f"{SPEC_PATH}.priority",
            spec.priority,
            f"no WorkloadPriorityClass {spec.priority!r} in the stack (priorities.workload: {shown_names(names)})",
        )


def team_queue_exists(spec: JobSpec, stack: StackConfig) -> Iterator[ConfigIssue]:
    """The team's ClusterQueue is declared (its LocalQueue points there)."""
    team = team_of(spec, stack)
    if team is not None and team.cluster_queue not in stack.queues:
        yield ConfigIssue(
            f"{SPEC_PATH}.team",
            spec.team,
            f"team {spec.team!r} points at ClusterQueue {team.cluster_queue!r}, which the stack does not declare",
        )


def queue_flavors(spec: JobSpec, stack: StackConfig) -> list[GpuFlavor]:
    """The flavors the team's ClusterQueue has a quota of (every flavor when the team or its queue is unknown)."""
    team = team_of(spec, stack)
    queue = stack.queues.get(team.cluster_queue) if team is not None else None
    if queue is None:
        return list(stack.flavors)
    return [f for f in stack.flavors if f.name in queue.quota]


def _misfit(spec: JobSpec, flavor: GpuFlavor) -> str | None:
    if spec.gpus_per_node > flavor.gpus_per_node:
        return f"{spec.gpus_per_node} GPUs per node, but a {flavor.name} node has {flavor.gpus_per_node}"
    if spec.nodes > flavor.node_count:
        return f"{spec.nodes} nodes, but the {flavor.name} flavor has {flavor.node_count}"
    return None


def flavor_fits(spec: JobSpec, stack: StackConfig) -> Iterator[ConfigIssue]:
    """The named flavor exists, is one of the team's queue and fits nodes x GPUs; without a name, one flavor of
    the queue fits (a gang no flavor can hold would wait in the queue forever)."""
    names = [f.name for f in stack.flavors]
    offered = queue_flavors(spec, stack)
    if spec.flavor is not None:
        path = f"{SPEC_PATH}.flavor"
        if spec.flavor not in names:
            why = f"no flavor {spec.flavor!r} in the stack (flavors: {shown_names(names)})"
            yield ConfigIssue(path, spec.flavor, why)
            return
        if spec.flavor not in [f.name for f in offered]:
            yield ConfigIssue(path, spec.flavor, f"the team's queue has no quota of flavor {spec.flavor!r}")
            return
        misfit = _misfit(spec, stack.flavor(spec.flavor))
        if misfit is not None:
            field = "gpusPerNode" if spec.gpus_per_node > stack.flavor(spec.flavor).gpus_per_node else "nodes"
            yield ConfigIssue(f"{SPEC_PATH}.{field}", None, f"does not fit: {misfit}")
        return
    misfits = [_misfit(spec, f) for f in offered]
    if offered and all(m is not None for m in misfits):
        field = "gpusPerNode" if all(spec.gpus_per_node > f.gpus_per_node for f in offered) else "nodes"
        why = f"fits no flavor of the team's queue: {'; '.join(map(str, misfits))}"
        yield ConfigIssue(f"{SPEC_PATH}.{field}", None, why)


CHECKS: list[Check] = [team_exists, team_queue_exists, priority_exists, flavor_fits]


def spec_issues(spec: JobSpec, stack: StackConfig, checks: Iterable[Check] = CHECKS) -> list[ConfigIssue]:
    """Every problem the checks find, in their order."""
    return [issue for check in checks for issue in check(spec, stack)]


def check_spec(spec: JobSpec, stack: StackConfig, source: str = "job spec") -> None:
    """Raise :class:`SpecError` with every problem of ``spec`` against ``stack``."""
    issues = spec_issues(spec, stack)
    if issues:
        raise SpecError(issues, source)
