"""Queues and priorities: Kueue, its ResourceFlavors, ClusterQueues, LocalQueues and both priority tiers.

Researchers only submit. Kueue admits a training gang all-or-nothing (``waitForPodsReady``), orders research work
by WorkloadPriorityClass inside a ClusterQueue and reclaims lent quota across the cohort; the Kubernetes
PriorityClasses then let the scheduler evict inference pods when admitted training pods need their GPUs.

Kueue queues GPUs only: CPU, memory and storage requests are left to the scheduler
(``resources.excludeResourcePrefixes``), so a ClusterQueue's quota is exactly the GPUs it may hold. Work that asks for
no GPU (checkpoint checks, restore drills) queues apart, in the queue of CPU-only work (``kueue.cpuQueue``), whose
quota is a count of pods.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from components.charts import helm_chart, resolve_chart
from contract.constants import (
    DECLARED_GPUS_ANNOTATION,
    FABRIC_KIND_ANNOTATION,
    KUEUE_API,
    NAMESPACE_NAME_LABEL,
    RDMA_RESOURCE_ANNOTATION,
    TIER_LABEL,
    WORKLOAD_LABEL,
)
from contract.queues_settings import (
    DISABLE_WAIT_FOR_PODS_READY_GATE,
    POD_COUNT_RESOURCE,
    ClusterQueueSpec,
    CpuQueue,
    GpuFlavor,
    KueueSettings,
    Priorities,
    Team,
    Topology,
)
from contract.quota_controller_settings import resource_groups

_K8S_PROVIDER_VERSION = importlib.metadata.version("pulumi_kubernetes")
#: Resources Kueue does not account for: the scheduler handles them; quotas are about GPUs.
NON_GPU_RESOURCE_PREFIXES = ("cpu", "memory", "ephemeral-storage", "hugepages-", "pods")
#: The ClusterQueue field the quota controller owns. An atomic list in Kueue's API (``+listType=atomic``): one
#: field manager owns all of it, so the controller's server-side apply takes it whole, and the Kubernetes provider
#: drops an ignored field another manager owns from its own applies.
QUOTA_FIELD = "spec.resourceGroups"


def flavor_annotations(flavor: GpuFlavor) -> dict[str, str]:
    """The ResourceFlavor's annotations: its declared GPUs (the quota policy) and its fabric (the fabric policy)."""
    out = {DECLARED_GPUS_ANNOTATION: str(flavor.capacity)}
    if flavor.fabric is not None:
        out[FABRIC_KIND_ANNOTATION] = flavor.fabric.kind
        if flavor.fabric.rdma_resource:
            out[RDMA_RESOURCE_ANNOTATION] = flavor.fabric.rdma_resource
    return out


@dataclass(frozen=True)
class QueuesArgs:
    kueue: KueueSettings
    cohort: str
    flavors: Sequence[GpuFlavor]
    queues: Mapping[str, ClusterQueueSpec]
    teams: Sequence[Team]
    priorities: Priorities
    labels: Mapping[str, str] = field(default_factory=dict)
    #: Labels of Kueue's namespace besides ``labels`` (Pod Security's).
    namespace_labels: Mapping[str, str] = field(default_factory=dict)
    #: Team namespaces created elsewhere; the LocalQueues wait for them.
    namespaces: Mapping[str, pulumi.Resource] = field(default_factory=dict)
    #: AdmissionChecks every ClusterQueue lists (each admits training): ``make-before-break`` while it is on.
    admission_checks: Sequence[str] = ()
    #: The quota controller owns ``spec.resourceGroups`` (its numbers follow the healthy GPUs): Pulumi creates each
    #: ClusterQueue with the numbers at full capacity and then leaves that field alone (``ignoreChanges``), so a
    #: ``pulumi up`` never puts the static numbers back. The stack's quotas reach the controller as shares through
    #: its settings, a change to them included.
    quota_follows_capacity: bool = False
    #: Kueue Topologies the flavors name (``GpuFlavor.topology``).
    topologies: Sequence[Topology] = ()

    def __post_init__(self) -> None:
        if not self.flavors:
            raise ValueError("QueuesArgs.flavors: at least one GPU flavor is needed")
        topologies = {t.name for t in self.topologies}
        for f in self.flavors:
            if f.topology is not None and f.topology not in topologies:
                raise ValueError(f"QueuesArgs.flavors: flavor {f.name!r} names unknown topology {f.topology!r}")
        known = {f.name for f in self.flavors}
        for qname, q in self.queues.items():
            unknown = sorted(set(q.quota) - known)
            if unknown:
                raise ValueError(f"QueuesArgs.queues.{qname}.quota: unknown flavor(s) {unknown}")
        for t in self.teams:
            if t.cluster_queue not in self.queues:
                raise ValueError(f"QueuesArgs.teams: team {t.name!r} points at unknown queue {t.cluster_queue!r}")
        if len(set(self.admission_checks)) != len(self.admission_checks):
            raise ValueError(f"QueuesArgs.admission_checks: listed twice in {list(self.admission_checks)}")


def flavor_spec(flavor: GpuFlavor) -> dict[str, Any]:
    """The ResourceFlavor's spec: the nodes it selects, the tolerations its pods get, and its topology."""
    spec: dict[str, Any] = {
        "nodeLabels": flavor.selector_labels,
        "tolerations": [t.to_k8s() for t in flavor.tolerations],
    }
    if flavor.topology is not None:
        spec["topologyName"] = flavor.topology
    return spec


def excluded_resources(flavors: Sequence[GpuFlavor] = ()) -> list[str]:
    """What Kueue leaves to the scheduler: CPU, memory and the like, and every fabric's RDMA resource (a node has
    them with its GPUs; quota on them would only make a training pod unadmittable)."""
    rdma = sorted({f.fabric.rdma_resource for f in flavors if f.fabric is not None and f.fabric.rdma_resource})
    return [*NON_GPU_RESOURCE_PREFIXES, *rdma]


def kueue_manager_config(settings: KueueSettings, flavors: Sequence[GpuFlavor] = ()) -> dict[str, Any]:
    """Kueue's Configuration (config.kueue.x-k8s.io/v1beta2) with the all-or-nothing gate as the stack sets it (off:
    left out here, and switched off by a feature gate in ``kueue_chart_values``)."""
    wfpr = settings.wait_for_pods_ready
    config: dict[str, Any] = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443"},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
        "controller": {"groupKindConcurrency": {"Job.batch": 5, "Pod": 5, "Workload.kueue.x-k8s.io": 5}},
        "clientConnection": {"qps": 50, "burst": 100},
        "integrations": {"frameworks": ["batch/job", "jobset.x-k8s.io/jobset", "kubeflow.org/pytorchjob"]},
        # Every job in a team namespace is Kueue's, queue label or not: one without it is suspended and never
        # admitted (no LocalQueue), so nothing there runs around the queues.
        "manageJobsWithoutQueueName": True,
        "managedJobsNamespaceSelector": {"matchLabels": {WORKLOAD_LABEL: "training"}},
        "resources": {"excludeResourcePrefixes": excluded_resources(flavors)},
    }
    if wfpr.enable:
        gate: dict[str, Any] = {
            "timeout": wfpr.timeout,
            "blockAdmission": wfpr.block_admission,
            "requeuingStrategy": {
                "timestamp": "Eviction",
                "backoffBaseSeconds": wfpr.backoff_base_seconds,
                "backoffMaxSeconds": wfpr.backoff_max_seconds,
            },
        }
        if wfpr.recovery_timeout is not None:
            gate["recoveryTimeout"] = wfpr.recovery_timeout
        config["waitForPodsReady"] = gate
    return config


def kueue_chart_values(settings: KueueSettings, flavors: Sequence[GpuFlavor] = ()) -> dict[str, Any]:
    """The chart's values: the Configuration, the controller's image at the chart's release, and where it runs."""
    config = kueue_manager_config(settings, flavors)
    controller: dict[str, Any] = {"manager": {"image": settings.image_values()}, **settings.placement_values()}
    if not settings.wait_for_pods_ready.enable:
        # From Kueue 0.19 the gate is on even where the Configuration leaves it out (30m, not blocking); only this
        # feature gate turns it off (upstream plans to remove the gate in 0.21).
        controller["featureGates"] = [{"name": DISABLE_WAIT_FOR_PODS_READY_GATE, "enabled": True}]
    values: dict[str, Any] = {
        "controllerManager": controller,
        "managerConfig": {"controllerManagerConfigYaml": yaml.safe_dump(config, sort_keys=False)},
    }
    return _deep_merge(values, settings.extra_values)


def _deep_merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def team_namespaces_selector(namespaces: Sequence[str]) -> dict[str, Any]:
    """A ClusterQueue's ``namespaceSelector``: exactly the given team namespaces, by their name label."""
    return {"matchExpressions": [{"key": NAMESPACE_NAME_LABEL, "operator": "In", "values": sorted(set(namespaces))}]}


def cluster_queue_spec(
    spec: ClusterQueueSpec,
    cohort: str,
    flavors: Sequence[GpuFlavor],
    namespaces: Sequence[str],
    admission_checks: Sequence[str] = (),
) -> dict[str, Any]:
    """A ClusterQueue: GPU quota per flavor (one resource group per GPU resource name), cohort and preemption,
    and the AdmissionChecks every workload it admits must pass (none: the key is left out)."""
    out: dict[str, Any] = {
        "cohortName": cohort,
        "queueingStrategy": spec.queueing_strategy,
        "namespaceSelector": team_namespaces_selector(namespaces),
        "resourceGroups": resource_groups(
            [(f.name, f.gpu_resource) for f in flavors], spec.quota, spec.borrowing_limit
        ),
        "preemption": {
            "withinClusterQueue": "LowerPriority",
            "reclaimWithinCohort": "Any",
            "borrowWithinCohort": {"policy": "Never"},
        },
    }
    if admission_checks:
        # v1beta2 has only the strategy form; no onFlavors: every workload of the queue passes the check.
        out["admissionChecksStrategy"] = {"admissionChecks": [{"name": n} for n in admission_checks]}
    return out


def cpu_queue_spec(cpu: CpuQueue, namespaces: Sequence[str]) -> dict[str, Any]:
    """The ClusterQueue of CPU-only work: outside the cohort (it lends and borrows nothing), its only quota the
    pods it runs at once over the flavor of its own name, open to every team namespace, first come first served.
    The quantity is written as a string, as the API server stores it: a number would be a change at every preview."""
    return {
        "queueingStrategy": "BestEffortFIFO",
        "namespaceSelector": team_namespaces_selector(namespaces),
        "resourceGroups": [
            {
                "coveredResources": [POD_COUNT_RESOURCE],
                "flavors": [
                    {"name": cpu.name, "resources": [{"name": POD_COUNT_RESOURCE, "nominalQuota": str(cpu.pods)}]}
                ],
            }
        ],
    }


class KueueObject(pulumi.CustomResource):
    """A Kueue object whose fields sit beside ``metadata`` rather than in a ``spec`` (WorkloadPriorityClass).

    ``apiextensions.CustomResource`` only carries ``spec``; this registers the same Kubernetes provider type
    (``kubernetes:<apiVersion>:<kind>``) with the object's own top-level fields.
    """

    def __init__(
        self,
        name: str,
        *,
        kind: str,
        metadata: Mapping[str, Any],
        fields: Mapping[str, Any],
        opts: pulumi.ResourceOptions | None = None,
        api_version: str = KUEUE_API,
    ) -> None:
        props = {"apiVersion": api_version, "kind": kind, "metadata": dict(metadata), **fields}
        opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(version=_K8S_PROVIDER_VERSION))
        super().__init__(f"kubernetes:{api_version}:{kind}", name, props, opts)


class Queues(pulumi.ComponentResource):
    """Kueue installed from its pinned chart, plus the flavors, queues and priority classes of the stack."""

    def __init__(self, name: str, args: QueuesArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpucluster:queues:Queues", name, None, opts)
        labels = dict(args.labels)
        settings = args.kueue

        self.namespace = k8s.core.v1.Namespace(
            f"{name}-namespace",
            metadata={"name": settings.namespace, "labels": {**labels, **args.namespace_labels}},
            opts=pulumi.ResourceOptions(parent=self),
        )
        chart = resolve_chart(settings.chart, settings.chart_version)
        self.chart = helm_chart(
            f"{name}-kueue",
            chart,
            namespace=settings.namespace,
            values=kueue_chart_values(settings, args.flavors),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.namespace]),
        )
        # Every Kueue object waits for the chart: its CRDs and webhooks must exist first, so a fresh cluster
        # converges in a single `pulumi up`.
        after_chart = pulumi.ResourceOptions(parent=self, depends_on=[self.chart])

        # A Topology's levels, and a topology flavor's nodeLabels, tolerations and topologyName, are immutable in
        # Kueue, and neither can be deleted while a ClusterQueue uses it (its resource-in-use finalizer), so a
        # replacement would wait forever: the API server refuses such a change with its own message instead, and
        # the way to change one is a new flavor (docs/design/kueue-topology-aware-scheduling.md).
        self.topologies = {
            t.name: k8s.apiextensions.CustomResource(
                f"{name}-topology-{t.name}",
                api_version=KUEUE_API,
                kind="Topology",
                metadata={"name": t.name, "labels": labels},
                spec=t.to_k8s(),
                opts=after_chart,
            )
            for t in args.topologies
        }
        self.flavors = {
            f.name: k8s.apiextensions.CustomResource(
                f"{name}-flavor-{f.name}",
                api_version=KUEUE_API,
                kind="ResourceFlavor",
                metadata={
                    "name": f.name,
                    "labels": labels,
                    # What the quota policy checks every ClusterQueue against.
                    "annotations": flavor_annotations(f),
                },
                spec=flavor_spec(f),
                opts=after_chart
                if f.topology is None
                else pulumi.ResourceOptions(parent=self, depends_on=[self.chart, self.topologies[f.topology]]),
            )
            for f in args.flavors
        }
        team_namespaces: dict[str, list[str]] = {}
        for team in args.teams:
            team_namespaces.setdefault(team.cluster_queue, []).append(team.namespace)
        self.cluster_queues = {
            qname: k8s.apiextensions.CustomResource(
                f"{name}-cq-{qname}",
                api_version=KUEUE_API,
                kind="ClusterQueue",
                metadata={"name": qname, "labels": labels},
                spec=cluster_queue_spec(
                    q, args.cohort, args.flavors, team_namespaces.get(qname, []), args.admission_checks
                ),
                opts=pulumi.ResourceOptions(
                    parent=self,
                    depends_on=[self.chart, *self.flavors.values()],
                    ignore_changes=[QUOTA_FIELD] if args.quota_follows_capacity else None,
                ),
            )
            for qname, q in args.queues.items()
        }
        self.local_queues: dict[str, k8s.apiextensions.CustomResource] = {}
        for team in args.teams:
            key = f"{team.namespace}/{team.local_queue}"
            if key in self.local_queues:
                continue  # two teams sharing a namespace share its queue (config checks they agree)
            deps: list[pulumi.Resource] = [self.chart, self.cluster_queues[team.cluster_queue]]
            if team.namespace in args.namespaces:
                deps.append(args.namespaces[team.namespace])
            self.local_queues[key] = k8s.apiextensions.CustomResource(
                f"{name}-lq-{team.namespace}-{team.local_queue}",
                api_version=KUEUE_API,
                kind="LocalQueue",
                metadata={"name": team.local_queue, "namespace": team.namespace, "labels": labels},
                spec={"clusterQueue": team.cluster_queue},
                opts=pulumi.ResourceOptions(parent=self, depends_on=deps),
            )
        # CPU-only work (checkpoint checks, restore drills): its own flavor, which selects no node and declares no
        # GPU, its own ClusterQueue, and its LocalQueue in every team namespace.
        cpu = settings.cpu_queue
        self.cpu_flavor = k8s.apiextensions.CustomResource(
            f"{name}-flavor-{cpu.name}",
            api_version=KUEUE_API,
            kind="ResourceFlavor",
            metadata={"name": cpu.name, "labels": labels, "annotations": {DECLARED_GPUS_ANNOTATION: "0"}},
            spec={},
            opts=after_chart,
        )
        team_ns = sorted({t.namespace for t in args.teams})
        self.cpu_cluster_queue = k8s.apiextensions.CustomResource(
            f"{name}-cq-{cpu.name}",
            api_version=KUEUE_API,
            kind="ClusterQueue",
            metadata={"name": cpu.name, "labels": labels},
            spec=cpu_queue_spec(cpu, team_ns),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.chart, self.cpu_flavor]),
        )
        for ns in team_ns:
            deps = [self.chart, self.cpu_cluster_queue]
            if ns in args.namespaces:
                deps.append(args.namespaces[ns])
            self.local_queues[f"{ns}/{cpu.name}"] = k8s.apiextensions.CustomResource(
                f"{name}-lq-{ns}-{cpu.name}",
                api_version=KUEUE_API,
                kind="LocalQueue",
                metadata={"name": cpu.name, "namespace": ns, "labels": labels},
                spec={"clusterQueue": cpu.name},
                opts=pulumi.ResourceOptions(parent=self, depends_on=deps),
            )
        self.workload_priorities = {
            wp.name: KueueObject(
                f"{name}-wpc-{wp.name}",
                kind="WorkloadPriorityClass",
                metadata={"name": wp.name, "labels": labels},
                fields={"value": wp.value, "description": wp.description or f"research workload priority {wp.name}"},
                opts=after_chart,
            )
            for wp in args.priorities.workload
        }
        self.pod_priorities = {
            tier: k8s.scheduling.v1.PriorityClass(
                f"{name}-pc-{tier}",
                metadata={"name": pc.name, "labels": {**labels, TIER_LABEL: tier}},
                value=pc.value,
                preemption_policy=pc.preemption_policy,
                global_default=False,
                description=pc.description or f"gpucluster {tier} pods",
                opts=pulumi.ResourceOptions(parent=self),
            )
            for tier, pc in (("training", args.priorities.pod.training), ("inference", args.priorities.pod.inference))
        }
        self.register_outputs(
            {
                "namespace": settings.namespace,
                "clusterQueues": sorted(self.cluster_queues),
                "cpuQueue": cpu.name,
                "localQueues": sorted(self.local_queues),
                "resourceFlavors": sorted([*self.flavors, cpu.name]),
                "topologies": sorted(self.topologies),
                "quotaFollowsCapacity": args.quota_follows_capacity,
                "workloadPriorityClasses": [wp.name for wp in args.priorities.workload],
            }
        )
