"""Bind the training claims of the simulated cluster: a PersistentVolume for each Pending claim of the stack.

The local stack's claims are dynamically provisioned through a CSI driver that the simulated cluster does not run,
so they would stay Pending, and the scheduler never places a pod that mounts an unbound claim: no training pod
would ever start. ``python sim/claims.py`` (run by ``make up`` after the stack is deployed) creates, for each
Pending ``checkpoints`` and ``datasets`` claim in the stack's team namespaces, a PersistentVolume of the claim's
StorageClass, size and access mode, pre-bound to it (``claimRef``); the PV controller then binds them. kwok runs no
volume plugin, so the volume's source is never mounted: a ``hostPath`` under ``/nonexistent`` says so. Idempotent:
a claim that is bound is left alone.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from components.storage import CLAIMS  # noqa: E402 (run as a script: the repository first on the path)
from sim.processes import DaemonError, kubectl, kubectl_json, stack_config  # noqa: E402


def volume_for(claim: dict[str, Any]) -> dict[str, Any]:
    """A PersistentVolume pre-bound to ``claim``, of its class, size and access modes."""
    meta, spec = claim["metadata"], claim["spec"]
    ns, name = meta["namespace"], meta["name"]
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": f"sim-{ns}-{name}", "labels": {"sim.gpucluster.io/bound-for": f"{ns}.{name}"}},
        "spec": {
            "capacity": {"storage": spec["resources"]["requests"]["storage"]},
            "accessModes": list(spec.get("accessModes") or ["ReadWriteMany"]),
            "storageClassName": spec.get("storageClassName") or "",
            "persistentVolumeReclaimPolicy": "Retain",
            "claimRef": {"namespace": ns, "name": name},
            "hostPath": {"path": f"/nonexistent/{ns}/{name}"},
        },
    }


def pending_claims(namespaces: Sequence[str]) -> list[dict[str, Any]]:
    out = []
    for ns in namespaces:
        for claim in kubectl_json("get", "pvc", "-n", ns).get("items", []):
            bound = (claim.get("status") or {}).get("phase") == "Bound" or claim["spec"].get("volumeName")
            if claim["metadata"]["name"] in CLAIMS and not bound:
                out.append(claim)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="bind the simulated cluster's Pending training claims")
    parser.add_argument("--stack", type=Path, default=None, help="stack file (default: the local stack)")
    args = parser.parse_args(argv)
    try:
        namespaces = stack_config(args.stack).training_namespaces
        claims = pending_claims(namespaces)
        for claim in claims:
            kubectl("apply", "-f", "-", input=json.dumps(volume_for(claim)))
    except DaemonError as e:
        print(f"sim/claims.py: error: {e}", file=sys.stderr)
        return 1
    print(f"==> claims: {len(claims)} Pending training claim(s) given a volume" if claims else "==> claims: all bound")
    return 0


if __name__ == "__main__":
    sys.exit(main())
