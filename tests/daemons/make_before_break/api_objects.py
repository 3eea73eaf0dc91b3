"""API objects shaped like the API server's replies (Nodes, Pods, a Deployment, a Kueue Workload, a flavor)."""

from __future__ import annotations

from typing import Any

from contract.make_before_break_settings import MakeBeforeBreakSettings
from daemons.make_before_break.observe import RawLists

S = MakeBeforeBreakSettings()
KEY = "gpucluster.io/reservation"
UID = "0b7c3f4e-8d1a-4c52-9a6e-2f1e3d4c5b6a"
T0 = "2026-12-01T10:00:00Z"
T0_S = 1796119200.0


def node(name: str, gpus: str | None = "8", *, ready: str = "True", taints: list[Any] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": "41",
            "labels": {"gpu": "h100"},
            "creationTimestamp": T0,
        },
        "spec": {},
        "status": {
            "allocatable": {"cpu": "96", **({"nvidia.com/gpu": gpus} if gpus is not None else {})},
            "conditions": [{"type": "Ready", "status": ready, "lastTransitionTime": T0}],
        },
    }
    if taints is not None:
        obj["spec"]["taints"] = taints
    return obj


def pod(
    ns: str, name: str, node_name: str, gpus: int = 8, *, rs: str | None = "server-5d8f9", **extra: Any
) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": ns, "name": name, "labels": {"pod-template-hash": "5d8f9"}}
    if rs:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs, "controller": True}]
    meta.update(extra.pop("metadata", {}))
    return {
        "metadata": meta,
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {"phase": extra.pop("phase", "Running")},
    }


def deployment(name: str = "server", **annotations: str) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "inference", "name": name, "generation": 3, "annotations": annotations},
        "spec": {
            "replicas": 4,
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}},
            "template": {
                "metadata": {"annotations": {"gpucluster.io/placement-epoch": "abc"}},
                "spec": {"containers": [{"name": "s", "resources": {"requests": {"nvidia.com/gpu": 1}}}]},
            },
        },
        "status": {"observedGeneration": 3, "replicas": 4, "updatedReplicas": 4, "availableReplicas": 3},
    }


def workload(state: str = "Pending", *, quota: bool = True) -> dict[str, Any]:
    conditions = [{"type": "QuotaReserved", "status": "True" if quota else "False", "lastTransitionTime": T0}]
    status: dict[str, Any] = {
        "conditions": conditions,
        "admissionChecks": [
            {"name": "make-before-break", "state": state, "message": "", "lastTransitionTime": T0},
            {"name": "other", "state": "Ready", "message": "", "lastTransitionTime": T0},
        ],
    }
    if quota:
        status["admission"] = {
            "clusterQueue": "training",
            "podSetAssignments": [{"name": "workers", "count": 2, "flavors": {"nvidia.com/gpu": "h100"}}],
        }
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"namespace": "team-a", "name": "job-train", "uid": UID, "resourceVersion": "77"},
        "spec": {
            "podSets": [
                {
                    "name": "workers",
                    "count": 4,
                    "template": {
                        "spec": {"containers": [{"name": "w", "resources": {"requests": {"nvidia.com/gpu": "8"}}}]}
                    },
                }
            ]
        },
        "status": status,
    }


FLAVOR = {"metadata": {"name": "h100"}, "spec": {"nodeLabels": {"gpu": "h100"}}}


def raw(**kw: Any) -> RawLists:
    base: dict[str, Any] = {
        "nodes": [
            node("n1"),
            node("cpu-1", None),
            node("gpu-burst", "64", taints=[{"key": S.burst_taint_key, "effect": "NoSchedule"}]),
        ],
        "pods": [
            pod(
                "inference",
                "server-5d8f9-a",
                "n1",
                1,
                metadata={"annotations": {"gpucluster.io/placement-epoch": "abc"}},
            ),
            pod("training", "other-0", "n1", 2, rs=None),
            pod("inference", "done", "n1", 1, phase="Succeeded"),
            pod("inference", "cpu", "n1", 0),
            pod("inference", "on-cpu-node", "cpu-1", 1),
        ],
        "deployments": [deployment(**{"gpucluster.io/flips": f"{UID}", "gpucluster.io/flip-phase": "moved"})],
        "workloads": [workload(), {**workload(), "status": {"admissionChecks": []}}],
        "flavors": [FLAVOR],
    }
    base.update(kw)
    return RawLists(**base)
