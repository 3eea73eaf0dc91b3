"""What the flip scenario reads and submits on the simulated cluster (``sim/flip.py`` drives the cycle).

- :class:`Setup`: what the scenario acts on, read from the stack's config;
- reading the cluster: pods, taints, Workloads, the scheduler's preemptions, the fake cloud's stats;
- :class:`Sampler`: the cluster once a second into a :class:`timeline.Timeline`;
- acting on it: the gang's training Job, the burst taint set by hand.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from components.training.manifest import reservation_toleration
from contract.constants import PODSET_UNCONSTRAINED_TOPOLOGY
from contract.registry import MAKE_BEFORE_BREAK
from sim import outside as sim_outside
from sim import processes as sim_daemons
from sim import timeline

#: Every InferenceService pod carries it (components/inference.py; contract/constants.py WORKLOAD_LABEL).
INFERENCE_POD_SELECTOR = "gpucluster.io/workload=inference"

TRAINING_JOB = "flip-pretrain"
SIM_ANNOTATION_READY_AFTER = sim_outside.READY_AFTER_ANNOTATION


class ScenarioError(RuntimeError):
    """The scenario could not go on; the message says which step and why."""


def say(msg: str, quiet: bool = False) -> None:
    if not quiet:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


@dataclass(frozen=True)
class Service:
    """One entry of ``gpucluster:inferenceServices``."""

    namespace: str
    name: str
    replicas: int
    gpus_per_replica: int


@dataclass(frozen=True)
class Setup:
    """What the scenario acts on, read from the stack's config (the local stack unless GPUCLUSTER_SIM_STACK)."""

    #: The first inference service (its namespace, name and pod selector): what chaos checks one by one.
    inference_ns: str
    service: str
    selector: str
    #: The desired replicas of every inference service together.
    replicas: int
    #: GPUs per replica; the largest of the services' when they differ (the fake cloud counts instances only).
    gpus_per_replica: int
    node: str
    taint_key: str
    training_ns: str
    local_queue: str
    workload_priority: str
    training_priority_class: str
    gpus_per_node: int
    nodes: int
    hold_add_seconds: float
    fake_cloud_url: str
    make_before_break: bool
    reservation_key: str
    #: Every inference service; their namespaces are where the sampler counts pods.
    services: tuple[Service, ...] = ()
    #: The flavor is placed by a topology: Kueue pins the gang, which tolerates make-before-break's reservation.
    topology: bool = False

    @property
    def inference_namespaces(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(x.namespace for x in self.services)) or (self.inference_ns,)


def setup_from_stack() -> Setup:
    cfg = sim_daemons.stack_config()
    if not cfg.inference_services:
        raise ScenarioError("the stack has no gpucluster:inferenceServices entry to flip")
    services = tuple(Service(x.namespace, x.name, x.replicas, x.gpus_per_replica) for x in cfg.inference_services)
    svc = cfg.inference_services[0]
    burst = cfg.burst
    fake = next((p.fake.url for p in burst.settings.providers if p.fake is not None), None)
    if fake is None:
        raise ScenarioError("the stack's burst section has no fake provider: the scenario needs the fake cloud")
    team = cfg.teams[0]
    flavor = cfg.flavors[0]
    names = [w.name for w in cfg.priorities.workload]
    return Setup(
        inference_ns=svc.namespace,
        service=svc.name,
        selector=f"app.kubernetes.io/name={svc.name}",
        replicas=sum(x.replicas for x in services),
        gpus_per_replica=max(x.gpus_per_replica for x in services),
        node=burst.settings.virtual_node.node_name,
        taint_key=cfg.burst_taint_key,
        training_ns=team.namespace,
        local_queue=team.local_queue,
        workload_priority=next((n for n in names if n.endswith("-default")), names[-1]),
        training_priority_class=cfg.priorities.pod.training.name,
        gpus_per_node=flavor.gpus_per_node,
        nodes=flavor.node_count,
        hold_add_seconds=burst.taint_controller.hold_add_seconds,
        fake_cloud_url=fake,
        make_before_break=cfg.controller(MAKE_BEFORE_BREAK).enabled,
        reservation_key=cfg.controller(MAKE_BEFORE_BREAK).reservation_key,
        services=services,
        topology=cfg.topology_of(flavor) is not None,
    )


def gang_size(s: Setup, gang_nodes: int | None) -> int:
    """The gang's pods (one whole node each): ``gang_nodes``, or every node of the first flavor."""
    n = s.nodes if gang_nodes is None else gang_nodes
    if not 1 <= n <= s.nodes:
        raise ScenarioError(f"a gang of {n} nodes does not fit the first flavor's {s.nodes} nodes")
    return n


def displaced_fit_in_cluster(s: Setup, gang: int) -> bool:
    """Whether the nodes the gang leaves hold every replica (a replica needs its GPUs on one node)."""
    per_node = s.gpus_per_node // s.gpus_per_replica if s.gpus_per_replica else s.replicas
    return (s.nodes - gang) * per_node >= s.replicas


# --- reading the cluster --------------------------------------------------------------------------------------------


def kget(*args: str) -> dict[str, Any]:
    out = sim_daemons.kubectl("get", *args, "-o", "json")
    data = json.loads(out)
    assert isinstance(data, dict)
    return data


def pod_ready(p: dict[str, Any]) -> bool:
    if p["metadata"].get("deletionTimestamp") or p.get("status", {}).get("phase") != "Running":
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in p["status"].get("conditions") or [])


def burst_taint(node: dict[str, Any], key: str) -> str:
    for t in node.get("spec", {}).get("taints") or []:
        if t.get("key") == key:
            return str(t.get("effect", ""))
    return ""


def fake_cloud_stats(url: str) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(f"{url}/admin/stats", timeout=2) as r:
            data = json.loads(r.read())
            return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def workload_state(workloads: Sequence[dict[str, Any]]) -> str:
    """The training Job's Workload: "" (none), "reserved" (quota, not admitted), "admitted" or "finished"."""
    for w in workloads:
        if not any(o.get("name") == TRAINING_JOB for o in w["metadata"].get("ownerReferences") or []):
            continue
        true = {c.get("type") for c in w.get("status", {}).get("conditions") or [] if c.get("status") == "True"}
        if "Finished" in true:
            return "finished"
        if "Admitted" in true:
            return "admitted"
        if "QuotaReserved" in true:
            return "reserved"
    return ""


def preemptions(namespace: str, since: float) -> int:
    """Pods in ``namespace`` the scheduler preempted since the wall-clock time ``since`` (its Preempted Events)."""
    events = kget("events", "-n", namespace, "--field-selector", "reason=Preempted")["items"]
    count = 0
    for e in events:
        stamp = e.get("lastTimestamp") or e.get("eventTime") or e["metadata"].get("creationTimestamp") or ""
        try:
            at = time.mktime(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
        except ValueError:
            continue
        if at >= since - 1:
            count += int(e.get("count") or 1)
    return count


def of_services(s: Setup, pod: dict[str, Any]) -> bool:
    """A pod of one of the stack's inference services (its namespace and ``app.kubernetes.io/name``)."""
    meta = pod.get("metadata") or {}
    key = (meta.get("namespace"), (meta.get("labels") or {}).get("app.kubernetes.io/name"))
    wanted = {(x.namespace, x.name) for x in s.services} or {(s.inference_ns, s.service)}
    return key in wanted


class Sampler:
    """One sample a second in a background thread."""

    def __init__(self, s: Setup, tl: timeline.Timeline, t0: float) -> None:
        self.s, self.tl, self.t0 = s, tl, t0
        self.latest: timeline.Sample | None = None
        self.latest_pods: list[dict[str, Any]] = []
        #: Training pods that already finished (phase Succeeded) at the latest sample.
        self.training_succeeded = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def now(self) -> float:
        return time.monotonic() - self.t0

    def take(self) -> timeline.Sample:
        s = self.s
        t = self.now()
        pods = [p for p in kget("pods", "--all-namespaces", "-l", INFERENCE_POD_SELECTOR)["items"] if of_services(s, p)]
        node = kget("node", s.node)
        training = kget("pods", "-n", s.training_ns, "-l", f"job-name={TRAINING_JOB}")["items"]
        workload = workload_state(kget("workloads.kueue.x-k8s.io", "-n", s.training_ns)["items"])
        instances = int(fake_cloud_stats(s.fake_cloud_url).get("liveInstances", 0) or 0)
        names = {(x.namespace, x.name) for x in s.services}
        desired = sum(
            int(d.get("spec", {}).get("replicas") or 0)
            for ns in s.inference_namespaces
            for d in kget("deployments", "-n", ns)["items"]
            if (ns, d["metadata"]["name"]) in names
        )
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        external = [p for p in live if p["spec"].get("nodeName") == s.node]
        sample = timeline.Sample(
            t=t,
            ready_in_cluster=sum(1 for p in live if pod_ready(p) and p["spec"].get("nodeName") != s.node),
            ready_external=sum(1 for p in external if pod_ready(p)),
            pending=sum(1 for p in live if p.get("status", {}).get("phase") == "Pending"),
            training_running=sum(1 for p in training if p.get("status", {}).get("phase") == "Running"),
            taint=burst_taint(node, s.taint_key),
            external_instances=instances,
            # Every instance on the fake cloud is one of the services' replicas.
            external_gpus=instances * s.gpus_per_replica,
            workload=workload,
            desired=desired,
        )
        self.latest, self.latest_pods = sample, live
        # A short run at scale: the first pods may finish before the last start.
        self.training_succeeded = sum(1 for p in training if p.get("status", {}).get("phase") == "Succeeded")
        return sample

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.tl.samples.append(self.take())
            except (sim_daemons.DaemonError, KeyError, ValueError) as e:
                print(f"sampler: {e}", file=sys.stderr)
            self._stop.wait(max(0.0, 1.0 - (time.monotonic() - started)))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


# --- acting on the cluster ------------------------------------------------------------------------------------------


def training_job(s: Setup, run_for: str, gang_nodes: int | None = None) -> dict[str, Any]:
    """A gang (all-or-nothing) Job of ``gang_nodes`` whole-node pods (default: every in-cluster GPU of the first
    flavor), submitted to the team's LocalQueue."""
    gang = gang_size(s, gang_nodes)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": TRAINING_JOB,
            "namespace": s.training_ns,
            "labels": {
                "kueue.x-k8s.io/queue-name": s.local_queue,
                "kueue.x-k8s.io/priority-class": s.workload_priority,
            },
        },
        "spec": {
            "parallelism": gang,
            "completions": gang,
            "suspend": True,
            "backoffLimit": 0,
            "template": {
                "metadata": {
                    "annotations": {
                        "sim.gpucluster.io/run-for": run_for,
                        # Placed by topology, as a submitted job on the flavor is (any level will do here).
                        **({PODSET_UNCONSTRAINED_TOPOLOGY: "true"} if s.topology else {}),
                    }
                },
                "spec": {
                    "restartPolicy": "Never",
                    "priorityClassName": s.training_priority_class,
                    # As a submitted job's (components/training/manifest.py): Kueue reads a node tainted against
                    # the gang's own pod sets as failed once its pods end.
                    "tolerations": [reservation_toleration(s.reservation_key)]
                    if s.topology and s.make_before_break
                    else [],
                    "containers": [
                        {
                            "name": "trainer",
                            "image": "registry.invalid/pretrain:sim",
                            "resources": {"limits": {"nvidia.com/gpu": str(s.gpus_per_node)}},
                        }
                    ],
                },
            },
        },
    }


def set_taint(s: Setup, effect: str | None) -> None:
    """Put the burst taint on the virtual node with ``effect`` (None: remove it), as an operator would."""
    node = kget("node", s.node)
    taints = [t for t in node["spec"].get("taints") or [] if t.get("key") != s.taint_key]
    if effect:
        taints.append({"key": s.taint_key, "value": "true", "effect": effect})
    patch = json.dumps({"spec": {"taints": taints}})
    sim_daemons.kubectl("patch", "node", s.node, "--type=merge", "-p", patch)


def wait(what: str, check: Callable[[], Any], timeout: float, interval: float = 0.5) -> Any:
    try:
        return sim_daemons.wait_for(what, check, timeout, interval)
    except sim_daemons.DaemonError as e:
        raise ScenarioError(str(e)) from e
