"""Settings of the quota controller: one pydantic model for the stack section ``gpucluster:quotaController`` and the
daemon's settings file.

The controller makes every ClusterQueue's ``nominalQuota`` (and ``borrowingLimit``) follow the GPUs that are really
there: per flavor, the GPUs of nodes that are Ready, schedulable, accepted and not quarantined, shared among the
queues in the proportions the stack declares (the stack's numbers are the shares at full capacity).

The stack check validates the operator-facing fields; the stack fills the rest (:data:`FILLED`: the flavors, the
queues and their quotas, the taints that take a node out), and the component renders the whole model as JSON into
the daemon's ConfigMap (:meth:`QuotaControllerSettings.to_json`), which the daemon reads with :func:`load_settings`.
Pure pydantic (no Pulumi): the daemon imports it.

Example (camelCase, as in the stack YAML)::

    enabled: true
    image: ghcr.io/example/gpucluster-daemons:0.1.0  # unset: from gpucluster:images
    interval: 1s          # list nodes and queues this often
    notReadyGrace: 4s     # a node NotReady for less than this still counts (a blink changes nothing)
    returnAfter: 60s      # a node back from NotReady counts again once Ready this long
    minShare: 0.5         # never below half of a queue's quota at full capacity (a false mass NotReady)
    maxShrinkShare: 0.25  # at most a quarter of it less per cycle
    replicas: 2

On by default: a stack whose queues follow capacity turns it off only on purpose, and the policy pack says so
(``quota-controller-where-queues-are``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Annotated, ClassVar

from pydantic import Field, field_validator

from contract.constants import (
    ACCEPTANCE_FAILED_TAINT_KEY,
    ACCEPTED_LABEL,
    ACCEPTED_VALUE,
    GPU_RESOURCE,
    QUARANTINE_TAINT_KEY,
)
from contract.images_settings import DEFAULT_DAEMONS_IMAGE
from contract.issues import SettingsError
from contract.model import (
    ConfigModel,
    ControllerReplicas,
    ControllerSettings,
    DnsLabel,
    DnsSubdomain,
    Image,
    LabelKey,
    PollInterval,
    PositiveDuration,
    Problem,
    QualifiedName,
    Seconds,
    TaintKey,
    check_labels,
    each_once,
    parse_duration,
    repeated,
)

#: The controller's Deployment, ServiceAccount and command.
#: Its section of the stack (``gpucluster:quotaController``), and its spec's ``stack_key``.
STACK_KEY = "quotaController"
APP = "gpucluster-quota-controller"
#: Field manager of the controller's server-side applies: it owns ``spec.resourceGroups`` of every ClusterQueue.
FIELD_MANAGER = "gpucluster-quota-controller"
DEFAULT_OUT_TAINT_KEYS = (QUARANTINE_TAINT_KEY, ACCEPTANCE_FAILED_TAINT_KEY)
#: Longest NotReady blink that changes nothing: beyond it a lost node would keep its quota for minutes.
MAX_NOT_READY_GRACE_SECONDS = 300.0

#: The fields the stack fills (camelCase key: where from); a stack section that sets one is refused.
FILLED = {
    "flavors": "gpucluster:flavors",
    "clusterQueues": "gpucluster:queues",
    "outTaintKeys": f"the quarantine and acceptance taints ({', '.join(DEFAULT_OUT_TAINT_KEYS)})",
    "acceptedLabel": f"the acceptance label ({ACCEPTED_LABEL})",
    "acceptedValue": f"the acceptance label's value ({ACCEPTED_VALUE})",
}


def resource_groups(
    flavors: Sequence[tuple[str, str]], quota: Mapping[str, int], borrowing_limit: Mapping[str, int]
) -> list[dict[str, object]]:
    """A ClusterQueue's ``spec.resourceGroups``: one group per GPU resource name, its flavors in ``flavors`` order
    (``(flavor, resource)`` pairs; those without a quota are left out).

    Shared by the Pulumi component (the numbers at full capacity) and the quota controller (the numbers that follow
    healthy capacity), so both write the same shape. Quotas are ``resource.Quantity`` values, which the API server
    returns as strings: they are sent as strings too, or every ``pulumi preview`` would see 32 => "32" as a change.
    """
    by_resource: dict[str, list[dict[str, object]]] = {}
    for name, resource in flavors:
        if name not in quota:
            continue
        entry: dict[str, object] = {"name": resource, "nominalQuota": str(quota[name])}
        if name in borrowing_limit:
            entry["borrowingLimit"] = str(borrowing_limit[name])
        by_resource.setdefault(resource, []).append({"name": name, "resources": [entry]})
    return [{"coveredResources": [resource], "flavors": entries} for resource, entries in by_resource.items()]


class QuotaFlavor(ConfigModel):
    """A GPU flavor as the controller counts it: which nodes, which resource, how many GPUs at full capacity."""

    name: DnsLabel
    node_labels: Annotated[dict[str, str], Field(min_length=1)]
    gpu_resource: QualifiedName = GPU_RESOURCE
    #: GPUs the stack declares (nodes x GPUs per node): the capacity the queues' shares are of.
    declared_gpus: Annotated[int, Field(ge=1, le=160_000)]
    #: Only nodes carrying the acceptance label count.
    require_acceptance: bool = True

    @field_validator("node_labels")
    @classmethod
    def _labels(cls, v: dict[str, str]) -> dict[str, str]:
        return check_labels(v)


class QuotaQueue(ConfigModel):
    """A ClusterQueue and its numbers at full capacity, per flavor."""

    name: DnsLabel
    quota: Annotated[dict[str, Annotated[int, Field(ge=0)]], Field(min_length=1)]
    borrowing_limit: dict[str, Annotated[int, Field(ge=0)]] = {}


class QuotaControllerSettings(ControllerSettings):
    """Everything the quota controller needs; see the module docstring."""

    enabled: bool = True
    #: Where the Deployment and its Lease live.
    namespace: DnsLabel = "gpucluster-capacity"
    #: Unset in a stack: filled from ``gpucluster:images`` (contract/images_settings.py).
    image: Image = DEFAULT_DAEMONS_IMAGE
    replicas: ControllerReplicas = 2
    #: How often the controller lists the nodes and queues (at least a second).
    interval: PollInterval = "1s"
    #: A node NotReady for less than this still counts: a blink changes nothing.
    not_ready_grace: PositiveDuration = "4s"
    #: A node that stopped counting because it was NotReady counts again once Ready this long (returns are slow,
    #: losses fast: a flapping node stays out). Cordons, quarantine and acceptance act at once both ways.
    return_after: PositiveDuration = "60s"
    #: The controller never shrinks a queue's quota of a flavor below this share of its number at full capacity:
    #: a false mass NotReady (a partitioned control plane, a kubelet fleet restarting) cannot empty the queues,
    #: and ``reclaimWithinCohort`` then cannot preempt running gangs for quota that only seems gone. 0: no floor.
    min_share: Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)] = 0.5
    #: The most one cycle shrinks a queue's quota of a flavor, as a share of its number at full capacity; a real
    #: loss gets there over a few cycles, each said in an Event. 1: at once.
    max_shrink_share: Annotated[float, Field(gt=0.0, le=1.0, allow_inf_nan=False)] = 0.25
    #: How long one API call may take.
    request_timeout: PositiveDuration = "5s"
    lease_name: DnsSubdomain = "gpucluster-quota-controller"
    lease_duration: PositiveDuration = "15s"
    renew_deadline: PositiveDuration = "10s"
    #: How often the leader renews and the others try to take the Lease (at least a second).
    retry_period: PollInterval = "2s"

    # Filled by the stack (FILLED); the daemon reads them from the file.
    flavors: list[QuotaFlavor] = Field(default_factory=list, max_length=256)
    cluster_queues: list[QuotaQueue] = Field(default_factory=list, max_length=1000)
    #: Taints that take a node out of capacity at once.
    out_taint_keys: Annotated[list[TaintKey], each_once("taint keys")] = Field(
        default_factory=lambda: list(DEFAULT_OUT_TAINT_KEYS), max_length=16
    )
    accepted_label: LabelKey = ACCEPTED_LABEL
    accepted_value: str = ACCEPTED_VALUE

    @field_validator("not_ready_grace")
    @classmethod
    def _grace_bounded(cls, v: str) -> str:
        if parse_duration(v) > MAX_NOT_READY_GRACE_SECONDS:
            raise ValueError(f"{v!r} is longer than 5m: a lost node would keep its quota that long")
        return v

    def rule_problems(self) -> Iterator[Problem]:
        names = [f.name for f in self.flavors]
        for name in repeated(names):
            yield Problem(("flavors",), f"flavor {name} is listed twice", name)
        queues = [q.name for q in self.cluster_queues]
        for name in repeated(queues):
            yield Problem(("clusterQueues",), f"ClusterQueue {name} is listed twice", name)
        known = set(names)
        for i, q in enumerate(self.cluster_queues):
            for field, values in (("quota", q.quota), ("borrowingLimit", q.borrowing_limit)):
                for flavor in sorted(set(values) - known):
                    yield Problem(
                        ("clusterQueues", i, field, flavor), f"unknown flavor (known: {sorted(known)})", flavor
                    )
        yield from super().rule_problems()

    # Seconds, for the daemon.
    not_ready_grace_seconds: ClassVar[Seconds] = Seconds("not_ready_grace")
    return_after_seconds: ClassVar[Seconds] = Seconds("return_after")
    request_timeout_seconds: ClassVar[Seconds] = Seconds("request_timeout")


#: Validate already-parsed settings, or read a settings file: SettingsError lists every problem with its key path.
parse_settings = QuotaControllerSettings.parse
load_settings = QuotaControllerSettings.load


__all__ = [
    "APP",
    "FIELD_MANAGER",
    "FILLED",
    "STACK_KEY",
    "QuotaControllerSettings",
    "QuotaFlavor",
    "QuotaQueue",
    "SettingsError",
    "load_settings",
    "parse_settings",
    "resource_groups",
]
