"""Checkpoints and datasets on the parallel filesystem, and how often to checkpoint.

Driver-agnostic: Lustre, WEKA, VAST, GPFS/Spectrum Scale, NFS or CephFS (ceph-csi: its cluster, filesystem and
Secrets from ``storage.ceph``), each reached through its CSI driver — either a
StorageClass that provisions volumes (``mode: dynamic``) or pre-created filesets bound as static
PersistentVolumes (``mode: static``). Every training namespace gets a ``checkpoints`` and a ``datasets`` claim,
both ReadWriteMany so every rank of a gang mounts the same tree; checkpoints are retained when a claim goes.
Training pods run as the namespace's ``gpucluster-trainer`` ServiceAccount, which may read and annotate the
``checkpoints`` claim (the checkpoint report, ``checkpoint.gpucluster.io/<job>``) and nothing else. Each namespace
also gets the ``checkpoint-resume`` ConfigMap, created empty: the checkpoint verifier writes each job's latest
verified checkpoint into it and the job's pods mount their entry (Pulumi never takes its data back).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from components.rbac import grant
from contract.constants import (
    CHECKPOINT_CLAIM,
    CLAIM_LABEL,
    RESUME_CONFIGMAP,
    STORAGE_DRIVER_LABEL,
    TRAINER_SERVICE_ACCOUNT,
)
from contract.storage_settings import Claim, StorageSettings, checkpoint_interval_seconds

CLAIMS = (CHECKPOINT_CLAIM, "datasets")
#: What a training pod may do with the API: annotate its team's checkpoints claim with the checkpoint report.
CHECKPOINT_REPORT_RULES = (
    {
        "apiGroups": [""],
        "resources": ["persistentvolumeclaims"],
        "resourceNames": [CHECKPOINT_CLAIM],
        "verbs": ["get", "patch"],
    },
)


@dataclass(frozen=True)
class StorageArgs:
    settings: StorageSettings
    namespaces: Sequence[str]
    labels: Mapping[str, str] = field(default_factory=dict)
    #: Namespace resources created elsewhere; claims wait for them.
    namespace_resources: Mapping[str, pulumi.Resource] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.namespaces:
            raise ValueError("StorageArgs.namespaces: at least one training namespace needs claims")
        if len(set(self.namespaces)) != len(self.namespaces):
            raise ValueError(f"StorageArgs.namespaces: duplicates in {list(self.namespaces)}")
        if self.settings.mode == "static" and not self.settings.volume_handle_prefix:
            raise ValueError("StorageArgs.settings.volumeHandlePrefix: static mode needs it")


def checkpoint_cadence_minutes(settings: StorageSettings) -> float:
    """Young/Daly interval for the configured checkpoint write time and failure rate, in minutes, for a job of
    ``mtbfJobNodes`` nodes (the size the prior ``mtbfHours`` is stated for)."""
    c = settings.checkpointing
    return checkpoint_interval_seconds(c.write_seconds, c.mtbf_hours * 3600.0) / 60.0


def checkpoint_write_gbps(settings: StorageSettings) -> float:
    """The write bandwidth one checkpoint needs: ``sizeTb`` in ``writeSeconds``, in GB/s (1 TB in 30 s: 33.3)."""
    c = settings.checkpointing
    return c.size_tb * 1000.0 / c.write_seconds


class Storage(pulumi.ComponentResource):
    """The parallel-FS StorageClass (or static PVs) and the per-namespace RWX claims."""

    def __init__(self, name: str, args: StorageArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpucluster:storage:Storage", name, None, opts)
        s = args.settings
        labels = {**args.labels, STORAGE_DRIVER_LABEL: s.driver}

        self.storage_class = k8s.storage.v1.StorageClass(
            f"{name}-class",
            metadata={"name": s.storage_class_name, "labels": labels},
            provisioner=s.provisioner,
            parameters={**s.parameters, **(s.ceph.storage_class_parameters() if s.ceph else {})} or None,
            mount_options=list(s.mount_options) or None,
            reclaim_policy="Retain",
            volume_binding_mode="Immediate",
            allow_volume_expansion=True,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.volumes: dict[str, k8s.core.v1.PersistentVolume] = {}
        self.claims: dict[str, k8s.core.v1.PersistentVolumeClaim] = {}
        for ns in args.namespaces:
            for claim_name in CLAIMS:
                claim: Claim = getattr(s, claim_name)
                key = f"{ns}/{claim_name}"
                deps: list[pulumi.Resource] = [self.storage_class]
                if ns in args.namespace_resources:
                    deps.append(args.namespace_resources[ns])
                volume_name = None
                if s.mode == "static":
                    volume_name = f"{s.storage_class_name}-{ns}-{claim_name}"
                    handle = f"{s.volume_handle_prefix}/{ns}/{claim_name}"
                    attributes = {**s.volume_attributes, **(s.ceph.static_volume_attributes(handle) if s.ceph else {})}
                    node_secret = s.ceph.node_secret if s.ceph else None
                    self.volumes[key] = k8s.core.v1.PersistentVolume(
                        f"{name}-pv-{ns}-{claim_name}",
                        metadata=k8s.meta.v1.ObjectMetaArgs(name=volume_name, labels=labels),
                        spec=k8s.core.v1.PersistentVolumeSpecArgs(
                            access_modes=["ReadWriteMany"],
                            capacity={"storage": claim.size},
                            persistent_volume_reclaim_policy="Retain",
                            storage_class_name=s.storage_class_name,
                            mount_options=list(s.mount_options) or None,
                            claim_ref=k8s.core.v1.ObjectReferenceArgs(namespace=ns, name=claim_name),
                            csi=k8s.core.v1.CSIPersistentVolumeSourceArgs(
                                driver=s.provisioner,
                                volume_handle=handle,
                                volume_attributes=attributes or None,
                                node_stage_secret_ref=k8s.core.v1.SecretReferenceArgs(
                                    name=node_secret.name, namespace=node_secret.namespace
                                )
                                if node_secret
                                else None,
                                read_only=claim.read_only,
                            ),
                        ),
                        opts=pulumi.ResourceOptions(parent=self, depends_on=[self.storage_class]),
                    )
                    deps.append(self.volumes[key])
                self.claims[key] = k8s.core.v1.PersistentVolumeClaim(
                    f"{name}-pvc-{ns}-{claim_name}",
                    metadata=k8s.meta.v1.ObjectMetaArgs(
                        name=claim_name,
                        namespace=ns,
                        labels={**labels, CLAIM_LABEL: claim_name},
                        # A dynamically provisioned claim binds asynchronously (or never, on a simulated cluster).
                        annotations={"pulumi.com/skipAwait": "true"},
                    ),
                    spec=k8s.core.v1.PersistentVolumeClaimSpecArgs(
                        access_modes=["ReadWriteMany"],
                        storage_class_name=s.storage_class_name,
                        resources=k8s.core.v1.VolumeResourceRequirementsArgs(requests={"storage": claim.size}),
                        volume_name=volume_name,
                    ),
                    opts=pulumi.ResourceOptions(parent=self, depends_on=deps),
                )
        self.trainer_accounts: dict[str, k8s.core.v1.ServiceAccount] = {}
        self.resume: dict[str, k8s.core.v1.ConfigMap] = {}
        for ns in args.namespaces:
            deps = [args.namespace_resources[ns]] if ns in args.namespace_resources else []
            self.resume[ns] = k8s.core.v1.ConfigMap(
                f"{name}-resume-{ns}",
                metadata={"name": RESUME_CONFIGMAP, "namespace": ns, "labels": dict(args.labels)},
                # The checkpoint verifier writes its entries; an update of the stack leaves them.
                opts=pulumi.ResourceOptions(parent=self, depends_on=deps, ignore_changes=["data"]),
            )
            account = k8s.core.v1.ServiceAccount(
                f"{name}-trainer-{ns}",
                metadata={"name": TRAINER_SERVICE_ACCOUNT, "namespace": ns, "labels": dict(args.labels)},
                opts=pulumi.ResourceOptions(parent=self, depends_on=deps),
            )
            self.trainer_accounts[ns] = account
            grant(
                self,
                (f"{name}-checkpoint-report-{ns}", f"{name}-checkpoint-report-binding-{ns}"),
                name="gpucluster-checkpoint-report",
                rules=CHECKPOINT_REPORT_RULES,
                service_account=account,
                subject=[{"kind": "ServiceAccount", "name": TRAINER_SERVICE_ACCOUNT, "namespace": ns}],
                labels=args.labels,
                namespace=ns,
                depends_on=deps,
            )
        self.checkpoint_interval_minutes = checkpoint_cadence_minutes(s)
        self.register_outputs(
            {
                "storageClass": s.storage_class_name,
                "claims": sorted(self.claims),
                "checkpointIntervalMinutes": round(self.checkpoint_interval_minutes, 1),
                # What the filesystem must sustain for one checkpoint of sizeTb in writeSeconds.
                "checkpointWriteGBps": round(checkpoint_write_gbps(s), 1),
            }
        )
