"""MetricsAdapter: ``custom.metrics.k8s.io`` for the InferenceServices' HPAs, so they scale on the request rate
their Service receives, wherever the replicas run (``virtualnode/cmd/gpucluster-metrics-adapter``).

Resources: its ConfigMap (the metrics file), ServiceAccount, the two bindings every aggregated API server needs
(``system:auth-delegator`` to check callers' tokens and rights, and ``extension-apiserver-authentication-reader``
in kube-system to read the front proxy's CA), a Role in each inference namespace to list Services (nothing else:
it answers for those namespaces only), the Deployment and its Service (or, with ``externalAddress``, an
ExternalName Service to an adapter that runs outside the cluster), and the APIService that routes the group to it.

The APIService skips TLS verification of the adapter's self-signed serving certificate, as metrics-server's and
prometheus-adapter's own manifests do: the API server reaches it by Service, and the adapter still checks every
caller through the API server (delegated authentication and authorization).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from components.rbac import grant
from contract.constants import nonroot_pod_security_context, settings_digest
from contract.inference_settings import REQUESTS_METRIC
from contract.metrics_adapter_settings import API_GROUP, API_VERSION, SECURE_PORT, MetricsAdapterSettings

APP = "gpucluster-metrics-adapter"
CONFIG_FILE = "config.json"
CONFIG_DIR = "/etc/gpucluster-metrics-adapter"


@dataclass(frozen=True)
class MetricsAdapterArgs:
    settings: MetricsAdapterSettings
    #: The inference namespaces: the only ones it answers for, and lists Services in.
    inference_namespaces: Sequence[str]
    labels: Mapping[str, str] = field(default_factory=dict)
    depends_on: tuple[pulumi.Resource, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.settings, MetricsAdapterSettings):
            raise TypeError(f"MetricsAdapterArgs.settings: expected MetricsAdapterSettings, got {type(self.settings)}")
        if not self.settings.enabled:
            raise ValueError("MetricsAdapterArgs.settings: the adapter is not enabled")
        if not self.inference_namespaces:
            raise ValueError("MetricsAdapterArgs.inference_namespaces: name at least one")


def config_document(args: MetricsAdapterArgs) -> str:
    return json.dumps(args.settings.document(list(args.inference_namespaces), REQUESTS_METRIC), indent=2)


def adapter_pod_spec(settings: MetricsAdapterSettings, config_map: str) -> dict[str, object]:
    placement: dict[str, object] = {}
    if settings.node_selector:
        placement["nodeSelector"] = dict(settings.node_selector)
    if settings.tolerations:
        placement["tolerations"] = [t.to_k8s() for t in settings.tolerations]
    return {
        **placement,
        "serviceAccountName": APP,
        "securityContext": nonroot_pod_security_context(),
        "containers": [
            {
                "name": "adapter",
                "image": settings.image,
                "command": [APP],
                "args": [
                    f"--config={CONFIG_DIR}/{CONFIG_FILE}",
                    f"--secure-port={SECURE_PORT}",
                    # a self-signed serving certificate, written where the root filesystem is not read-only
                    "--cert-dir=/tmp/serving-cert",
                ],
                "ports": [{"name": "https", "containerPort": SECURE_PORT, "protocol": "TCP"}],
                "readinessProbe": {"httpGet": {"path": "/readyz", "port": "https", "scheme": "HTTPS"}},
                "livenessProbe": {"httpGet": {"path": "/livez", "port": "https", "scheme": "HTTPS"}},
                "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"]},
                },
                "volumeMounts": [
                    {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
                    {"name": "tmp", "mountPath": "/tmp"},
                ],
            }
        ],
        "volumes": [{"name": "config", "configMap": {"name": config_map}}, {"name": "tmp", "emptyDir": {}}],
    }


class MetricsAdapter(pulumi.ComponentResource):
    """The adapter, its access and the APIService of ``custom.metrics.k8s.io``."""

    def __init__(self, name: str, args: MetricsAdapterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpucluster:inference:MetricsAdapter", name, None, opts)
        s = args.settings
        labels = {**args.labels, "app.kubernetes.io/name": APP}
        meta = {"name": APP, "namespace": s.namespace, "labels": labels}
        after = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))
        document = config_document(args)
        self.config_map = k8s.core.v1.ConfigMap(
            f"{name}-config", metadata=meta, data={CONFIG_FILE: document}, opts=after
        )
        self.service_account = k8s.core.v1.ServiceAccount(f"{name}-sa", metadata=meta, opts=after)
        subject = [{"kind": "ServiceAccount", "name": APP, "namespace": s.namespace}]
        bindings: list[pulumi.Resource] = [
            k8s.rbac.v1.ClusterRoleBinding(
                f"{name}-auth-delegator",
                metadata={"name": f"{APP}:system:auth-delegator", "labels": labels},
                role_ref={
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "system:auth-delegator",
                },
                subjects=subject,
                opts=pulumi.ResourceOptions(parent=self, depends_on=[self.service_account]),
            ),
            k8s.rbac.v1.RoleBinding(
                f"{name}-auth-reader",
                metadata={"name": f"{APP}-auth-reader", "namespace": "kube-system", "labels": labels},
                role_ref={
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": "extension-apiserver-authentication-reader",
                },
                subjects=subject,
                opts=pulumi.ResourceOptions(parent=self, depends_on=[self.service_account]),
            ),
        ]
        for ns in args.inference_namespaces:
            role, binding = grant(
                self,
                (f"{name}-services-{ns}", f"{name}-services-{ns}-binding"),
                name=f"{APP}-services",
                namespace=ns,
                rules=[{"apiGroups": [""], "resources": ["services"], "verbs": ["get", "list", "watch"]}],
                service_account=self.service_account,
                subject=subject,
                labels=labels,
                depends_on=args.depends_on,
            )
            bindings += [role, binding]

        self.deployment: k8s.apps.v1.Deployment | None = None
        if s.external_address is None:
            self.deployment = k8s.apps.v1.Deployment(
                f"{name}-deployment",
                metadata=meta,
                spec={
                    "replicas": s.replicas,
                    "selector": {"matchLabels": {"app.kubernetes.io/name": APP}},
                    "template": {
                        # The adapter reads its configuration at start: a changed one rolls the pods.
                        "metadata": {"labels": labels, "annotations": settings_digest(document)},
                        "spec": adapter_pod_spec(s, APP),
                    },
                },
                opts=pulumi.ResourceOptions(parent=self, depends_on=[self.config_map, *bindings]),
            )
            service_spec: dict[str, object] = {
                "type": "ClusterIP",
                "selector": {"app.kubernetes.io/name": APP},
                "ports": [{"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"}],
            }
            port = 443
        else:
            host, _, external_port = s.external_address.rpartition(":")
            port = int(external_port)
            service_spec = {
                "type": "ExternalName",
                "externalName": host,
                "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
            }
        self.service = k8s.core.v1.Service(f"{name}-service", metadata=meta, spec=service_spec, opts=after)
        self.api_service = k8s.apiregistration.v1.APIService(
            f"{name}-apiservice",
            metadata={"name": f"{API_VERSION}.{API_GROUP}", "labels": labels},
            spec={
                "group": API_GROUP,
                "version": API_VERSION,
                "service": {"name": APP, "namespace": s.namespace, "port": port},
                "insecureSkipTLSVerify": True,
                "groupPriorityMinimum": 100,
                "versionPriority": 200,
            },
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=[self.service, *bindings, *([self.deployment] if self.deployment else [])]
            ),
        )
        self.register_outputs(
            {
                "namespace": s.namespace,
                "apiService": f"{API_VERSION}.{API_GROUP}",
                "external": s.external_address,
            }
        )
