"""VirtualNode: the Node inference bursts to, and the provider service that rents the GPUs behind it.

One pod, two containers talking over loopback (docs/burst-provider-api.md):

* ``node`` — the virtual-kubelet binary: owns the Node object, its lease and the pods bound to it;
* ``provider`` — ``gpucluster-burst-provider``: picks a provider per pod, runs it there, keeps EndpointSlices.

Only ``provider`` mounts the provider credentials. The Deployment has one replica and the ``Recreate`` strategy:
two pods claiming the same Node at once would fight over its status and double-create instances.

Two identities, each with what its own client uses and reaching only its own container. The pod's ServiceAccount
(``APP``) is the node's: the pod mounts no token by itself (``automountServiceAccountToken: false``), and a projected
volume of that account's token, the cluster CA and the namespace is mounted only into ``node``. The provider service,
the container that talks to the internet, is ``PROVIDER_APP``: its token comes from a Secret the token controller
fills (a pod can project only its own account's token), mounted only into ``provider``. Both land at the path both
clients read in-cluster (``SERVICE_ACCOUNT_DIR``: client-go's ``rest.InClusterConfig``, the Python client's
``load_incluster_config``), so neither binary is told where to look.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.daemon_deployment import daemon_service_account
from components.rbac import grant
from components.scraping import scrape_annotations
from contract.burst_settings import (
    PROVIDER_LIVEZ_PATH,
    PROVIDER_METRICS_PORT,
    BurstSettings,
    settings_json,
    with_cluster_name,
)
from contract.constants import (
    NONROOT_UID,
    SETTINGS_LABEL,
    VIRTUAL_NODE_TAINT,
    nonroot_pod_security_context,
    settings_digest,
)
from contract.model import check_qualified_name

APP = "gpucluster-virtual-node"
SETTINGS_DIR = "/etc/gpucluster/burst"
SETTINGS_FILE = "settings.json"
SECRETS_DIR = "/var/run/secrets/gpucluster/providers"
#: The virtual node's own taint: only pods that tolerate it (InferenceService) are ever scheduled there.
NODE_TAINT = VIRTUAL_NODE_TAINT
NODE_LEASE_NAMESPACE = "kube-node-lease"
#: The provider service's own ServiceAccount (the pod's is ``APP``, the node's), and the Secret its token is kept in.
PROVIDER_APP = f"{APP}-provider"
PROVIDER_TOKEN_SECRET = f"{PROVIDER_APP}-token"
#: Where client-go (``rest.InClusterConfig``) and the Python client (``load_incluster_config``) read the in-cluster
#: token, ``ca.crt`` and ``namespace``: each container mounts its own identity here.
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
#: Lifetime asked of the node's projected token (the kubelet renews it at 80%; client-go re-reads the file).
NODE_TOKEN_SECONDS = 3600
#: The node binary's /metrics and /healthz. The provider's API stays on loopback (it has no authentication); its
#: /metrics and /healthz are served on the pod's address too, on PROVIDER_METRICS_PORT.
NODE_METRICS_PORT = 10298
PART_OF = {"app.kubernetes.io/part-of": "gpucluster", "app.kubernetes.io/component": "burst"}


def _rule(groups: list[str], resources: list[str], verbs: list[str], names: list[str] | None = None) -> dict[str, Any]:
    rule: dict[str, Any] = {"apiGroups": groups, "resources": resources, "verbs": verbs}
    if names:
        rule["resourceNames"] = names
    return rule


def cluster_rules(node_name: str) -> list[dict[str, Any]]:
    """The node's, cluster-wide: only what a kubelet-like agent of one Node cannot do namespace by namespace.

    What it calls: virtual-kubelet v1.14.1's node, lease and pod controllers and its event recorder, and our collector
    of replaced Failed pods (``virtualnode/internal/provider/gc.go``). Secrets, ConfigMaps and Services never reach the
    API server (``virtualnode/cmd/gpucluster-virtual-node/client.go``)."""
    return [
        # The node registers its own Node object; create and list/watch cannot be narrowed to a name (the admission
        # rule virtual-node-registers-only-its-node holds create to it).
        _rule([""], ["nodes"], ["create", "list", "watch"]),
        # ... and then reads and updates only that one (capacity, conditions, taints of its own).
        _rule([""], ["nodes"], ["get", "update", "patch"], [node_name]),
        _rule([""], ["nodes/status"], ["update", "patch"], [node_name]),
        # Pods bound to the node can come from any namespace the scheduler allows: the node watches them by
        # spec.nodeName. It writes them only in the inference namespaces (inference_namespace_rules).
        _rule([""], ["pods"], ["get", "list", "watch"]),
        # The library's event recorder (core/v1 Events: created, and patched when repeated).
        _rule([""], ["events"], ["create", "patch"]),
    ]


def lease_rules(node_name: str) -> list[dict[str, Any]]:
    """kube-node-lease: the node heartbeat. Create cannot be narrowed to a name; renewals only touch its own."""
    return [
        _rule(["coordination.k8s.io"], ["leases"], ["create"]),
        _rule(["coordination.k8s.io"], ["leases"], ["get", "update", "patch"], [node_name]),
    ]


def inference_namespace_rules() -> list[dict[str, Any]]:
    """The node's, per inference namespace only, never cluster-wide. No Secret, ConfigMap, Service or EndpointSlice:
    those are the provider's (:func:`provider_inference_namespace_rules`)."""
    return [
        # The library deletes a pod once the provider has let it go; the collector deletes the Failed pods the node
        # ran once their replacement exists.
        _rule([""], ["pods"], ["delete"]),
        # Pod phases and container states copied from the external instance.
        _rule([""], ["pods/status"], ["update", "patch"]),
        # A Failed pod whose ReplicaSet has all the pods it wants (a rollout scaled it to zero) is deleted.
        _rule(["apps"], ["replicasets"], ["get"]),
    ]


def provider_cluster_rules() -> list[dict[str, Any]]:
    """The provider service's, cluster-wide (``daemons/burst_provider/kube.py``): the pods bound to the node, listed by
    ``spec.nodeName`` across namespaces (reconciliation), and the Events it records on them."""
    return [
        _rule([""], ["pods"], ["list"]),
        _rule([""], ["events"], ["create"]),
    ]


def provider_inference_namespace_rules() -> list[dict[str, Any]]:
    """The provider service's, per inference namespace only (``daemons/burst_provider/kube.py``)."""
    return [
        # Env values from ConfigMaps and Secrets are resolved, by name, before a pod's containers go to a provider.
        _rule([""], ["configmaps", "secrets"], ["get"]),
        # The Services external replicas join.
        _rule([""], ["services"], ["list"]),
        # Running pods are annotated with the instance that runs them (address, provider, instance id).
        _rule([""], ["pods"], ["patch"]),
        # An EndpointSlice per Service and provider with the external replicas' addresses: listed, read, created,
        # replaced, deleted.
        _rule(["discovery.k8s.io"], ["endpointslices"], ["create", "get", "list", "update", "delete"]),
    ]


def _resources(cpu: str, memory: str, memory_limit: str) -> dict[str, Any]:
    return {"requests": {"cpu": cpu, "memory": memory}, "limits": {"memory": memory_limit}}


_CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}


def health_probe(port: str, period: int, failures: int) -> dict[str, Any]:
    """The kubelet's ``/healthz`` check on a named container port."""
    return {"httpGet": {"path": "/healthz", "port": port}, "periodSeconds": period, "failureThreshold": failures}


_NAMESPACE_FIELD = {"apiVersion": "v1", "fieldPath": "metadata.namespace"}


def _node_token_volume() -> dict[str, Any]:
    """The node's ServiceAccount token, the cluster CA and the namespace: what the kubelet would mount in every
    container, here for ``node`` alone."""
    return {
        "name": "node-token",
        "projected": {
            "defaultMode": 0o440,
            "sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": NODE_TOKEN_SECONDS}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": dict(_NAMESPACE_FIELD)}]}},
            ],
        },
    }


def virtual_node_pod_spec(
    settings: BurstSettings,
    settings_config_map: str,
    secret_name: str,
    provider_token_secret: str = PROVIDER_TOKEN_SECRET,
) -> dict[str, Any]:
    vn = settings.virtual_node
    provider_url = f"http://127.0.0.1:{vn.port}"
    placement: dict[str, Any] = {}
    if vn.node_selector:
        placement["nodeSelector"] = dict(vn.node_selector)
    if vn.tolerations:
        placement["tolerations"] = [t.to_k8s() for t in vn.tolerations]
    return {
        **placement,
        # The node's identity; no container gets a token unless it mounts one itself (node-token, provider-token).
        "serviceAccountName": APP,
        "automountServiceAccountToken": False,
        "securityContext": nonroot_pod_security_context(fsGroup=NONROOT_UID),
        "terminationGracePeriodSeconds": 30,
        "containers": [
            {
                "name": "node",
                "image": vn.node_image,
                "args": [
                    f"--nodename={vn.node_name}",
                    f"--provider-url={provider_url}",
                    f"--taint={NODE_TAINT}",
                    f"--listen-metrics=:{NODE_METRICS_PORT}",
                ],
                "env": [
                    # The Node's InternalIP (the binary's --node-ip default).
                    {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                ],
                "ports": [{"name": "metrics", "containerPort": NODE_METRICS_PORT, "protocol": "TCP"}],
                "readinessProbe": health_probe("metrics", 10, 3),
                # The node waits for the provider's /healthz and capacity before it registers.
                "livenessProbe": {**health_probe("metrics", 20, 3), "initialDelaySeconds": 60},
                "resources": _resources("50m", "64Mi", "256Mi"),
                "securityContext": _CONTAINER_SECURITY,
                "volumeMounts": [
                    {"name": "node-token", "mountPath": SERVICE_ACCOUNT_DIR, "readOnly": True},
                    {"name": "tmp", "mountPath": "/tmp"},
                ],
            },
            {
                "name": "provider",
                "image": vn.provider_image,
                "command": ["gpucluster-burst-provider"],
                "args": [
                    "--settings",
                    f"{SETTINGS_DIR}/{SETTINGS_FILE}",
                    "--secrets-dir",
                    SECRETS_DIR,
                    "--listen",
                    f"127.0.0.1:{vn.port}",
                    # /metrics and /healthz on the pod's own address, for Prometheus and the kubelet's probes.
                    "--listen-metrics",
                    f"$(POD_IP):{PROVIDER_METRICS_PORT}",
                ],
                "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                "ports": [{"name": "burst-metrics", "containerPort": PROVIDER_METRICS_PORT, "protocol": "TCP"}],
                "resources": _resources("100m", "128Mi", "512Mi"),
                "securityContext": _CONTAINER_SECURITY,
                # Ready once it has rebuilt its state from the providers' listings (its startup grace at most, while
                # a provider's API is down); alive whenever it serves, so that wait never ends in a restart.
                "readinessProbe": health_probe("burst-metrics", 10, 3),
                "livenessProbe": {
                    "httpGet": {"path": PROVIDER_LIVEZ_PATH, "port": "burst-metrics"},
                    "periodSeconds": 20,
                    "failureThreshold": 3,
                    "initialDelaySeconds": 30,
                },
                "volumeMounts": [
                    {"name": "settings", "mountPath": SETTINGS_DIR, "readOnly": True},
                    {"name": "provider-secrets", "mountPath": SECRETS_DIR, "readOnly": True},
                    {"name": "provider-token", "mountPath": SERVICE_ACCOUNT_DIR, "readOnly": True},
                    {"name": "tmp", "mountPath": "/tmp"},
                ],
            },
        ],
        "volumes": [
            {"name": "settings", "configMap": {"name": settings_config_map}},
            # Readable by the pod's group only; each secret becomes a file named after its config key.
            {"name": "provider-secrets", "secret": {"secretName": secret_name, "defaultMode": 0o440}},
            # The root filesystems are read-only; scratch space only.
            {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
            _node_token_volume(),
            # The provider's own token (with ca.crt and namespace), filled by the token controller.
            {"name": "provider-token", "secret": {"secretName": provider_token_secret, "defaultMode": 0o440}},
        ],
    }


def replica_transports(settings: BurstSettings) -> dict[str, str]:
    """Each provider's name -> how traffic to its rented replicas travels (``http`` or ``https``), in settings order."""
    return {p.name: p.replica_transport for p in settings.providers}


@dataclass(frozen=True)
class VirtualNodeArgs:
    settings: BurstSettings
    #: Each secret config key the providers name (``apiKeySecret``, ``kubeconfigSecret``) -> its value, a
    #: Pulumi secret (``pulumi.Config().require_secret(name)``). Exactly the names the settings reference.
    secrets: Mapping[str, pulumi.Input[str]] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    depends_on: tuple[pulumi.Resource, ...] = field(default=())

    def __post_init__(self) -> None:
        if not isinstance(self.settings, BurstSettings):
            raise TypeError(f"VirtualNodeArgs.settings: expected BurstSettings, got {type(self.settings).__name__}")
        if not self.settings.enabled:
            raise ValueError("VirtualNodeArgs.settings: bursting is disabled (enabled: false); build no VirtualNode")
        if not self.settings.providers:
            raise ValueError("VirtualNodeArgs.settings.providers: at least one provider is needed")
        wanted = set(self.settings.secret_names())
        missing = sorted(wanted - set(self.secrets))
        if missing:
            raise ValueError(f"VirtualNodeArgs.secrets: no value for {missing}, which the providers name")
        extra = sorted(set(self.secrets) - wanted)
        if extra:
            raise ValueError(f"VirtualNodeArgs.secrets: {extra} named by no provider; only mount what is read")
        for key in self.labels:
            check_qualified_name(key, "VirtualNodeArgs.labels key")

    @property
    def capacity(self) -> int:
        return sum(p.max_gpus for p in self.settings.providers)


class VirtualNode(pulumi.ComponentResource):
    """Two ServiceAccounts, the node's and the provider's (with its token Secret), each with least-privilege RBAC;
    settings ConfigMap, provider Secret, the two-container Deployment."""

    def __init__(self, name: str, args: VirtualNodeArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpucluster:burst:VirtualNode", name, None, opts)
        vn = args.settings.virtual_node
        ns = vn.namespace
        labels = {**args.labels, **PART_OF, "app.kubernetes.io/name": APP, "gpucluster.io/virtual-node": vn.node_name}
        selector = {"app.kubernetes.io/name": APP, "gpucluster.io/virtual-node": vn.node_name}
        child = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))
        role_name = f"{APP}-{vn.node_name}"

        self.service_account, rbac = daemon_service_account(
            self, f"{name}-sa", app=APP, namespace=ns, labels=labels, depends_on=args.depends_on
        )
        self.cluster_role, self.cluster_role_binding = grant(
            self,
            (f"{name}-clusterrole", f"{name}-clusterrolebinding"),
            name=role_name,
            rules=cluster_rules(vn.node_name),
            **rbac,
        )
        self.roles: dict[str, k8s.rbac.v1.Role] = {}
        self.role_bindings: dict[str, k8s.rbac.v1.RoleBinding] = {}
        role_sets = [(NODE_LEASE_NAMESPACE, lease_rules(vn.node_name))]
        role_sets += [(n, inference_namespace_rules()) for n in vn.inference_namespaces]
        for role_ns, rules in role_sets:
            self.roles[role_ns], self.role_bindings[role_ns] = grant(
                self,
                (f"{name}-role-{role_ns}", f"{name}-rolebinding-{role_ns}"),
                name=role_name,
                namespace=role_ns,
                rules=rules,
                **rbac,
            )

        # The provider service's identity: no pod runs as it, its token reaches the provider container only.
        provider_role = f"{PROVIDER_APP}-{vn.node_name}"
        self.provider_service_account = k8s.core.v1.ServiceAccount(
            f"{name}-provider-sa",
            metadata={"name": PROVIDER_APP, "namespace": ns, "labels": labels},
            automount_service_account_token=False,
            opts=child,
        )
        provider_rbac: dict[str, Any] = {
            "service_account": self.provider_service_account,
            "subject": [{"kind": "ServiceAccount", "name": PROVIDER_APP, "namespace": ns}],
            "labels": labels,
            "depends_on": list(args.depends_on),
        }
        self.provider_cluster_role, self.provider_cluster_role_binding = grant(
            self,
            (f"{name}-provider-clusterrole", f"{name}-provider-clusterrolebinding"),
            name=provider_role,
            rules=provider_cluster_rules(),
            **provider_rbac,
        )
        self.provider_roles: dict[str, k8s.rbac.v1.Role] = {}
        self.provider_role_bindings: dict[str, k8s.rbac.v1.RoleBinding] = {}
        for role_ns in vn.inference_namespaces:
            self.provider_roles[role_ns], self.provider_role_bindings[role_ns] = grant(
                self,
                (f"{name}-provider-role-{role_ns}", f"{name}-provider-rolebinding-{role_ns}"),
                name=provider_role,
                namespace=role_ns,
                rules=provider_inference_namespace_rules(),
                **provider_rbac,
            )
        # A token of PROVIDER_APP, which the token controller writes into the Secret (with ca.crt and namespace); it
        # never expires while the Secret exists. The engine waits for it and keeps it encrypted in state.
        self.provider_token = k8s.core.v1.Secret(
            f"{name}-provider-token",
            metadata={
                "name": PROVIDER_TOKEN_SECRET,
                "namespace": ns,
                "labels": labels,
                "annotations": {"kubernetes.io/service-account.name": PROVIDER_APP},
            },
            type="kubernetes.io/service-account-token",
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[self.provider_service_account, *args.depends_on],
                additional_secret_outputs=["data"],
            ),
        )

        config_name = f"{APP}-settings"
        document = settings_json(with_cluster_name(args.settings, pulumi.get_stack()))
        self.config_map = k8s.core.v1.ConfigMap(
            f"{name}-settings",
            metadata={
                "name": config_name,
                "namespace": ns,
                "labels": {**labels, SETTINGS_LABEL: "burst-provider"},
            },
            data={SETTINGS_FILE: document},
            opts=child,
        )
        secret_name = f"{APP}-provider-secrets"
        self.secret = k8s.core.v1.Secret(
            f"{name}-provider-secrets",
            metadata={"name": secret_name, "namespace": ns, "labels": labels},
            type="Opaque",
            # Always created (the provider's volume needs it), empty while only the fake cloud is used.
            string_data={key: pulumi.Output.secret(value) for key, value in sorted(args.secrets.items())} or None,
            # The values are encrypted in state and never shown in a diff.
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=list(args.depends_on), additional_secret_outputs=["stringData", "data"]
            ),
        )
        self.deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment",
            metadata={"name": APP, "namespace": ns, "labels": labels},
            spec={
                "replicas": 1,
                "strategy": {"type": "Recreate"},
                "selector": {"matchLabels": selector},
                "template": {
                    "metadata": {
                        "labels": labels,
                        # Both containers' metrics ports (``metrics``, ``burst-metrics``): components/scraping.py;
                        # the pod is replaced when its settings change (the provider reads them at start).
                        "annotations": scrape_annotations(NODE_METRICS_PORT) | settings_digest(document),
                    },
                    "spec": virtual_node_pod_spec(args.settings, config_name, secret_name),
                },
            },
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[
                    self.service_account,
                    self.cluster_role_binding,
                    *self.role_bindings.values(),
                    self.provider_token,
                    self.provider_cluster_role_binding,
                    *self.provider_role_bindings.values(),
                    self.config_map,
                    self.secret,
                    *args.depends_on,
                ],
            ),
        )
        self.node_name = vn.node_name
        self.capacity = args.capacity
        #: Provider name -> how traffic to its replicas travels (``ProviderSettings.replica_transport``).
        self.replica_transport = replica_transports(args.settings)
        self.register_outputs(
            {
                "nodeName": vn.node_name,
                "capacity": self.capacity,
                "serviceAccount": APP,
                "providerServiceAccount": PROVIDER_APP,
                "namespace": ns,
                "providers": [p.name for p in args.settings.providers],
                "replicaTransport": self.replica_transport,
            }
        )
