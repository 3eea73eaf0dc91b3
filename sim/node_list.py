"""What sim/kwok-cluster.sh needs from a Kubernetes ``List`` of fake nodes (``sim/nodes.py``'s output, on stdin).

``python sim/node_list.py summary`` prints one line for the log: nodes and GPUs per flavor (``h100: 4 nodes x 8
GPUs``; nodes without a ``gpucluster.io/flavor`` label are counted as ``2 nodes x 8 GPUs``).
``python sim/node_list.py status-patches`` prints ``NAME<TAB>PATCH`` per node: the merge patch that sets its
capacity and allocatable through the status subresource (``kubectl apply`` leaves the status alone).

Input that is not such a List is reported with what is wrong (exit status 2).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

FLAVOR_LABEL = "gpucluster.io/flavor"
GPU_RESOURCE_SUFFIX = "/gpu"
STATUS_KEYS = ("capacity", "allocatable")


class NodeListError(ValueError):
    """The input is not a List of nodes with names and capacities; the message says where."""


def parse(text: str) -> list[dict[str, Any]]:
    """The nodes of a ``List``, each checked for a name and a status with capacity and allocatable."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise NodeListError(f"not JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("items"), list):
        raise NodeListError("not a Kubernetes List: no items[]")
    nodes: list[dict[str, Any]] = doc["items"]
    for i, node in enumerate(nodes):
        if not isinstance(node, dict) or not isinstance((node.get("metadata") or {}).get("name"), str):
            raise NodeListError(f"items[{i}]: no metadata.name")
        status = node.get("status")
        for key in STATUS_KEYS:
            if not isinstance(status, dict) or not isinstance(status.get(key), dict):
                raise NodeListError(f"items[{i}] ({node['metadata']['name']}): no status.{key}")
    return nodes


def _gpus(capacity: Mapping[str, Any]) -> int:
    try:
        return sum(int(v) for k, v in capacity.items() if k.endswith(GPU_RESOURCE_SUFFIX))
    except (TypeError, ValueError):
        raise NodeListError(f"a GPU capacity is not a whole number: {dict(capacity)}") from None


def summary(nodes: Sequence[Mapping[str, Any]]) -> str:
    """``h100: 4 nodes x 8 GPUs; l40s: ...`` in the order the flavors first appear."""
    counts: dict[str | None, list[int]] = {}
    for n in nodes:
        flavor = (n["metadata"].get("labels") or {}).get(FLAVOR_LABEL)
        entry = counts.setdefault(flavor, [0, _gpus(n["status"]["capacity"])])
        entry[0] += 1
    return "; ".join(
        f"{flavor + ': ' if flavor else ''}{count} nodes x {gpus} GPUs" for flavor, (count, gpus) in counts.items()
    )


def status_patches(nodes: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(node name, JSON merge patch of its status) per node."""
    return [(n["metadata"]["name"], json.dumps({"status": {k: n["status"][k] for k in STATUS_KEYS}})) for n in nodes]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sim/node_list.py", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("what", choices=["summary", "status-patches"])
    args = parser.parse_args(argv)
    try:
        nodes = parse(sys.stdin.read())
        if args.what == "summary":
            print(summary(nodes))
        else:
            for name, patch in status_patches(nodes):
                print(f"{name}\t{patch}")
    except NodeListError as e:
        print(f"sim/node_list.py: the node list on stdin: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
