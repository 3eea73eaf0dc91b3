"""In-memory API server and Prometheus for the stall detector's controller tests.

:class:`FakeApi` keeps JobSets, pods, the checkpoints claim's annotations and the suspects ConfigMap as the API
server would (a record patch conditional on the resourceVersion, an eviction that marks the pod terminating, a
ConfigMap update conditional on its resourceVersion) and can be told to die at a given call, the way ``kill -9``
stops a replica between two writes. :class:`FakeQuerier` answers the detector's seven queries from per-GPU tensor
activity and per-node traffic and errors, as Prometheus would label them.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from contract.constants import STALL_RESTART_ANNOTATION, TRAINING_JOB_LABEL
from daemons.stall_detector import queries
from daemons.toolkit.kube import ConflictError, KubeError
from daemons.toolkit.prometheus import QueryError, QueryResult, Sample

START = 1_800_000_000.0


def rfc3339(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Killed(BaseException):
    """The process died here (not an Exception: nothing in the controller catches it)."""


@dataclass
class FakeApi:
    jobsets: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    pods: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    claims: dict[str, dict[str, str]] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    evictions: list[tuple[str, str]] = field(default_factory=list)
    records: list[tuple[str, str, str]] = field(default_factory=list)
    suspects: tuple[str, str] | None = None
    #: Raise Killed on this call ("write_restart", "evict", ...), once.
    die_at: str | None = None
    #: Raise KubeError on every call of these.
    failing: set[str] = field(default_factory=set)
    version: int = 100

    def _call(self, name: str) -> None:
        if self.die_at == name:
            self.die_at = None
            raise Killed(name)
        if name in self.failing:
            raise KubeError(f"{name}: HTTP 500: the API server is down")

    def _bump(self) -> str:
        self.version += 1
        return str(self.version)

    # --- setup

    def add_gang(
        self, ns: str, name: str, nodes: list[str], *, started: float, gpus: int = 8, attempt: int = 0
    ) -> None:
        self.jobsets[(ns, name)] = {
            "metadata": {
                "name": name,
                "namespace": ns,
                "uid": f"uid-{name}",
                "resourceVersion": self._bump(),
                "labels": {TRAINING_JOB_LABEL: name},
                "annotations": {},
            },
            "spec": {
                "replicatedJobs": [{"name": "node", "replicas": 1, "template": {"spec": {"parallelism": len(nodes)}}}]
            },
            "status": {"restarts": attempt},
        }
        for i, node in enumerate(nodes):
            self.add_pod(ns, name, i, node, started=started, gpus=gpus, attempt=attempt)

    def add_pod(self, ns: str, job: str, index: int, node: str, *, started: float, gpus: int, attempt: int) -> None:
        pod = f"{job}-node-0-{index}-a{attempt}"
        self.pods[(ns, pod)] = {
            "metadata": {
                "name": pod,
                "namespace": ns,
                "labels": {TRAINING_JOB_LABEL: job, "jobset.sigs.k8s.io/restart-attempt": str(attempt)},
            },
            "spec": {
                "nodeName": node,
                "containers": [{"name": "trainer", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
            },
            "status": {
                "phase": "Running",
                "containerStatuses": [{"name": "trainer", "state": {"running": {"startedAt": rfc3339(started)}}}],
            },
        }

    def restart(self, ns: str, name: str, nodes: list[str], started: float) -> None:
        """What JobSet does after the eviction: the attempt's pods go, the next attempt's run."""
        js = self.jobsets[(ns, name)]
        attempt = int(js["status"]["restarts"]) + 1
        js["status"]["restarts"] = attempt
        js["metadata"]["resourceVersion"] = self._bump()
        for key in [k for k, p in self.pods.items() if p["metadata"]["labels"][TRAINING_JOB_LABEL] == name]:
            del self.pods[key]
        for i, node in enumerate(nodes):
            self.add_pod(ns, name, i, node, started=started, gpus=8, attempt=attempt)

    def record(self, ns: str, name: str) -> dict[str, Any] | None:
        text = self.jobsets[(ns, name)]["metadata"]["annotations"].get(STALL_RESTART_ANNOTATION)
        return json.loads(text) if text else None

    # --- the Api protocol

    def list_jobsets(self, namespace: str) -> list[Mapping[str, Any]]:
        self._call("list_jobsets")
        return [json.loads(json.dumps(v)) for (ns, _), v in self.jobsets.items() if ns == namespace]

    def list_pods(self, namespace: str) -> list[Mapping[str, Any]]:
        self._call("list_pods")
        return [json.loads(json.dumps(v)) for (ns, _), v in self.pods.items() if ns == namespace]

    def claim_annotations(self, namespace: str) -> dict[str, str]:
        self._call("claim_annotations")
        return dict(self.claims.get(namespace, {}))

    def write_restart(self, namespace: str, name: str, record: str, resource_version: str) -> None:
        self._call("write_restart")
        js = self.jobsets[(namespace, name)]
        if js["metadata"]["resourceVersion"] != resource_version:
            raise ConflictError(f"annotate jobset {namespace}/{name}: conflict")
        js["metadata"]["annotations"][STALL_RESTART_ANNOTATION] = record
        js["metadata"]["resourceVersion"] = self._bump()
        self.records.append((namespace, name, record))

    def evict(self, namespace: str, pod: str) -> bool:
        self._call("evict")
        found = self.pods.get((namespace, pod))
        if found is None:
            return False
        found["metadata"]["deletionTimestamp"] = rfc3339(START)
        found["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True"}]
        self.evictions.append((namespace, pod))
        return True

    def create_event(self, body: dict[str, Any]) -> None:
        self._call("create_event")
        self.events.append(body)

    def get_suspects(self, namespace: str) -> tuple[str, str] | None:
        self._call("get_suspects")
        return self.suspects

    def put_suspects(self, namespace: str, text: str, resource_version: str | None) -> str:
        self._call("put_suspects")
        current = self.suspects[1] if self.suspects else None
        if current != resource_version:
            raise ConflictError("write configmap: conflict")
        self.suspects = (text, self._bump())
        return self.suspects[1]

    def reasons(self) -> list[str]:
        return [e["reason"] for e in self.events]


@dataclass
class FakeQuerier:
    """Answers by the query's shape; ``down`` makes every query fail as an unreachable Prometheus does."""

    #: (namespace, pod, gpu) -> tensor activity (the window's highest and its average alike unless ``mean`` says).
    tensor: dict[tuple[str, str, str], float] = field(default_factory=dict)
    mean: dict[tuple[str, str, str], float] = field(default_factory=dict)
    fabric: dict[str, float] = field(default_factory=dict)
    transport: dict[str, float] = field(default_factory=dict)
    link: dict[str, float] = field(default_factory=dict)
    #: node -> GPUs with a new hardware XID; node -> share of the window throttled.
    xids: dict[str, float] = field(default_factory=dict)
    throttled: dict[str, float] = field(default_factory=dict)
    #: node -> bytes per second written to its filesystems.
    writes: dict[str, float] = field(default_factory=dict)
    down: bool = False
    sent: list[str] = field(default_factory=list)

    def query(self, promql: str) -> QueryResult:
        self.sent.append(promql)
        if self.down:
            raise QueryError("unreachable", "connection refused")
        if queries.TENSOR_METRIC in promql:
            values = {**self.tensor, **self.mean} if "avg_over_time" in promql else self.tensor
            rows = [Sample({"namespace": ns, "pod": p, "gpu": g}, v, START) for (ns, p, g), v in values.items()]
            return QueryResult("vector", tuple(rows))
        if "data_bytes" in promql:
            by_node = self.fabric
        elif queries.FS_WRITES in promql:
            by_node = self.writes
        elif queries.XID_METRIC in promql:
            by_node = self.xids
        elif queries.CLOCK_EVENTS_METRIC in promql:
            by_node = self.throttled
        elif "hw_counters" in promql:
            by_node = self.transport
        else:
            by_node = self.link
        return QueryResult("vector", tuple(Sample({"node": n}, v, START) for n, v in by_node.items()))

    def gang(self, ns: str, pods: list[str], value: float, gpus: int = 8) -> None:
        for pod in pods:
            for g in range(gpus):
                self.tensor[(ns, pod, str(g))] = value
