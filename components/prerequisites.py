"""What a stack needs of the cluster before ``pulumi up`` can leave a gang anything but Pending, and which of it a
cluster lacks.

The stack deploys queues, flavors and claims that name things only a cluster add-on provides: each flavor's GPU
resource (the NVIDIA device plugin or GPU Operator advertises ``nvidia.com/gpu``), the RDMA resource a flavor's
fabric asks for (an RDMA device plugin or the Network Operator), the CSI driver its storage provisions through.
Without one, every object applies cleanly and every gang waits forever. :func:`requirements` lists them from the
stack; :func:`missing` holds them against what the cluster reports (its Nodes' allocatable, its CSIDriver objects).
An add-on the stack installs itself (``gpucluster:prerequisites``' operators) is not asked of the cluster.

Pure: the cluster's facts are passed in (``components/preflight.py`` reads them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from components.config import StackConfig

Kind = Literal["resource", "csi-driver"]


@dataclass(frozen=True)
class Requirement:
    """One add-on the stack needs: a resource some Node must advertise, or a CSI driver the cluster must have."""

    kind: Kind
    name: str
    #: Who needs it, as the stack names it (``flavor h100``, ``gpucluster:storage``).
    needed_by: tuple[str, ...]
    #: What provides it, for the message.
    provider: str


@dataclass(frozen=True)
class ClusterFacts:
    """What the cluster reports: each Node's allocatable resources (name -> quantity), the CSI drivers it has."""

    allocatable: Mapping[str, Mapping[str, str]]
    csi_drivers: frozenset[str]


def facts_from(node_list: Mapping[str, Any], csi_driver_list: Mapping[str, Any]) -> ClusterFacts:
    """The facts of a NodeList and a CSIDriverList as the API server returns them (JSON objects)."""
    allocatable = {
        str(n.get("metadata", {}).get("name")): {
            str(k): str(v) for k, v in ((n.get("status") or {}).get("allocatable") or {}).items()
        }
        for n in node_list.get("items") or []
    }
    drivers = frozenset(str(d.get("metadata", {}).get("name")) for d in csi_driver_list.get("items") or [])
    return ClusterFacts(allocatable=allocatable, csi_drivers=drivers)


def requirements(cfg: StackConfig) -> list[Requirement]:
    """The add-ons ``cfg`` needs of the cluster, each once, with every part of the stack that needs it."""
    needs: dict[tuple[Kind, str], tuple[list[str], str]] = {}

    def need(kind: Kind, name: str, who: str, provider: str) -> None:
        needs.setdefault((kind, name), ([], provider))[0].append(who)

    operators = cfg.prerequisites
    for flavor in cfg.flavors:
        if not operators.gpu_operator.install:
            need("resource", flavor.gpu_resource, f"flavor {flavor.name}", "the NVIDIA device plugin or GPU Operator")
        rdma = flavor.fabric.rdma_resource if flavor.fabric is not None else None
        if rdma and not operators.network_operator.install:
            need("resource", rdma, f"flavor {flavor.name}'s fabric", "an RDMA device plugin or the Network Operator")
    need("csi-driver", cfg.storage.provisioner, "gpucluster:storage", f"the {cfg.storage.driver} CSI driver")
    return [Requirement(kind, name, tuple(who), provider) for (kind, name), (who, provider) in needs.items()]


def _advertised(quantity: str) -> bool:
    """A Node's allocatable quantity is more than none (``0``, ``0k``, ``0Mi`` are none)."""
    digits = quantity.strip().rstrip("kKMGTPEi m")
    try:
        return float(digits or "0") > 0
    except ValueError:
        return False


def missing(required: Iterable[Requirement], facts: ClusterFacts) -> list[str]:
    """One line per requirement the cluster does not meet, naming it, who needs it and what provides it."""
    problems = []
    for r in required:
        who = ", ".join(r.needed_by)
        if r.kind == "resource":
            if not any(_advertised(a.get(r.name, "0")) for a in facts.allocatable.values()):
                problems.append(
                    f"no node advertises {r.name} (needed by {who}): install {r.provider}, "
                    f"or check the nodes' allocatable (kubectl describe node)"
                )
        elif r.name not in facts.csi_drivers:
            problems.append(
                f"the cluster has no CSIDriver {r.name} (needed by {who}): install {r.provider} "
                f"(kubectl get csidrivers lists those installed)"
            )
    return problems
