"""In-memory stand-ins for Prometheus, the Node API and Events (the clock and the Lease API are the toolkit's:
tests/daemons/toolkit/fakes.py)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from daemons.taint_controller.kube import ConflictError, KubeError, NodeState, Taint
from daemons.toolkit.prometheus import QueryError, QueryResult, Sample

Answer = float | dict[str, float] | QueryError | None


class FakeQuerier:
    """Answers by query: a float (one sample), rows by GPU type (``""``: the sample without ``gpu_type``), None (an
    empty result) or a QueryError to raise."""

    def __init__(
        self,
        headroom: Answer = 0.0,
        pending: Answer = 0.0,
        reserved: Answer = 0.0,
        *,
        headroom_by_type: Answer = None,
        pending_by_type: Answer = None,
        burst: Answer = 0.0,
    ) -> None:
        self.headroom = headroom
        self.pending = pending
        self.reserved = reserved
        self.headroom_by_type = headroom_by_type
        self.pending_by_type = pending_by_type
        self.burst = burst
        self.queries: list[str] = []

    def _answer(self, promql: str) -> Answer:
        if 'kube_pod_info{node="' in promql:  # pods bound to the virtual node
            return self.burst
        if "allocatable" in promql:
            return self.headroom_by_type if "gpu_type" in promql else self.headroom
        if "kube_node_spec_taint" in promql:
            return self.reserved
        return self.pending_by_type if "gpu_type" in promql else self.pending

    def query(self, promql: str) -> QueryResult:
        self.queries.append(promql)
        answer = self._answer(promql)
        if isinstance(answer, QueryError):
            raise answer
        if answer is None:
            return QueryResult("vector", ())
        if isinstance(answer, dict):
            return QueryResult(
                "vector",
                tuple(Sample({"gpu_type": k} if k else {}, float(v), 0.0) for k, v in answer.items()),
            )
        return QueryResult("vector", (Sample({}, float(answer), 0.0),))


def apply_json_patch(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """The subset of RFC 6902 the controller sends (test, add, remove, replace) on a plain dict."""
    doc = copy.deepcopy(doc)

    def resolve(path: str) -> tuple[Any, str]:
        parts = path.lstrip("/").split("/")
        parent: Any = doc
        for p in parts[:-1]:
            parent = parent[int(p)] if isinstance(parent, list) else parent[p]
        return parent, parts[-1]

    for op in ops:
        parent, last = resolve(op["path"])
        kind = op["op"]
        if kind == "test":
            current = parent[int(last)] if isinstance(parent, list) else parent.get(last)
            if current != op["value"]:
                raise ConflictError(f"test failed at {op['path']}")
        elif kind == "add":
            if isinstance(parent, list):
                parent.append(op["value"]) if last == "-" else parent.insert(int(last), op["value"])
            else:
                parent[last] = op["value"]
        elif kind == "remove":
            del parent[int(last) if isinstance(parent, list) else last]
        elif kind == "replace":
            parent[int(last) if isinstance(parent, list) else last] = op["value"]
        else:
            raise AssertionError(f"unexpected op {kind}")
    return doc


class FakeNodes:
    """One node kept as a dict; patches are applied for real, so ops are checked by their effect."""

    def __init__(self, name: str = "gpu-burst", taints: list[Taint] | None = None) -> None:
        self.doc: dict[str, Any] = {
            "metadata": {"name": name, "uid": "uid-1", "resourceVersion": "1"},
            "spec": {"taints": [t.to_k8s() for t in taints or []]},
        }
        self.patches: list[list[dict[str, Any]]] = []
        self.fail_read: KubeError | None = None
        self.fail_patch: KubeError | None = None
        self.before_patch: Any = None  # callable run just before a patch applies (to simulate a race)

    def state(self) -> NodeState:
        meta = self.doc["metadata"]
        taints = tuple(Taint(t["key"], t["effect"], t.get("value")) for t in self.doc["spec"].get("taints", []))
        return NodeState(meta["name"], meta["uid"], meta["resourceVersion"], taints)

    @property
    def taints(self) -> tuple[Taint, ...]:
        return self.state().taints

    def get_node(self, name: str) -> NodeState:
        if self.fail_read:
            raise self.fail_read
        assert name == self.doc["metadata"]["name"]
        return self.state()

    def patch_node(self, name: str, ops: list[dict[str, Any]]) -> NodeState:
        self.patches.append(ops)
        if self.before_patch:
            self.before_patch()
        if self.fail_patch:
            raise self.fail_patch
        self.doc = apply_json_patch(self.doc, ops)
        self.doc["metadata"]["resourceVersion"] = str(int(self.doc["metadata"]["resourceVersion"]) + 1)
        return self.state()

    def hand_edit(self, taints: list[Taint]) -> None:
        self.doc["spec"]["taints"] = [t.to_k8s() for t in taints]
        self.doc["metadata"]["resourceVersion"] = str(int(self.doc["metadata"]["resourceVersion"]) + 1)


@dataclass
class FakeEvents:
    events: list[tuple[str, str, str]] = field(default_factory=list)

    def emit(self, node: NodeState | None, node_name: str, event_type: str, reason: str, message: str) -> None:
        self.events.append((event_type, reason, message))

    def reasons(self) -> list[str]:
        return [r for _, r, _ in self.events]
