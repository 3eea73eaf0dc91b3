"""A short summary of the simulated cluster as the API server sees it: nodes and GPUs, the real node's pods with the
image digest each runs, queues, priorities, storage.

``python sim/summary.py`` (KUBECONFIG set, kubectl on PATH). Reads only; every figure comes from live objects.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sim.node import REAL_NODE_KEY

GPU_RESOURCE_SUFFIX = "/gpu"


def kubectl_items(*args: str) -> list[dict[str, Any]]:
    try:
        proc = subprocess.run(["kubectl", "get", *args, "-o", "json"], capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise RuntimeError("kubectl not found on PATH: run make tools (sim/env.sh puts them on PATH)") from None
    if proc.returncode != 0:
        raise RuntimeError(f"kubectl get {' '.join(args)}: {proc.stderr.strip()}")
    items = json.loads(proc.stdout).get("items", [])
    return list(items)


def gpus(resources: dict[str, str]) -> int:
    return sum(int(v) for k, v in resources.items() if k.endswith(GPU_RESOURCE_SUFFIX))


def condition(obj: dict[str, Any], kind: str) -> str:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return str(c.get("status"))
    return "Unknown"


def real_pods(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> list[str]:
    """Each real node, then each pod on it with its phase, readiness and the image digest each container runs."""
    lines = []
    for n in nodes:
        name = n["metadata"]["name"]
        info = (n.get("status") or {}).get("nodeInfo") or {}
        lines.append(
            f"node      {name} (real: kubelet {info.get('kubeletVersion', '?')}, "
            f"{info.get('containerRuntimeVersion', '?')}); Ready={condition(n, 'Ready')}"
        )
        for pod in sorted(pods, key=lambda q: (q["metadata"]["namespace"], q["metadata"]["name"])):
            if (pod.get("spec") or {}).get("nodeName") != name:
                continue
            status = pod.get("status") or {}
            images = ", ".join(
                str(c.get("imageID") or c.get("image") or "?") for c in status.get("containerStatuses") or []
            )
            lines.append(
                f"pod       {pod['metadata']['namespace']}/{pod['metadata']['name']} on {name}: "
                f"{status.get('phase', '?')}, Ready={condition(pod, 'Ready')}; {images or 'no container started'}"
            )
    return lines


def summary() -> list[str]:
    lines: list[str] = []
    nodes = kubectl_items("nodes", "-l", "gpucluster.io/flavor")
    by_flavor: dict[str, list[dict[str, Any]]] = {}
    for n in nodes:
        by_flavor.setdefault(n["metadata"]["labels"]["gpucluster.io/flavor"], []).append(n)
    for flavor, members in sorted(by_flavor.items()):
        total = sum(gpus((n.get("status") or {}).get("allocatable") or {}) for n in members)
        ready = sum(condition(n, "Ready") == "True" for n in members)
        lines.append(f"nodes     {flavor}: {len(members)} ({ready} Ready), {total} GPUs allocatable")
    lines += real_pods(kubectl_items("nodes", "-l", f"{REAL_NODE_KEY}=true"), kubectl_items("pods", "-A"))
    for cq in kubectl_items("clusterqueues.kueue.x-k8s.io"):
        quota = [
            f"{f['name']}={r['nominalQuota']}"
            for g in cq["spec"].get("resourceGroups", [])
            for f in g["flavors"]
            for r in f["resources"]
        ]
        lines.append(
            f"queue     ClusterQueue {cq['metadata']['name']} (cohort {cq['spec'].get('cohortName', '-')}): "
            f"GPU quota {', '.join(quota)}; Active={condition(cq, 'Active')}"
        )
    for lq in kubectl_items("localqueues.kueue.x-k8s.io", "-A"):
        lines.append(
            f"queue     LocalQueue {lq['metadata']['namespace']}/{lq['metadata']['name']} -> "
            f"{lq['spec']['clusterQueue']}; Active={condition(lq, 'Active')}"
        )
    wpcs = sorted(kubectl_items("workloadpriorityclasses.kueue.x-k8s.io"), key=lambda w: -int(w["value"]))
    lines.append("priority  workload: " + ", ".join(f"{w['metadata']['name']}={w['value']}" for w in wpcs))
    pcs = sorted(kubectl_items("priorityclasses", "-l", "gpucluster.io/tier"), key=lambda p: -int(p["value"]))
    lines.append(
        "priority  pod: "
        + ", ".join(
            f"{p['metadata']['name']}={p['value']} ({p['metadata']['labels']['gpucluster.io/tier']})" for p in pcs
        )
    )
    for sc in kubectl_items("storageclasses", "-l", "app.kubernetes.io/part-of=gpucluster"):
        lines.append(f"storage   StorageClass {sc['metadata']['name']} ({sc['provisioner']})")
    for pvc in kubectl_items("pvc", "-A", "-l", "app.kubernetes.io/part-of=gpucluster"):
        spec = pvc["spec"]
        lines.append(
            f"storage   PVC {pvc['metadata']['namespace']}/{pvc['metadata']['name']}: "
            f"{spec['resources']['requests']['storage']} {','.join(spec['accessModes'])} "
            f"({(pvc.get('status') or {}).get('phase', '?')})"
        )
    return lines


def main() -> int:
    try:
        lines = summary()
    except (RuntimeError, KeyError, ValueError) as exc:
        print(f"sim/summary.py: cannot summarise the cluster: {exc}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
