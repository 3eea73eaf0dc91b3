"""Controller: deploys any controller of ours from its spec (``contract/controllers/<name>.py``) and its settings.

One ServiceAccount, one Role or ClusterRole and binding per grant the spec computes from the settings (least
privilege: each controller its own identity), the settings ConfigMap (the whole model as JSON; the daemon ignores
image and replicas) and the Deployment (``components.daemon_deployment``): non-root, read-only, standbys spread
over nodes behind the controller's Lease, scraped on the spec's metrics port. Its Pulumi type and child names come
from the spec and stay what each controller's own component used, so the URNs of a running stack do not move.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.daemon_deployment import DaemonShape, daemon_deployment, daemon_pod_spec, daemon_service_account
from components.rbac import grant
from contract.constants import NAMESPACE_NAME_LABEL, SETTINGS_LABEL
from contract.model import check_dns_label, check_qualified_name
from contract.rbac import Grant
from contract.spec import SETTINGS_FILE, ControllerSpec


def shape(spec: ControllerSpec[Any], settings: Any) -> DaemonShape:
    return DaemonShape(
        app=spec.app,
        image=settings.image,
        command=spec.command,
        settings_dir=spec.settings_dir,
        metrics_port=spec.metrics_port,
        honor_labels=spec.honor_labels,
        node_selector=settings.node_selector,
        tolerations=tuple(t.to_k8s() for t in settings.tolerations),
    )


def controller_pod_spec(spec: ControllerSpec[Any], settings: Any, config_map: str) -> dict[str, Any]:
    """The controller's pod spec as its Deployment carries it (the image tests run its entry point from it)."""
    return daemon_pod_spec(shape(spec, settings), config_map)


def metrics_ingress(app: str, port: int, scrapers: Sequence[str]) -> dict[str, Any]:
    """A NetworkPolicy spec: the controller's pods take connections only on ``port`` and only from pods in
    ``scrapers`` (none at all when empty). The kubelet's probes come from the node, which NetworkPolicy never blocks."""
    sources = [{"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: n}}} for n in scrapers]
    return {
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": app}},
        "policyTypes": ["Ingress"],
        "ingress": [{"from": sources, "ports": [{"protocol": "TCP", "port": port}]}] if sources else [],
    }


@dataclass(frozen=True)
class ControllerArgs:
    spec: ControllerSpec[Any]
    #: Complete settings: what the stack fills (flavors, queues, the virtual node) already filled.
    settings: Any
    labels: Mapping[str, str] = field(default_factory=dict)
    #: What the spec's grants read beyond the settings (``workload_namespaces``: the stack's team namespaces).
    context: Mapping[str, Any] = field(default_factory=dict)
    #: Its namespace, and what it reads or takes a field of (CRDs, ClusterQueues): they must exist first.
    depends_on: tuple[pulumi.Resource, ...] = field(default=())
    #: Namespaces whose pods may reach its metrics port (a NetworkPolicy admits only them); None: no policy.
    scrapers: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        spec, s = self.spec, self.settings
        where = f"ControllerArgs({spec.name})"
        if not isinstance(s, spec.settings_model):
            raise TypeError(f"{where}.settings: expected {spec.settings_model.__name__}, got {type(s).__name__}")
        if not s.enabled:
            raise ValueError(f"{where}.settings.enabled: the controller is disabled; build none")
        spec.check(s, self.context)
        for key in self.labels:
            check_qualified_name(key, f"{where}.labels key")
        for namespace in self.scrapers or ():
            try:
                check_dns_label(namespace)
            except ValueError as exc:
                raise ValueError(f"{where}.scrapers: {exc}") from None

    def grants(self) -> tuple[Grant, ...]:
        return self.spec.grants(self.settings, self.context)

    def resource_labels(self) -> dict[str, str]:
        """The labels of everything deployed for the controller."""
        return {
            **self.labels,
            "app.kubernetes.io/part-of": "gpucluster",
            "app.kubernetes.io/component": self.spec.part_of,
            "app.kubernetes.io/name": self.spec.app,
        }


class Controller(pulumi.ComponentResource):
    """ServiceAccount, the spec's grants, settings ConfigMap and the controller's Deployment.

    A controller that needs more than that (make-before-break's AdmissionCheck) subclasses this and overrides
    :meth:`extra_resources`; the Deployment waits for what it returns.
    """

    def __init__(self, name: str, args: ControllerArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        spec, s = args.spec, args.settings
        super().__init__(spec.component_type, name, None, opts)
        ns = s.namespace
        labels = args.resource_labels()
        child = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))

        self.service_account, rbac = daemon_service_account(
            self, f"{name}-sa", app=spec.app, namespace=ns, labels=labels, depends_on=args.depends_on
        )
        self.roles: dict[str, Any] = {}
        self.role_bindings: dict[str, Any] = {}
        for g in args.grants():
            self.roles[g.resource], self.role_bindings[g.resource] = grant(
                self,
                (f"{name}-{g.resource}", f"{name}-{g.binding_resource}"),
                name=g.name,
                namespace=g.namespace,
                rules=g.k8s_rules(),
                **rbac,
            )
        config_name = f"{spec.app}-settings"
        document = s.to_json()
        self.config_map = k8s.core.v1.ConfigMap(
            f"{name}-settings",
            metadata={"name": config_name, "namespace": ns, "labels": {**labels, SETTINGS_LABEL: spec.name}},
            data={SETTINGS_FILE: document},
            opts=child,
        )
        extra = self.extra_resources(name, args, child)
        self.network_policy = (
            k8s.networking.v1.NetworkPolicy(
                f"{name}-ingress",
                metadata={"name": spec.app, "namespace": ns, "labels": labels},
                spec=metrics_ingress(spec.app, spec.metrics_port, args.scrapers),
                opts=child,
            )
            if args.scrapers is not None
            else None
        )
        self.deployment = daemon_deployment(
            f"{name}-deployment",
            shape(spec, s),
            namespace=ns,
            replicas=s.replicas,
            labels=labels,
            config_map=config_name,
            settings=document,
            parent=self,
            depends_on=[
                self.service_account,
                *self.role_bindings.values(),
                self.config_map,
                *extra,
                *args.depends_on,
            ],
        )
        self.register_outputs({"deployment": spec.app, "namespace": ns, "replicas": s.replicas, **spec.outputs(s)})

    def extra_resources(self, name: str, args: ControllerArgs, child: pulumi.ResourceOptions) -> list[pulumi.Resource]:
        """Children beyond the kit's, created before the Deployment (``child``: parented here, after
        ``args.depends_on``); none here."""
        return []
