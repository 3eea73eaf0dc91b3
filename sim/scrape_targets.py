"""Service discovery for the simulated cluster's Prometheus: the pods of the real node, scraped by the stack's contract.

Debian's Prometheus is built without Kubernetes service discovery (``kubernetes_sd_configs`` is refused), so this
stands in for it: it lists the pods the API server has on the real node (``sim/node.py``), reads each pod's scrape
contract with the same code the stack's own checks use (``components.scraping``: the annotations, the ports named
``metrics`` or ``*-metrics``, ``job`` from ``app.kubernetes.io/name``, honour-labels by annotation) and writes
Prometheus file-based discovery files, one per honour-labels setting (a scrape job's setting, not a target's).

Every target the contract names is written, at the pod's address, whether or not its program listens there: a pod
whose arguments bind its metrics port to loopback is scraped and found down (``up == 0``), exactly as a real
Prometheus would find it. Pods on kwok nodes are left out (nothing runs there; their addresses are made up).

``python sim/scrape_targets.py --out DIR`` writes once; ``--every SECONDS`` keeps writing (a file is replaced only
when its content changes, atomically, so Prometheus never reads half of one).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from components.scraping import annotated_targets
from sim.node import REAL_NODE_KEY

#: The discovery file of each honour-labels setting, in the directory Prometheus reads.
FILES = {False: "pods.json", True: "pods-honor-labels.json"}


def real_nodes(nodes: Iterable[Mapping[str, Any]]) -> set[str]:
    """The names of the nodes that run pods for real (labelled by sim/node.py)."""
    return {
        str(n["metadata"]["name"])
        for n in nodes
        if (n.get("metadata", {}).get("labels") or {}).get(REAL_NODE_KEY) == "true"
    }


def pod_groups(pods: Iterable[Mapping[str, Any]], nodes: set[str]) -> dict[bool, list[dict[str, Any]]]:
    """Prometheus file-discovery groups of the running pods on ``nodes``, by honour-labels setting."""
    groups: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
    for pod in pods:
        meta = pod.get("metadata", {}) or {}
        status = pod.get("status", {}) or {}
        ip = status.get("podIP")
        if pod.get("spec", {}).get("nodeName") not in nodes or status.get("phase") != "Running" or not ip:
            continue
        # The contract is read from a pod template; a running pod carries the same metadata and spec.
        as_workload = {
            "kind": "Pod",
            "metadata": meta,
            "spec": {"template": {"metadata": meta, "spec": pod.get("spec", {})}},
        }
        for target in annotated_targets(as_workload):
            labels = {
                "job": target.job,
                "__metrics_path__": target.path,
                "namespace": str(meta.get("namespace", "")),
                "pod": str(meta.get("name", "")),
                "container": target.container,
            }
            groups[target.honor_labels].append({"targets": [f"{ip}:{target.port}"], "labels": labels})
    for entries in groups.values():
        entries.sort(key=lambda g: (g["labels"]["job"], g["labels"]["pod"], g["targets"][0]))
    return groups


def _kubectl_items(kubectl: Sequence[str], kind: str) -> list[dict[str, Any]]:
    argv = [*kubectl, "get", kind, "-A", "-o", "json"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"kubectl get {kind}: {done.stderr.strip()[:300]}")
    items: list[dict[str, Any]] = json.loads(done.stdout).get("items", [])
    return items


def write(out: Path, groups: Mapping[bool, list[dict[str, Any]]]) -> list[str]:
    """Replace each discovery file whose content changed; the files written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for honor, name in FILES.items():
        path = out / name
        text = json.dumps(groups.get(honor, []), indent=2, sort_keys=True) + "\n"
        if path.is_file() and path.read_text(encoding="utf-8") == text:
            continue
        tmp = path.with_name(path.name + ".partial")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
        written.append(name)
    return written


def once(kubectl: Sequence[str], out: Path) -> list[str]:
    nodes = real_nodes(_kubectl_items(kubectl, "nodes"))
    return write(out, pod_groups(_kubectl_items(kubectl, "pods"), nodes))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sim/scrape_targets.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the directory Prometheus reads discovery files from")
    parser.add_argument("--kubectl", default="kubectl", help="the kubectl to list pods and nodes with")
    parser.add_argument("--kubeconfig", help="the cluster's kubeconfig (default: kubectl's)")
    parser.add_argument("--every", type=float, default=0.0, help="keep writing every SECONDS (default: once)")
    args = parser.parse_args(argv)
    kubectl = [args.kubectl, *(["--kubeconfig", args.kubeconfig] if args.kubeconfig else [])]
    while True:
        try:
            written = once(kubectl, args.out)
            if written:
                print(f"scrape targets: wrote {', '.join(written)}", flush=True)
        except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as exc:
            # The files stay as they were: Prometheus keeps scraping the last pods it knew.
            print(f"scrape targets: {exc}", file=sys.stderr, flush=True)
            if not args.every:
                return 1
        if not args.every:
            return 0
        time.sleep(args.every)


if __name__ == "__main__":
    sys.exit(main())
