"""In-memory stand-ins for Prometheus and the API server the quarantine controller talks to, with hand-driven clocks.

:class:`FakeApi` keeps Nodes and the ledger as API JSON and applies the controller's JSON patches the way the API
server does (``test`` ops, whole or nothing, resourceVersion bumped), so a patch that would fail there fails here.
"""

from __future__ import annotations

import copy
from typing import Any

from contract.constants import QUARANTINE_REASON_ANNOTATION, QUARANTINED_AT_ANNOTATION, QUARANTINED_LABEL
from daemons.toolkit.events import format_time
from daemons.toolkit.kube import ConflictError, KubeError
from daemons.toolkit.prometheus import QueryError, QueryResult, Sample

START = 1_800_000_000.0


class Clock:
    def __init__(self) -> None:
        self.mono = 1000.0
        self.wall_now = START

    def __call__(self) -> float:
        return self.mono

    def wall(self) -> float:
        return self.wall_now

    def advance(self, seconds: float) -> None:
        self.mono += seconds
        self.wall_now += seconds


class FakeQuerier:
    """Answers the signal query with ``samples`` (alert label sets) or raises ``error``."""

    def __init__(self) -> None:
        self.samples: list[dict[str, str]] = []
        self.error: QueryError | None = None
        self.queries: list[str] = []

    def fire(self, node: str, alert: str = "GpuTemperatureHigh", **labels: str) -> None:
        self.samples.append({"alertname": alert, "alertstate": "firing", "node": node, **labels})

    def query(self, promql: str) -> QueryResult:
        self.queries.append(promql)
        if self.error is not None:
            raise self.error
        return QueryResult("vector", tuple(Sample(dict(s), 1.0, 0.0) for s in self.samples))


def _unescape(segment: str) -> str:
    return segment.replace("~1", "/").replace("~0", "~")


def apply_json_patch(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 add/remove/test on maps and lists, as the API server applies them (ConflictError on a failed
    test, KubeError on a path that does not exist)."""
    out = copy.deepcopy(doc)
    for op in ops:
        parts = [_unescape(p) for p in op["path"].split("/")[1:]]
        parent: Any = out
        for part in parts[:-1]:
            if isinstance(parent, list):
                parent = parent[int(part)]
            elif isinstance(parent, dict) and part in parent:
                parent = parent[part]
            else:
                raise KubeError(f"patch: {op['path']} does not exist")
        last = parts[-1]
        kind = op["op"]
        if kind == "test":
            current = parent[int(last)] if isinstance(parent, list) else parent.get(last)
            if current != op["value"]:
                raise ConflictError(f"test of {op['path']} failed")
        elif kind == "add":
            if isinstance(parent, list):
                parent.append(op["value"]) if last == "-" else parent.insert(int(last), op["value"])
            else:
                parent[last] = copy.deepcopy(op["value"])
        elif kind == "remove":
            if isinstance(parent, list):
                del parent[int(last)]
            elif last in parent:
                del parent[last]
            else:
                raise KubeError(f"patch: {op['path']} does not exist")
        else:
            raise KubeError(f"patch: op {kind} not supported by the fake")
    return out


def node_json(name: str, labels: dict[str, str], **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": f"uid-{name}", "resourceVersion": "1", "labels": dict(labels)}
    meta.update(extra.pop("metadata", {}))
    return {"metadata": meta, "spec": extra.pop("spec", {}), "status": {}}


class FakeApi:
    def __init__(self) -> None:
        self.nodes: dict[str, dict[str, Any]] = {}
        self.ledger: dict[str, Any] | None = None
        self.events: list[dict[str, Any]] = []
        self.patches: list[tuple[str, list[dict[str, Any]]]] = []
        self.applies: list[dict[str, Any]] = []
        self.fail: dict[str, KubeError] = {}
        #: Set: another writer changes a node between the controller's list and its patch.
        self.race: bool = False

    def add_node(self, name: str, labels: dict[str, str], **extra: Any) -> None:
        self.nodes[name] = node_json(name, labels, **extra)

    def _maybe_fail(self, what: str) -> None:
        if what in self.fail:
            raise self.fail[what]

    def list_nodes(self) -> list[Any]:
        self._maybe_fail("list-nodes")
        return [copy.deepcopy(n) for n in self.nodes.values()]

    def patch_node(self, name: str, ops: list[dict[str, Any]]) -> Any:
        self._maybe_fail("patch-node")
        if name not in self.nodes:
            raise KubeError(f"patch node {name}: not found")
        if self.race:  # another writer got there first
            meta = self.nodes[name]["metadata"]
            meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)
        self.patches.append((name, ops))
        patched = apply_json_patch(self.nodes[name], ops)
        patched["metadata"]["resourceVersion"] = str(int(self.nodes[name]["metadata"]["resourceVersion"] or 0) + 1)
        self.nodes[name] = patched
        return copy.deepcopy(patched)

    def get_ledger(self, namespace: str) -> Any:
        self._maybe_fail("read-ledger")
        return copy.deepcopy(self.ledger)

    def apply_ledger(self, body: dict[str, Any]) -> Any:
        self._maybe_fail("apply-ledger")
        self.applies.append(copy.deepcopy(body))
        self.ledger = copy.deepcopy(body)
        return body

    def create_event(self, body: dict[str, Any]) -> None:
        self._maybe_fail("create-event")
        self.events.append(copy.deepcopy(body))

    # what tests read
    def reasons(self) -> list[str]:
        return [e["reason"] for e in self.events]

    def quarantine_taints(self, name: str) -> list[dict[str, Any]]:
        return [t for t in self.nodes[name]["spec"].get("taints", []) if t["key"] == "gpucluster.io/quarantine"]

    def quarantine_marks(self, name: str) -> tuple[bool, bool, bool]:
        """(label, reason annotation, time annotation) present on the node."""
        meta = self.nodes[name]["metadata"]
        annotations = meta.get("annotations") or {}
        return (
            (meta.get("labels") or {}).get(QUARANTINED_LABEL) == "true",
            QUARANTINE_REASON_ANNOTATION in annotations,
            annotations.get(QUARANTINED_AT_ANNOTATION) is not None,
        )


__all__ = ["START", "Clock", "FakeApi", "FakeQuerier", "apply_json_patch", "format_time", "node_json"]
