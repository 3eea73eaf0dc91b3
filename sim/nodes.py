"""The fake GPU nodes of the simulated cluster, built from a stack's GPU inventory.

``python sim/nodes.py [STACK_FILE]`` prints a Kubernetes ``List`` of Node objects (JSON) for ``kubectl
apply``: for every flavor in the stack's ``gpucluster:flavors``, ``nodeCount`` nodes named
``<flavor>-node-<i>`` carrying the flavor's node labels, ``gpucluster.io/flavor=<flavor>``, the acceptance label
``gpucluster.io/accepted=true``, ``gpusPerNode``
GPUs of the flavor's GPU resource (``nvidia.com/gpu`` unless it says otherwise) plus CPU, memory and pod
capacity, one taint per flavor toleration (so the toleration means something), and the annotation that
makes kwok manage them. ``--status NAME`` prints only the status patch of one node (capacity and
allocatable) for the status subresource (``sim/node_list.py status-patches`` gives them for a whole List).

A missing stack file gives the default inventory of the local stack: flavor ``h100``, 4 nodes x 8 GPUs.
A stack file that is not valid is reported with every problem and its key path (exit status 2).

A flavor with a topology (``gpucluster:topologies``) gets a label per level above the host, from a regular
layout of ``<nodes per leaf>x<leaves per block>`` (``GPUCLUSTER_SIM_FABRIC``, default ``2x2``): node ``i`` of
flavor ``h100`` sits on leaf ``h100-ib-leaf-<i // 2>`` of block ``h100-ib-block-<i // 4>``.

``--remote`` prints the fixed inventory of the second cluster of ``sim/remote.sh`` instead: ``remote-gpu-<i>``,
2 nodes x 8 ``nvidia.com/gpu``, labelled ``gpucluster.io/remote=true``, pod IPs from 10.160.0.0/16.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_STACK = ROOT / "stacks" / "Pulumi.local.yaml"

#: The annotation kwok's controller is started to select: only nodes carrying it are simulated, so a node
#: run by something else (a virtual node) can join the cluster without kwok touching it.
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_ANNOTATION_VALUE = "fake"
FLAVOR_LABEL = "gpucluster.io/flavor"
#: As contract.constants.ACCEPTED_LABEL (this script runs without the repository on its path).
ACCEPTED_LABEL = "gpucluster.io/accepted"
ACCEPTED_VALUE = "true"

#: Host resources that come with each GPU (a typical 8-GPU training node: 192 cores, ~2 TiB).
CPU_PER_GPU = 24
MEMORY_GIB_PER_GPU = 240
PODS_PER_NODE = 110

#: Each node gets its own /24 for pod IPs, carved from this range (kwok assigns them).
POD_NETWORK = ipaddress.ip_network("10.64.0.0/10")


@dataclass(frozen=True)
class Taint:
    key: str
    effect: str
    value: str | None = None


@dataclass(frozen=True)
class Flavor:
    """The part of a stack's GPU flavor that shapes its nodes."""

    name: str
    node_labels: dict[str, str]
    gpus_per_node: int
    node_count: int
    gpu_resource: str = "nvidia.com/gpu"
    taints: tuple[Taint, ...] = field(default=())
    #: The node labels of the flavor's topology levels above the host, widest first (a spine block, a leaf).
    topology_labels: tuple[str, ...] = field(default=())


DEFAULT_FLAVORS = (
    Flavor(
        name="h100",
        node_labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        gpus_per_node=8,
        node_count=4,
    ),
)


class InventoryError(ValueError):
    """The stack's GPU inventory cannot be read; the message names the file and what is wrong."""


def load_flavors(stack_file: Path) -> tuple[Flavor, ...]:
    """The GPU flavors of a stack file, validated by the project's stack model; defaults if it is absent."""
    if not stack_file.exists():
        return DEFAULT_FLAVORS
    try:
        from components.config import StackConfigError, load_stack_file  # noqa: PLC0415 (only when needed)
    except ImportError as exc:
        raise InventoryError(f"{sys.executable} cannot import {exc.name}: run make venv") from None
    try:
        cfg = load_stack_file(stack_file)
    except StackConfigError as exc:
        raise InventoryError(str(exc)) from None
    except (OSError, ValueError) as exc:
        raise InventoryError(f"{stack_file}: {exc}") from None
    return tuple(
        Flavor(
            name=f.name,
            node_labels=dict(f.node_labels),
            gpus_per_node=f.gpus_per_node,
            node_count=f.node_count,
            gpu_resource=f.gpu_resource,
            # A toleration without an effect tolerates every effect; NoSchedule is the one that keeps
            # other pods off a GPU node without evicting anything.
            taints=tuple(Taint(key=t.key, effect=t.effect or "NoSchedule", value=t.value) for t in f.tolerations),
            topology_labels=tuple(topology.node_labels[:-1]) if (topology := cfg.topology_of(f)) else (),
        )
        for f in cfg.flavors
    )


@dataclass(frozen=True)
class FabricLayout:
    """How the simulated fabric groups a flavor's nodes: ``nodes_per_leaf`` consecutive nodes share a leaf, and
    ``leaves_per_block`` consecutive leaves a spine block; each wider level groups ``leaves_per_block`` of the one
    below. What fabric discovery (``ansible/roles/ib_topology``) labels a real node with, without the real
    fabric's irregularities (a leaf short of hosts, a miscabled HCA): the labels are as regular as the layout."""

    nodes_per_leaf: int = 2
    leaves_per_block: int = 2

    @classmethod
    def parse(cls, text: str) -> FabricLayout:
        """``<nodes per leaf>x<leaves per block>``, such as ``8x4``."""
        try:
            per_leaf, per_block = (int(part) for part in text.lower().split("x"))
        except ValueError:
            raise InventoryError(f"{FABRIC_LAYOUT_ENV}={text!r} is not <nodes per leaf>x<leaves per block>") from None
        if per_leaf < 1 or per_block < 1:
            raise InventoryError(f"{FABRIC_LAYOUT_ENV}={text!r}: both numbers must be at least 1")
        return cls(per_leaf, per_block)

    def labels(self, flavor: Flavor, index: int) -> dict[str, str]:
        """The topology labels of node ``index`` of ``flavor``: ``<flavor>-<level>-<n>`` per level, narrowest
        (the leaf) grouping ``nodes_per_leaf`` nodes."""
        out: dict[str, str] = {}
        group = self.nodes_per_leaf
        for label in reversed(flavor.topology_labels):
            level = label.rsplit("/", 1)[-1]
            out[label] = f"{flavor.name}-{level}-{index // group}"
            group *= self.leaves_per_block
        return out


#: ``<nodes per leaf>x<leaves per block>`` of the simulated fabric (default 2x2: the local stack's 4 nodes sit on
#: two leaves of one block).
FABRIC_LAYOUT_ENV = "GPUCLUSTER_SIM_FABRIC"


def fabric_layout() -> FabricLayout:
    text = os.environ.get(FABRIC_LAYOUT_ENV, "")
    return FabricLayout.parse(text) if text else FabricLayout()


def node_name(flavor: Flavor, index: int) -> str:
    return f"{flavor.name}-node-{index}"


def node_capacity(flavor: Flavor) -> dict[str, str]:
    return {
        "cpu": str(CPU_PER_GPU * flavor.gpus_per_node),
        "memory": f"{MEMORY_GIB_PER_GPU * flavor.gpus_per_node}Gi",
        "pods": str(PODS_PER_NODE),
        "ephemeral-storage": "3840Gi",
        flavor.gpu_resource: str(flavor.gpus_per_node),
    }


def node_status(flavor: Flavor) -> dict[str, Any]:
    capacity = node_capacity(flavor)
    return {"status": {"capacity": capacity, "allocatable": dict(capacity)}}


def build_nodes(flavors: Sequence[Flavor], layout: FabricLayout | None = None) -> list[dict[str, Any]]:
    """The Node objects for an inventory, in flavor order, each with its own pod CIDR and, for a flavor with a
    topology, the labels of its place in the fabric (``layout``; default: :func:`fabric_layout`)."""
    layout = layout or fabric_layout()
    subnets = POD_NETWORK.subnets(new_prefix=24)
    nodes: list[dict[str, Any]] = []
    for flavor in flavors:
        for i in range(flavor.node_count):
            name = node_name(flavor, i)
            try:
                cidr = str(next(subnets))
            except StopIteration:
                raise InventoryError(
                    f"more than {2 ** (24 - POD_NETWORK.prefixlen)} nodes: the pod network {POD_NETWORK} "
                    "has no /24 left"
                ) from None
            labels = {
                **flavor.node_labels,
                FLAVOR_LABEL: flavor.name,
                # Every fake node has passed acceptance (the flavors select accepted nodes); a test that wants one
                # that has not removes the label.
                ACCEPTED_LABEL: ACCEPTED_VALUE,
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                **layout.labels(flavor, i),
            }
            spec: dict[str, Any] = {"podCIDR": cidr, "podCIDRs": [cidr]}
            if flavor.taints:
                spec["taints"] = [
                    {"key": t.key, "effect": t.effect, **({"value": t.value} if t.value is not None else {})}
                    for t in flavor.taints
                ]
            nodes.append(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": name,
                        "labels": labels,
                        "annotations": {KWOK_ANNOTATION: KWOK_ANNOTATION_VALUE},
                    },
                    "spec": spec,
                    **node_status(flavor),
                }
            )
    return nodes


#: The second cluster of sim/remote.sh: what a ``kubernetes`` burst provider rents from.
REMOTE_NODE_COUNT = 2
REMOTE_GPUS_PER_NODE = 8
#: Pod IPs of the remote nodes: a range the main cluster's nodes (POD_NETWORK) never use.
REMOTE_POD_PREFIX = "10.160"


def remote_nodes(
    count: int = REMOTE_NODE_COUNT, gpus: int = REMOTE_GPUS_PER_NODE, prefix: str = REMOTE_POD_PREFIX
) -> list[dict[str, Any]]:
    """The remote cluster's fake GPU nodes (no flavor: that cluster runs no stack)."""
    capacity = {"cpu": str(CPU_PER_GPU * gpus), "memory": f"{MEMORY_GIB_PER_GPU * gpus}Gi", "pods": str(PODS_PER_NODE)}
    capacity["nvidia.com/gpu"] = str(gpus)
    items: list[dict[str, Any]] = []
    for i in range(count):
        name = f"remote-gpu-{i}"
        cidr = f"{prefix}.{i}.0/24"
        items.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "annotations": {KWOK_ANNOTATION: KWOK_ANNOTATION_VALUE},
                    "labels": {
                        "kubernetes.io/hostname": name,
                        "kubernetes.io/os": "linux",
                        "kubernetes.io/arch": "amd64",
                        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                        "type": "kwok",
                        "gpucluster.io/remote": "true",
                    },
                },
                "spec": {"podCIDR": cidr, "podCIDRs": [cidr]},
                "status": {"capacity": capacity, "allocatable": capacity},
            }
        )
    return items


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("stack", nargs="?", type=Path, default=DEFAULT_STACK, help="stack file (default: %(default)s)")
    parser.add_argument("--status", metavar="NODE", help="print only the status patch of this node")
    parser.add_argument("--summary", action="store_true", help="print one line per flavor instead")
    parser.add_argument("--remote", action="store_true", help="the nodes of sim/remote.sh's cluster instead")
    args = parser.parse_args(argv)
    if args.remote:
        print(json.dumps({"apiVersion": "v1", "kind": "List", "items": remote_nodes()}))
        return 0
    try:
        flavors = load_flavors(args.stack)
        nodes = build_nodes(flavors)
    except InventoryError as exc:
        print(f"sim/nodes.py: {exc}", file=sys.stderr)
        return 2
    if args.summary:
        source = args.stack if args.stack.exists() else f"defaults ({args.stack} not found)"
        for f in flavors:
            print(f"{f.name}: {f.node_count} nodes x {f.gpus_per_node} {f.gpu_resource} from {source}")
        return 0
    if args.status:
        for flavor in flavors:
            if any(node_name(flavor, i) == args.status for i in range(flavor.node_count)):
                print(json.dumps(node_status(flavor)))
                return 0
        print(f"sim/nodes.py: no node {args.status!r} in the inventory of {args.stack}", file=sys.stderr)
        return 2
    print(json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
