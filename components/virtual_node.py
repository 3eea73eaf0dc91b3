"""VirtualNode: the Node inference bursts to, and the provider service that rents the GPUs behind it.

One pod, two containers talking over loopback (docs/burst-provider-api.md):

* ``node`` — the virtual-kubelet binary: owns the Node object, its lease and the pods bound to it;
* ``provider`` — ``gpucluster-burst-provider``: picks a provider per pod, runs it there, keeps EndpointSlices.

Only ``provider`` mounts the provider credentials. The Deployment has one replica and the ``Recreate`` strategy:
two pods claiming the same Node at once would fight over its status and double-create instances.
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
    """Cluster-wide: only what a kubelet-like agent of one Node cannot do namespace by namespace."""
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
        # Events on the pods it runs (ProviderTimeout, InstanceVanished, ...).
        _rule(["", "events.k8s.io"], ["events"], ["create", "patch"]),
    ]


def lease_rules(node_name: str) -> list[dict[str, Any]]:
    """kube-node-lease: the node heartbeat. Create cannot be narrowed to a name; renewals only touch its own."""
    return [
        _rule(["coordination.k8s.io"], ["leases"], ["create"]),
        _rule(["coordination.k8s.io"], ["leases"], ["get", "update", "patch"], [node_name]),
    ]


def inference_namespace_rules() -> list[dict[str, Any]]:
    """Per inference namespace only, never cluster-wide."""
    return [
        # Env values from ConfigMaps and Secrets are resolved before a pod's containers go to a provider.
        _rule([""], ["configmaps", "secrets"], ["get", "list", "watch"]),
        # Service environment variables of the pod, and the Services external replicas join.
        _rule([""], ["services"], ["get", "list", "watch"]),
        # The node deletes the Failed pods it created once their replacement exists, and the provider annotates
        # them with the instance that runs them.
        _rule([""], ["pods"], ["delete", "patch"]),
        # Pod phases and container states copied from the external instance.
        _rule([""], ["pods/status"], ["update", "patch"]),
        # A Failed pod whose ReplicaSet has all the pods it wants (a rollout scaled it to zero) is deleted.
        _rule(["apps"], ["replicasets"], ["get"]),
        # The provider keeps an EndpointSlice per Service with the external replicas' addresses.
        _rule(
            ["discovery.k8s.io"],
            ["endpointslices"],
            ["create", "get", "list", "watch", "update", "patch", "delete"],
        ),
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


def virtual_node_pod_spec(settings: BurstSettings, settings_config_map: str, secret_name: str) -> dict[str, Any]:
    vn = settings.virtual_node
    provider_url = f"http://127.0.0.1:{vn.port}"
    placement: dict[str, Any] = {}
    if vn.node_selector:
        placement["nodeSelector"] = dict(vn.node_selector)
    if vn.tolerations:
        placement["tolerations"] = [t.to_k8s() for t in vn.tolerations]
    return {
        **placement,
        "serviceAccountName": APP,
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
                "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
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
        ],
    }


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
    """ServiceAccount and least-privilege RBAC, settings ConfigMap, provider Secret, the two-container Deployment."""

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
                    self.config_map,
                    self.secret,
                    *args.depends_on,
                ],
            ),
        )
        self.node_name = vn.node_name
        self.capacity = args.capacity
        self.register_outputs(
            {
                "nodeName": vn.node_name,
                "capacity": self.capacity,
                "serviceAccount": APP,
                "namespace": ns,
                "providers": [p.name for p in args.settings.providers],
            }
        )
