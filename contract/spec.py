"""A controller of ours, declared once: what the deploying component and the runner both read.

A :class:`ControllerSpec` names the controller, its metrics port, its settings model and how to load it, the stack
key its settings live under, the RBAC it needs (as :class:`~contract.rbac.Grant` s computed from its
settings) and the text of its command line. ``components.controller`` deploys any spec (ServiceAccount, one grant
per scope, settings ConfigMap, Deployment); ``daemons.toolkit.runner`` runs any spec (flags, settings, Lease,
``/metrics``, ``--once``). ``contract.registry`` lists them all.

Standard library and the toolkit only: a spec module imports its settings model and its rules, nothing of Pulumi
and nothing of its controller's runtime, so the deploying side can read it cheaply.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from contract.bounds import Bound
from contract.issues import SettingsError
from contract.rbac import Grant
from contract.stack_facts import StackFacts

#: Every controller's Deployment, ServiceAccount and command are this prefix and the spec's name.
APP_PREFIX = "gpucluster-"
#: Where a controller's settings ConfigMap is mounted: this, then the spec's name.
SETTINGS_ROOT = "/etc/gpucluster"
#: The settings file's name in that ConfigMap.
SETTINGS_FILE = "settings.json"

#: What a controller may need the stack to have deployed first (``ControllerSpec.after``): the ClusterQueues (it
#: takes a field of theirs), Kueue's CRDs, JobSet's CRDs (it reads or writes their objects).
AFTER_CLUSTER_QUEUES = "cluster-queues"
AFTER_KUEUE = "kueue-crds"
AFTER_JOBSET = "jobset-crds"
AFTER = (AFTER_CLUSTER_QUEUES, AFTER_KUEUE, AFTER_JOBSET)
#: What the stack adds to every spec's grants and checks (``context``): the team namespaces training runs in.
WORKLOAD_NAMESPACES = "workload_namespaces"
#: The interpreter on the daemons' image's PATH: a controller's command is ``python3 -m <its package>``.
PYTHON = "python3"


def check_team_namespaces(where: str, key: str, namespaces: list[str], context: Mapping[str, Any]) -> None:
    """A controller that watches the team namespaces (the stack fills them): ValueError at ``<where>.settings.<key>``
    when none is listed, or they are not the stack's (``context[WORKLOAD_NAMESPACES]``)."""
    if not namespaces:
        raise ValueError(f"{where}.settings.{key}: no team namespace to watch (the stack fills it)")
    teams = set(context.get(WORKLOAD_NAMESPACES, namespaces))
    if set(namespaces) != teams:
        raise ValueError(
            f"{where}.settings.{key}: {sorted(namespaces)} are not the stack's team namespaces {sorted(teams)}"
        )


#: The ``gpucluster.io/workload`` role of a controller's namespace, by precedence when two share one.
NAMESPACE_ROLES = ("burst", "capacity", "accounting")


class LeaseSettings(Protocol):
    """What a controller's settings say about its Lease (``contract.model.LeaseTimings`` and a namespace): what
    leader election (``lease.elector_for``) reads."""

    @property
    def namespace(self) -> str: ...
    @property
    def lease_name(self) -> str: ...
    @property
    def lease_duration_seconds(self) -> float: ...
    @property
    def renew_deadline_seconds(self) -> float: ...


class ControllerSettingsLike(LeaseSettings, Protocol):
    """What the kit reads of every controller's settings (``contract.model.ControllerSettings``)."""

    @property
    def enabled(self) -> bool: ...
    @property
    def image(self) -> str: ...
    @property
    def replicas(self) -> int: ...
    @property
    def retry_period_seconds(self) -> float: ...

    def to_json(self) -> str: ...

    @classmethod
    def load(cls, path: str) -> Any: ...


S = TypeVar("S", bound=ControllerSettingsLike)


@dataclass(frozen=True)
class ControllerSpec(Generic[S]):
    #: ``quota-controller``: the command and Deployment are ``gpucluster-<name>``.
    name: str
    #: The Pulumi type of its component (``gpucluster:capacity:QuotaController``); kept stable, it is in every URN.
    component_type: str
    #: ``app.kubernetes.io/component`` of everything it deploys (``capacity``, ``training``, ``burst``).
    part_of: str
    #: The role its namespace is labelled with (one of NAMESPACE_ROLES).
    namespace_role: str
    #: ``/metrics`` and ``/healthz``: the container port, the scrape annotation and the command's default.
    metrics_port: int
    #: What every series it exports begins with (``gpucluster_quota_controller``); its metrics module names them
    #: with it, and the alerts, dashboards and reachability checks read it here.
    metrics_prefix: str
    #: The stack key its settings live under (``gpucluster:<stack_key>``).
    stack_key: str
    #: Its ``load`` reads a settings file and raises ``settings_error`` naming every problem.
    settings_model: type[S]
    #: The Roles and ClusterRoles it needs, from its settings and what the stack adds (``context``).
    grants: Callable[[S, Mapping[str, Any]], tuple[Grant, ...]]
    #: What its component exports beyond the Deployment, namespace and replicas.
    outputs: Callable[[S], dict[str, object]]
    #: The command line's description, and what ``--once`` and ``--dry-run`` do for it.
    description: str
    once_help: str
    dry_run_help: str
    #: Raise ValueError naming the field when settings, though valid alone, cannot be deployed (unfilled by the
    #: stack, or at odds with what the stack adds in ``context``).
    check: Callable[[S, Mapping[str, Any]], None] = field(default=lambda _s, _context: None)
    #: What its ``load`` raises: every settings model of ours (``contract.model.ControllerSettings``) raises this.
    settings_error: type[Exception] = SettingsError
    settings_help: str | None = None
    #: What the stack must have deployed before it (AFTER); its namespaces it always waits for.
    after: tuple[str, ...] = ()
    #: The fields of its settings the stack fills (camelCase key: where the value comes from); a stack section that
    #: sets one is refused with that origin.
    filled_by_stack: Mapping[str, str] = field(default_factory=dict)
    #: Its settings as the stack completes them from the stack's other sections (``contract.stack_facts``); the
    #: default fills nothing.
    fill: Callable[[S, StackFacts], S] = field(default=lambda s, _facts: s)
    #: The fields of the objects it writes that it may change (``contract.bounds``), each held by an admission
    #: policy matched to its ServiceAccount.
    bounds: tuple[Bound, ...] = ()
    #: Its series carry their own ``namespace`` and ``job`` labels (a training job's), which must win over the
    #: scrape's: its pods are scraped with ``honor_labels`` (``components.scraping``).
    honor_labels: bool = False

    def __post_init__(self) -> None:
        if not self.name or self.name != self.name.lower() or " " in self.name:
            raise ValueError(f"ControllerSpec.name: {self.name!r} must be a lower-case DNS label")
        if not self.metrics_prefix.startswith("gpucluster_"):
            raise ValueError(
                f"ControllerSpec {self.name}: metrics_prefix {self.metrics_prefix!r} does not begin gpucluster_"
            )
        if not 1024 <= self.metrics_port <= 65535:
            raise ValueError(f"ControllerSpec {self.name}: metrics_port {self.metrics_port} is not in 1024-65535")
        if self.namespace_role not in NAMESPACE_ROLES:
            raise ValueError(
                f"ControllerSpec {self.name}: namespace_role {self.namespace_role!r} not in {NAMESPACE_ROLES}"
            )
        unknown = sorted(set(self.after) - set(AFTER))
        if unknown:
            raise ValueError(f"ControllerSpec {self.name}: after names {unknown}; known: {', '.join(AFTER)}")

    @property
    def app(self) -> str:
        """The Deployment, ServiceAccount, command and ``app.kubernetes.io/name``."""
        return f"{APP_PREFIX}{self.name}"

    @property
    def settings_dir(self) -> str:
        return f"{SETTINGS_ROOT}/{self.name}"

    @property
    def module(self) -> str:
        """The package of its runtime (``daemons.quota_controller``); its ``__main__`` is the command."""
        return f"daemons.{self.name.replace('-', '_')}"

    @property
    def command(self) -> tuple[str, ...]:
        """The container's command: its package run by the image's interpreter (no console script to declare)."""
        return (PYTHON, "-m", self.module)

    @property
    def nested(self) -> bool:
        """Its settings are part of another section (``burst.taintController``), not a ``gpucluster:`` key of their
        own: that section's parser reads and fills them."""
        return "." in self.stack_key
