"""Checks of a job spec against the stack it is submitted to: each a small function ``(spec, stack) ->
Iterable[ConfigIssue]``, registered once in :data:`CHECKS` (the way ``components/config/rules.py`` registers the
stack's rules). A spec that passes every one can be admitted by Kueue: its team has a namespace and a queue, its
priority is a class Kueue knows, and some flavor of its queue has nodes big enough and enough of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

from components.config.stack import StackConfig
from components.training.spec import SPEC_PATH, JobSpec, SpecError
from contract.constants import HOSTNAME_LABEL
from contract.fabric_settings import fabric_turned_off
from contract.guardrails_settings import GPU_VISIBILITY_ENV, confinement_opt_out
from contract.issues import ConfigIssue, shown, shown_names
from contract.queues_settings import GpuFlavor, Team, Topology

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


def priority_allowed_for_team(spec: JobSpec, stack: StackConfig) -> Iterator[ConfigIssue]:
    """The team may name the priority (the API server refuses it too: ``research-priority-by-team``)."""
    known = next((p for p in stack.priorities.workload if p.name == spec.priority), None)
    if known is not None and team_of(spec, stack) is not None and not known.allows(spec.team):
        allowed = stack.priorities.allowed_for(spec.team)
        why = f"team {spec.team!r} may not name {spec.priority!r} (it may name: {shown_names(allowed)})"
        yield ConfigIssue(f"{SPEC_PATH}.priority", spec.priority, why)


def gpu_visibility_is_requested(spec: JobSpec, stack: StackConfig) -> Iterator[ConfigIssue]:
    """No env that widens the GPUs a container sees (the API server refuses it too)."""
    for name in spec.env:
        if name in GPU_VISIBILITY_ENV:
            why = "the NVIDIA runtime would show the pod GPUs it did not ask for; the job gets the GPUs of its nodes"
            yield ConfigIssue(f"{SPEC_PATH}.env.{name}", name, why)


def confinement_stays_on(spec: JobSpec, stack: StackConfig) -> Iterator[ConfigIssue]:
    """No pod annotation turns AppArmor or seccomp off (the API server refuses it too)."""
    key = confinement_opt_out(dict(spec.pod_annotations))
    if key is not None:
        yield ConfigIssue(f"{SPEC_PATH}.podAnnotations.{key}", spec.pod_annotations[key], "turns confinement off")


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


# --- the launcher -------------------------------------------------------------------------------------------------

#: torchrun's options the package sets through the environment (``manifest.launcher_env``): a value on the command
#: line would win over it and break the gang (both pods rank 0, or each its own rendezvous).
LAUNCHER_OWNED = frozenset(
    {
        "node-rank",
        "master-addr",
        "master-port",
        "rdzv-endpoint",
        "rdzv-backend",
        "rdzv-id",
        "max-restarts",
        "standalone",
    }
)
#: torchrun's options that must agree with the spec when given.
LAUNCHER_SIZED = {"nnodes": "nodes", "nproc-per-node": "gpusPerNode"}
#: torchrun's options that take no value.
_LAUNCHER_FLAGS = frozenset({"standalone", "module", "m", "no-python", "run-path", "virtual-local-rank"})


def launches_torchrun(spec: JobSpec) -> bool:
    """``torchrun ...`` or ``python -m torch.distributed.run ...``."""
    cmd = list(spec.command)
    if cmd[0].rsplit("/", 1)[-1] == "torchrun":
        return True
    return len(cmd) >= 3 and cmd[1] == "-m" and cmd[2] == "torch.distributed.run"


def launcher_options(spec: JobSpec) -> Iterator[tuple[int, str, str | None]]:
    """(index in ``args``, option name with '-', value) of the launcher's own options: those before the script."""
    args = list(spec.args) if spec.command[0].rsplit("/", 1)[-1] == "torchrun" else [*spec.command[3:], *spec.args]
    offset = 0 if spec.command[0].rsplit("/", 1)[-1] == "torchrun" else -len(spec.command[3:])
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("-") or arg == "--":
            return
        name, eq, value = arg.lstrip("-").partition("=")
        name = name.replace("_", "-")
        if not eq and name not in _LAUNCHER_FLAGS and i + 1 < len(args):
            yield i + offset, name, args[i + 1]
            i += 2
            continue
        yield i + offset, name, value if eq else None
        i += 1


def launcher_leaves_the_gang_to_the_package(spec: JobSpec, stack: StackConfig) -> Iterator[ConfigIssue]:
    """torchrun's rendezvous, node rank and restarts come from the package; its sizes, if given, match the spec."""
    if not launches_torchrun(spec):
        return
    sizes = {"nnodes": spec.nodes, "nproc-per-node": spec.gpus_per_node}
    for index, name, value in launcher_options(spec):
        where = f"{SPEC_PATH}.args[{index}]" if index >= 0 else f"{SPEC_PATH}.command"
        if name in LAUNCHER_OWNED:
            yield ConfigIssue(
                where,
                f"--{name}",
                f"--{name} is set by the package for every pod (PET_* environment: node rank from the "
                "completion index, rendezvous on the leader pod); remove it",
            )
        elif name in LAUNCHER_SIZED and value is not None:
            want = sizes[name]
            if value not in (str(want), f"{want}:{want}"):
                yield ConfigIssue(
                    where,
                    f"--{name}={value}",
                    f"--{name}={shown(value)} disagrees with spec.{LAUNCHER_SIZED[name]} ({want}); "
                    "drop it, the package sets it from the spec",
                )


# --- the fabric ---------------------------------------------------------------------------------------------------


def _landing_flavors(spec: JobSpec, stack: StackConfig) -> list[GpuFlavor]:
    return [f for f in queue_flavors(spec, stack) if spec.flavor in (None, f.name)]


def _name_one_flavor(
    flavors: Sequence[GpuFlavor],
    key: Callable[[GpuFlavor], str],
    describe: Callable[[GpuFlavor], str],
    differ: str,
) -> Iterator[ConfigIssue]:
    """One issue when the flavors a job may land on differ in ``key``: the job must name its flavor."""
    if len({key(f) for f in flavors}) > 1:
        which = ", ".join(f"{f.name} ({describe(f)})" for f in flavors)
        yield ConfigIssue(f"{SPEC_PATH}.flavor", None, f"the team's queue offers flavors {differ} ({which}); name one")


def fabric_is_known(spec: JobSpec, stack: StackConfig) -> Iterator[ConfigIssue]:
    """Every flavor the job may land on has the same fabric, so its pods can ask for the right devices."""
    flavors = _landing_flavors(spec, stack)
    yield from _name_one_flavor(
        flavors,
        lambda f: f.fabric.model_dump_json() if f.fabric else "none",
        lambda f: f.fabric.kind if f.fabric else "no fabric",
        "with different fabrics",
    )


def fabric_stays_on(spec: JobSpec, stack: StackConfig) -> Iterator[ConfigIssue]:
    """On an RDMA flavor, the job's env does not send NCCL over TCP sockets (a job that does holds its GPUs at a
    fraction of the fabric's bandwidth, and every other job of the cohort waits for it)."""
    rdma = [f.name for f in _landing_flavors(spec, stack) if f.fabric is not None and f.fabric.rdma]
    if not rdma:
        return
    for key, why in fabric_turned_off(dict(spec.env)):
        yield ConfigIssue(
            f"{SPEC_PATH}.env.{key}",
            spec.env[key],
            f"{why}, but flavor {rdma[0]} has an RDMA fabric: the gang would run NCCL over TCP; remove it",
        )


# --- the topology ------------------------------------------------------------------------------------------------


def landing_topology(spec: JobSpec, stack: StackConfig) -> Topology | None:
    """The topology Kueue places the job by: the one every flavor it may land on names (None: none names one, or
    they differ, which :func:`topology_is_known` refuses)."""
    names = {f.topology for f in _landing_flavors(spec, stack)}
    if len(names) != 1:
        return None
    name = names.pop()
    return next((t for t in stack.topologies if t.name == name), None)


def topology_is_known(spec: JobSpec, stack: StackConfig) -> Iterator[ConfigIssue]:
    """Every flavor the job may land on is placed by the same topology (or none is): the gang's pod-set
    annotation names one level, and Kueue skips a flavor whose topology lacks it."""
    yield from _name_one_flavor(
        _landing_flavors(spec, stack),
        lambda f: f.topology or "",
        lambda f: f.topology or "no topology",
        "placed by different topologies",
    )


def topology_level_exists(spec: JobSpec, stack: StackConfig) -> Iterator[ConfigIssue]:
    """The level the spec names is one of the flavor's topology (Kueue would keep the job pending forever), and
    a gang of several nodes is not required inside one host."""
    if spec.topology is None:
        return
    path = f"{SPEC_PATH}.topology.{spec.topology.key}"
    flavors = _landing_flavors(spec, stack)
    if len({f.topology for f in flavors}) > 1:
        return  # topology_is_known says so
    topology = landing_topology(spec, stack)
    if topology is None:
        names = ", ".join(f.name for f in flavors) or "none"
        yield ConfigIssue(
            path,
            spec.topology.level,
            f"the job's flavors ({names}) are placed by no topology; remove spec.topology",
        )
        return
    label = topology.label_of(spec.topology.level)
    if label is None:
        levels = ", ".join(lv.name for lv in topology.levels)
        yield ConfigIssue(
            path,
            spec.topology.level,
            f"no level {spec.topology.level!r} in topology {topology.name!r} (levels: {levels})",
        )
    elif spec.topology.strict and label == HOSTNAME_LABEL and spec.nodes > 1:
        yield ConfigIssue(
            path,
            spec.topology.level,
            f"{spec.nodes} nodes cannot sit inside one host; name a wider level or use preferred",
        )


CHECKS: list[Check] = [
    team_exists,
    team_queue_exists,
    priority_exists,
    priority_allowed_for_team,
    gpu_visibility_is_requested,
    confinement_stays_on,
    flavor_fits,
    launcher_leaves_the_gang_to_the_package,
    fabric_is_known,
    fabric_stays_on,
    topology_is_known,
    topology_level_exists,
]


def spec_issues(spec: JobSpec, stack: StackConfig, checks: Iterable[Check] = CHECKS) -> list[ConfigIssue]:
    """Every problem the checks find, in their order."""
    return [issue for check in checks for issue in check(spec, stack)]


def check_spec(spec: JobSpec, stack: StackConfig, source: str = "job spec") -> None:
    """Raise :class:`SpecError` with every problem of ``spec`` against ``stack``."""
    issues = spec_issues(spec, stack)
    if issues:
        raise SpecError(issues, source)
