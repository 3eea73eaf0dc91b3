"""GpuCluster: the whole shared cluster of one stack, one component per capability."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.config import StackConfig
from components.controller import Controller, ControllerArgs
from components.descheduler import Descheduler, DeschedulerArgs
from components.guardrails import Guardrails, GuardrailsArgs
from components.guardrails_policies import GuardrailInputs, MakeBeforeBreakMarks
from components.inference import InferenceService, InferenceServiceArgs
from components.jobset import JobSet, JobSetArgs
from components.make_before_break import MakeBeforeBreak
from components.metrics_adapter import MetricsAdapter, MetricsAdapterArgs
from components.operators import Operators, OperatorsArgs
from components.queues import Queues, QueuesArgs
from components.storage import Storage, StorageArgs
from components.telemetry import Telemetry, TelemetryArgs
from components.virtual_node import APP as VIRTUAL_NODE_APP
from components.virtual_node import PROVIDER_APP as VIRTUAL_NODE_PROVIDER_APP
from components.virtual_node import VirtualNode, VirtualNodeArgs, replica_transports
from contract.constants import ENVIRONMENT_LABEL, PROJECT, RELIABILITY_CONFIGMAP, WORKLOAD_LABEL
from contract.controllers.make_before_break import DEPLOYMENT_ANNOTATIONS, POD_ANNOTATION, TEMPLATE_ANNOTATIONS
from contract.make_before_break_settings import CHECK_NAME, MakeBeforeBreakSettings
from contract.registry import (
    CHECKPOINT_VERIFIER,
    CONTROLLERS,
    MAKE_BEFORE_BREAK,
    QUARANTINE,
    QUOTA_CONTROLLER,
    TAINT_CONTROLLER,
)
from contract.spec import (
    AFTER_CLUSTER_QUEUES,
    AFTER_JOBSET,
    AFTER_KUEUE,
    NAMESPACE_ROLES,
    WORKLOAD_NAMESPACES,
    ControllerSpec,
)

#: The controllers whose component adds to the kit's (make-before-break's AdmissionCheck); the rest use Controller.
COMPONENTS: dict[str, type[Controller]] = {MAKE_BEFORE_BREAK.name: MakeBeforeBreak}


@dataclass(frozen=True)
class GpuClusterArgs:
    config: StackConfig
    #: The burst providers' secrets (config key name -> value). None: read from the stack's secret config
    #: (``pulumi.Config("gpucluster").require_secret``) for the names the burst section references.
    secrets: Mapping[str, pulumi.Input[str]] | None = None

    def __post_init__(self) -> None:
        overlap = set(self.config.training_namespaces) & set(self.config.inference_namespaces)
        if overlap:
            raise ValueError(f"GpuClusterArgs.config: namespaces both training and inference: {sorted(overlap)}")
        if self.secrets is not None:
            missing = sorted(set(self.config.provider_secret_names) - set(self.secrets))
            if missing:
                raise ValueError(f"GpuClusterArgs.secrets: no value for {missing}, which the burst providers name")

    def provider_secrets(self) -> dict[str, pulumi.Input[str]]:
        """Exactly the secrets the burst providers read, each a Pulumi secret."""
        names = self.config.provider_secret_names
        if self.secrets is not None:
            return {n: self.secrets[n] for n in names}
        config = pulumi.Config(PROJECT)
        return {n: config.require_secret(n) for n in names}


def guardrail_inputs(cfg: StackConfig, created: Collection[str] | None = None) -> GuardrailInputs:
    """What of the stack the admission policies and team Roles read; ``created``: the namespaces the stack
    creates (the reliability ConfigMap is readable only where one of them holds it)."""
    reliability = cfg.training.reliability_namespace
    return GuardrailInputs(
        training_namespaces=tuple(cfg.training_namespaces),
        priorities_by_namespace={t.namespace: tuple(cfg.priorities.allowed_for(t.name)) for t in cfg.teams},
        workload_priority_values={p.name: p.value for p in cfg.priorities.workload},
        training_priority_class=cfg.priorities.pod.training.name,
        exempt_namespaces=tuple(dict.fromkeys([cfg.telemetry.namespace, *cfg.guardrails.exempt_namespaces])),
        ipc_lock=any(f.fabric is not None and f.fabric.rdma for f in cfg.flavors),
        team_groups={t.namespace: t.subject_group for t in cfg.teams},
        reliability=(reliability, RELIABILITY_CONFIGMAP) if created is None or reliability in created else None,
        gpu_resources=tuple(dict.fromkeys(f.gpu_resource for f in cfg.flavors)),
        controller_users={s.name: user for s in CONTROLLERS if (user := running_user(cfg, s)) is not None},
        make_before_break=make_before_break_marks(mbb) if (mbb := cfg.running(MAKE_BEFORE_BREAK)) else None,
        virtual_node=virtual_node_identity(cfg),
        burst_provider=burst_provider_identity(cfg),
        taint_controller=taint_controller_identity(cfg),
        checkpoint_verifier_image=verifier.image if (verifier := cfg.running(CHECKPOINT_VERIFIER)) else None,
    )


def make_before_break_marks(settings: MakeBeforeBreakSettings) -> MakeBeforeBreakMarks:
    """What the make-before-break controller writes (its spec names the keys), and as whom."""
    return MakeBeforeBreakMarks(
        user=service_account_user(settings.namespace, MAKE_BEFORE_BREAK.app),
        reservation_key=settings.reservation_key,
        check_name=settings.admission_check_name,
        deployment_annotations=DEPLOYMENT_ANNOTATIONS,
        template_annotations=TEMPLATE_ANNOTATIONS,
        pod_annotation=POD_ANNOTATION,
    )


def virtual_node_identity(cfg: StackConfig) -> tuple[str, str] | None:
    """The virtual node's user and its Node's name; None when the stack does not burst."""
    if not cfg.burst_enabled or cfg.burst is None:
        return None
    vn = cfg.burst.settings.virtual_node
    return service_account_user(vn.namespace, VIRTUAL_NODE_APP), vn.node_name


def burst_provider_identity(cfg: StackConfig) -> str | None:
    """The burst provider service's user (the virtual node pod's ``provider`` container); None without burst."""
    if not cfg.burst_enabled or cfg.burst is None:
        return None
    return service_account_user(cfg.burst.settings.virtual_node.namespace, VIRTUAL_NODE_PROVIDER_APP)


def running_user(cfg: StackConfig, spec: ControllerSpec[Any]) -> str | None:
    """The user a registered controller's requests carry while the stack runs it; None while it does not."""
    settings = cfg.running(spec)
    if settings is None:
        return None
    return service_account_user(settings.namespace, spec.app)


def taint_controller_identity(cfg: StackConfig) -> tuple[str, str] | None:
    """The taint controller's user and the burst taint key it owns; None while the stack runs none."""
    user = running_user(cfg, TAINT_CONTROLLER)
    settings = cfg.running(TAINT_CONTROLLER)
    return None if user is None or settings is None else (user, settings.taint_key)


def service_account_user(namespace: str, name: str) -> str:
    """The user name the API server gives a ServiceAccount's requests."""
    return f"system:serviceaccount:{namespace}:{name}"


class GpuCluster(pulumi.ComponentResource):
    """Namespaces, queues and priorities, checkpoint storage, the gradual-return descheduler, telemetry, the
    virtual node and taint controller when the stack bursts, and the stack's inference services."""

    def __init__(self, name: str, args: GpuClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpucluster:cluster:GpuCluster", name, None, opts)
        cfg = args.config
        labels = {"app.kubernetes.io/part-of": "gpucluster", ENVIRONMENT_LABEL: cfg.environment}

        burst = cfg.burst if cfg.burst_enabled else None
        #: Each registered controller the stack runs (``contract/registry.py``), with its settings.
        running = [(spec, settings) for spec in CONTROLLERS if (settings := cfg.running(spec)) is not None]
        mbb = cfg.running(MAKE_BEFORE_BREAK)
        quota = cfg.running(QUOTA_CONTROLLER)
        # The virtual node's namespace and the controllers', each labelled with the first role of NAMESPACE_ROLES
        # that claims it.
        claimed = [(burst.settings.virtual_node.namespace, "burst")] if burst is not None else []
        claimed += [(settings.namespace, spec.namespace_role) for spec, settings in running]
        roles = {ns: role for role in reversed(NAMESPACE_ROLES) for ns, r in claimed if r == role}
        guard = cfg.guardrails
        #: A flavor's fabric adds IPC_LOCK to training pods, which Pod Security baseline refuses.
        rdma = guardrail_inputs(cfg).ipc_lock
        self.namespaces: dict[str, k8s.core.v1.Namespace] = {}
        for ns, role in [
            *((n, "training") for n in cfg.training_namespaces),
            *((n, "inference") for n in cfg.inference_namespaces),
            *((n, roles[n]) for n in dict.fromkeys(ns for ns, _ in claimed)),
            *([(cfg.metrics_adapter.namespace, "metrics")] if cfg.metrics_adapter.enabled else []),
        ]:
            self.namespaces[ns] = k8s.core.v1.Namespace(
                f"{name}-ns-{ns}",
                metadata={"name": ns, "labels": {**labels, WORKLOAD_LABEL: role, **guard.labels(role, ipc_lock=rdma)}},
                opts=pulumi.ResourceOptions(parent=self),
            )
        # Before any workload: the API server holds the rules for every pod created after them.
        self.guardrails = Guardrails(
            f"{name}-guardrails",
            GuardrailsArgs(
                settings=guard,
                inputs=guardrail_inputs(cfg, created=set(self.namespaces)),
                labels=labels,
                depends_on=tuple(self.namespaces.values()),
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )

        self.jobset: JobSet | None = None
        if cfg.jobset.enabled:
            # Training jobs are JobSets: Kueue's jobset integration waits for the CRD, so no ordering is needed.
            self.jobset = JobSet(
                f"{name}-jobset",
                JobSetArgs(settings=cfg.jobset, labels=labels, namespace_labels=guard.labels("system")),
                opts=pulumi.ResourceOptions(parent=self),
            )
        self.queues = Queues(
            f"{name}-queues",
            QueuesArgs(
                kueue=cfg.kueue,
                namespace_labels=guard.labels("system"),
                cohort=cfg.cohort,
                flavors=cfg.flavors,
                topologies=cfg.topologies,
                queues=cfg.queues,
                teams=cfg.teams,
                priorities=cfg.priorities,
                labels=labels,
                namespaces=self.namespaces,
                # Every ClusterQueue admits training: while make-before-break is on, each waits for its room
                # (not while it drains: no gang waits, and the controller undoes what it did).
                admission_checks=(CHECK_NAME,) if mbb is not None and not mbb.draining else (),
                # The quota controller owns the queues' resource groups while it runs.
                quota_follows_capacity=quota is not None,
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.storage = Storage(
            f"{name}-storage",
            StorageArgs(
                settings=cfg.storage,
                namespaces=cfg.training_namespaces,
                labels=labels,
                namespace_resources=self.namespaces,
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.operators: Operators | None = None
        operators = OperatorsArgs(settings=cfg.prerequisites, labels=labels)
        if operators.installed:
            self.operators = Operators(f"{name}-operators", operators, opts=pulumi.ResourceOptions(parent=self))
        self.descheduler: Descheduler | None = None
        if cfg.descheduler.enabled:
            self.descheduler = Descheduler(
                f"{name}-descheduler",
                DeschedulerArgs(
                    settings=cfg.descheduler,
                    burst_taint_key=cfg.burst_taint_key,
                    inference_namespaces=cfg.inference_namespaces,
                    labels=labels,
                ),
                opts=pulumi.ResourceOptions(parent=self),
            )

        self.telemetry = Telemetry(
            f"{name}-telemetry",
            TelemetryArgs(settings=cfg.telemetry, labels=labels, namespace_labels=guard.labels("telemetry")),
            opts=pulumi.ResourceOptions(parent=self),
        )

        self.virtual_node: VirtualNode | None = None
        if burst is not None:
            vn = burst.settings.virtual_node
            # The node's Roles live in the inference namespaces: those must exist first.
            vn_deps = tuple(self.namespaces[n] for n in (vn.namespace, *vn.inference_namespaces))
            self.virtual_node = VirtualNode(
                f"{name}-virtual-node",
                VirtualNodeArgs(
                    settings=burst.settings, secrets=args.provider_secrets(), labels=labels, depends_on=vn_deps
                ),
                opts=pulumi.ResourceOptions(parent=self),
            )

        # Every controller of ours, deployed from its spec once what it reads or writes exists.
        after = {
            AFTER_CLUSTER_QUEUES: list(self.queues.cluster_queues.values()),
            AFTER_KUEUE: [self.queues.chart],
            AFTER_JOBSET: [self.jobset.chart] if self.jobset is not None else [],
        }
        context = {WORKLOAD_NAMESPACES: tuple(cfg.training_namespaces)}
        scrapers = tuple(cfg.guardrails.metrics_scrapers) if cfg.guardrails.enabled else None
        self.controllers: dict[str, Controller] = {}
        for spec, settings in running:
            args_ = ControllerArgs(spec=spec, settings=settings, context=context, labels=labels, scrapers=scrapers)
            # Its namespace and those its grants live in (the cluster-wide Events namespace is no stack's).
            namespaces = dict.fromkeys([settings.namespace, *(g.namespace for g in args_.grants() if g.namespace)])
            depends_on = (
                *(self.namespaces[n] for n in namespaces if n in self.namespaces),
                *(r for a in spec.after for r in after[a]),
            )
            component = COMPONENTS.get(spec.name, Controller)
            self.controllers[spec.name] = component(
                f"{name}-{spec.name}",
                dataclasses.replace(args_, depends_on=depends_on),
                opts=pulumi.ResourceOptions(parent=self),
            )

        self.metrics_adapter: MetricsAdapter | None = None
        if cfg.metrics_adapter.enabled:
            self.metrics_adapter = MetricsAdapter(
                f"{name}-metrics-adapter",
                MetricsAdapterArgs(
                    settings=cfg.metrics_adapter,
                    inference_namespaces=cfg.inference_namespaces,
                    labels=labels,
                    depends_on=tuple(
                        self.namespaces[n] for n in (cfg.metrics_adapter.namespace, *cfg.inference_namespaces)
                    ),
                ),
                opts=pulumi.ResourceOptions(parent=self),
            )

        self.inference_services: dict[str, InferenceService] = {}
        default_gpu_type = burst.settings.virtual_node.default_gpu_type if burst is not None else None
        for svc in cfg.inference_services:
            self.inference_services[f"{svc.namespace}/{svc.name}"] = InferenceService(
                f"{name}-inference-{svc.namespace}-{svc.name}",
                InferenceServiceArgs(
                    spec=svc,
                    priority_class_name=cfg.priorities.pod.inference.name,
                    inference_namespaces=cfg.inference_namespaces,
                    default_gpu_type=default_gpu_type,
                    labels=labels,
                    yield_to_topology_aware_training=any(f.topology is not None for f in cfg.flavors),
                    # The PriorityClass must exist before the first pod is admitted.
                    depends_on=(self.namespaces[svc.namespace], self.queues.pod_priorities["inference"]),
                ),
                opts=pulumi.ResourceOptions(parent=self),
            )

        self.outputs: dict[str, object] = {
            "environment": cfg.environment,
            "gpus": {f.name: f.capacity for f in cfg.flavors},
            "clusterQueues": {q: dict(spec.quota) for q, spec in cfg.queues.items()},
            "localQueues": sorted(self.queues.local_queues),
            "priorityClasses": {
                "training": cfg.priorities.pod.training.name,
                "inference": cfg.priorities.pod.inference.name,
            },
            "workloadPriorityClasses": [w.name for w in cfg.priorities.workload],
            "storageClass": cfg.storage.storage_class_name,
            "checkpointIntervalMinutes": round(self.storage.checkpoint_interval_minutes, 1),
            "burstTaintKey": cfg.burst_taint_key,
            "gpuTempLimitC": cfg.telemetry.alerts.gpu_temp_limit_c,
            "burst": (
                {
                    "virtualNode": burst.settings.virtual_node.node_name,
                    "capacity": burst.capacity,
                    "providers": [p.name for p in burst.settings.providers],
                    # Plain or TLS, per provider: what traffic to its rented replicas is (components/virtual_node.py).
                    "replicaTransport": replica_transports(burst.settings),
                    "taintController": burst.taint_controller.enabled,
                }
                if burst is not None
                else None
            ),
            "inferenceServices": sorted(self.inference_services),
            "quotaFollowsCapacity": quota is not None,
            "quarantine": cfg.running(QUARANTINE) is not None,
            "metricsAdapter": cfg.metrics_adapter.enabled,
        }
        self.register_outputs(self.outputs)
