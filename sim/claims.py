"""The simulated cluster's stand-in for the stack's storage driver: its CSIDriver object, and a volume for each claim.

``python sim/claims.py --register-driver`` (``make up``, before ``pulumi up``) creates the CSIDriver object that
installing the stack's driver registers (named by ``gpucluster:storage.provisioner``), so the stack's prerequisites
check (``components/prerequisites.py``) finds the driver a real cluster would have; no node plugin of it runs here.

The local stack's claims are dynamically provisioned through a CSI driver that the simulated cluster does not run,
so they would stay Pending, and the scheduler never places a pod that mounts an unbound claim: no training pod
would ever start. ``python sim/claims.py`` (run by ``make up`` after the stack is deployed) creates, for each
Pending ``checkpoints`` and ``datasets`` claim in the stack's team namespaces, a PersistentVolume of the claim's
StorageClass, size and access mode, pre-bound to it (``claimRef``); the PV controller then binds them. Its source is
a directory of this machine (``.state/sim/volumes/<namespace>/<claim>``, a ``hostPath``; it goes with the cluster):
kwok's nodes mount nothing, and the real node's kubelet mounts it into the pods scheduled there (the checkpoint
verifier's check pods), while the fake trainer writes its checkpoints into it as a job's ranks write theirs into
the shared filesystem (:func:`host_directory` finds it from the claim). What it does not model: a network
filesystem's latency, bandwidth or failures (the fabric exporter's filesystem collector is held to real captured
files instead). Idempotent: a claim that is bound is left alone.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from components.storage import CLAIMS  # noqa: E402 (run as a script: the repository first on the path)
from sim.processes import DaemonError, kubectl, kubectl_json, stack_config  # noqa: E402

#: Where the volumes' directories are: under the cluster's own state, so they go with it (make sim-down).
VOLUMES = ROOT / ".state" / "sim" / "volumes"


#: How long the PV controller may take to bind the claims given a volume.
BIND_TIMEOUT_S = 120.0


def volume_directory(namespace: str, claim: str) -> Path:
    return VOLUMES / namespace / claim


def host_directory(volume: dict[str, Any]) -> Path | None:
    """The directory of this machine behind a PersistentVolume this module made; None for any other volume (one
    bound before its source was a real directory, or a driver's)."""
    path = ((volume.get("spec") or {}).get("hostPath") or {}).get("path")
    if not isinstance(path, str):
        return None
    found = Path(path)
    return found if found.is_relative_to(VOLUMES) and found.is_dir() else None


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
            "hostPath": {"path": str(volume_directory(ns, name)), "type": "Directory"},
        },
    }


def csi_driver(provisioner: str) -> dict[str, Any]:
    """The CSIDriver object a CSI driver's installation registers under its name: volumes need no attach step (a
    network filesystem's driver mounts on the node)."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSIDriver",
        "metadata": {"name": provisioner, "labels": {"sim.gpucluster.io/stands-in": "true"}},
        "spec": {"attachRequired": False, "podInfoOnMount": False, "volumeLifecycleModes": ["Persistent"]},
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
    parser.add_argument(
        "--register-driver", action="store_true", help="only register the stack's CSIDriver object (before the stack)"
    )
    args = parser.parse_args(argv)
    if args.register_driver:
        try:
            provisioner = stack_config(args.stack).storage.provisioner
            kubectl("apply", "-f", "-", input=json.dumps(csi_driver(provisioner)))
        except DaemonError as e:
            print(f"sim/claims.py: error: {e}", file=sys.stderr)
            return 1
        print(f"==> CSIDriver {provisioner} registered (no node plugin runs on the simulated nodes)")
        return 0
    try:
        namespaces = stack_config(args.stack).training_namespaces
        claims = pending_claims(namespaces)
        for claim in claims:
            directory = volume_directory(claim["metadata"]["namespace"], claim["metadata"]["name"])
            directory.mkdir(parents=True, exist_ok=True)
            directory.chmod(0o755)
            kubectl("apply", "-f", "-", input=json.dumps(volume_for(claim)))
        # The PV controller binds them on its next sync: done means bound, so a test reading a claim's volume
        # right after `make up` finds it.
        deadline = time.monotonic() + BIND_TIMEOUT_S
        while claims and (waiting := pending_claims(namespaces)):
            if time.monotonic() > deadline:
                names = ", ".join(f"{c['metadata']['namespace']}/{c['metadata']['name']}" for c in waiting)
                print(
                    f"sim/claims.py: error: not bound {BIND_TIMEOUT_S:.0f} s after their volumes: {names}",
                    file=sys.stderr,
                )
                return 1
            time.sleep(0.5)
    except DaemonError as e:
        print(f"sim/claims.py: error: {e}", file=sys.stderr)
        return 1
    print(
        f"==> claims: {len(claims)} Pending training claim(s) given a volume and bound"
        if claims
        else "==> claims: all bound"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
