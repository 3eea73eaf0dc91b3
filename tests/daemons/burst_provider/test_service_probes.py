"""Running is not Ready: a rented replica serves traffic only once its own probes pass against the instance.

The probes are real (``prober.run_probe``) against the model-server stand-in (``fakes/replica.py``) listening on the
instance's address; time is a manual clock, so a model load of 20 s takes no time here.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from daemons.burst_provider.endpoints import EndpointManager
from daemons.burst_provider.providers.base import InstanceState
from daemons.burst_provider.reconcile import Reconciler
from daemons.burst_provider.service import BurstService
from sim.fakes.replica import ReplicaServer
from tests.daemons.burst_provider.support import make_pod, rig
from tests.support.workers import worker_index

READINESS = {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 1}
LIVENESS = {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 5, "failureThreshold": 2}
#: Each instance its own loopback address; each xdist worker its own block of them.
_hosts = itertools.count(1 + 1000 * worker_index())


class Rented:
    """One burst pod on a memory provider whose instance answers HTTP at a loopback address of its own."""

    def __init__(self, **probes: Any) -> None:
        on = rig(notReadyTimeout="2m")
        self.clock, self.spawn, self.source = on.clock, on.spawn, on.source
        self.provider, self.svc = on.provider, on.svc
        self.source.svcs["inference"] = [
            {
                "metadata": {"name": "web", "namespace": "inference"},
                "spec": {"selector": {"app": "web"}, "ports": [{"name": "web", "port": 80, "targetPort": "http"}]},
            }
        ]
        self.endpoints = EndpointManager(self.source, self.svc.settings)
        pod = make_pod()
        pod["spec"]["containers"][0].update(probes)
        self.source.pods.append(pod)
        self.svc.create_pod(pod)
        self.spawn.run_all()
        (self.iid,) = self.provider.created
        n = next(_hosts)
        self.address = f"127.78.{n // 250}.{n % 250 + 1}"
        self.replica: ReplicaServer | None = None

    def boot(self, load_seconds: float = 20.0) -> None:
        """The instance runs: its container opens the port and starts loading the model."""
        self.replica = ReplicaServer(
            "r", self.address, 8080, started_at=self.clock.now, load_seconds=load_seconds, clock=self.clock
        )
        self.provider.set_state(self.iid, InstanceState.RUNNING, address=self.address)
        self.svc.poll_once()

    def tick(self, seconds: float = 1.0) -> None:
        """Time passes; every probe due runs (for real, over the socket)."""
        self.clock.advance(seconds)
        self.svc.probe_once()
        self.spawn.run_all()

    def status(self) -> dict[str, Any]:
        status = self.svc.get_pod("inference", "web-1")
        assert status is not None
        return status

    def endpoint_ready(self) -> bool:
        self.endpoints.sync(self.svc.records(), self.source.pods)
        ((_, es),) = self.source.slices.items()
        ((endpoint),) = es["endpoints"]
        return bool(endpoint["conditions"]["ready"])

    def close(self) -> None:
        if self.replica is not None:
            self.replica.stop()


@pytest.fixture
def rented() -> Iterator[list[Rented]]:
    made: list[Rented] = []
    yield made
    for r in made:
        r.close()


def test_a_replica_still_loading_is_running_but_not_ready_and_gets_no_traffic(rented: list[Rented]) -> None:
    r = Rented(readinessProbe=READINESS)
    rented.append(r)
    r.boot(load_seconds=20)
    for _ in range(5):
        r.tick()
    status = r.status()
    assert status["phase"] == "Running"
    assert status["containers"][0]["ready"] is False
    assert "HTTP probe failed with statuscode: 503" in status["message"]
    assert r.endpoint_ready() is False  # listed, as an unready pod is, so no traffic goes to it


def test_once_loaded_it_is_ready_and_its_endpoint_takes_traffic(rented: list[Rented]) -> None:
    r = Rented(readinessProbe=READINESS)
    rented.append(r)
    r.boot(load_seconds=20)
    for _ in range(19):
        r.tick()
    assert r.status()["containers"][0]["ready"] is False
    r.tick()
    r.tick()
    status = r.status()
    assert status["containers"][0]["ready"] is True
    assert "not ready" not in status["message"]
    assert r.endpoint_ready() is True


def test_a_replica_that_stops_answering_goes_unready_then_failed_by_its_liveness_probe(rented: list[Rented]) -> None:
    r = Rented(readinessProbe=READINESS, livenessProbe=LIVENESS)
    rented.append(r)
    r.boot(load_seconds=0)
    r.tick()
    assert r.endpoint_ready() is True
    assert r.replica is not None
    r.replica.stop()  # the model server is gone; the provider still says RUNNING
    for _ in range(3):
        r.tick()
    assert r.status()["phase"] == "Running"
    assert r.endpoint_ready() is False  # readiness: three failures in a row
    for _ in range(7):
        r.tick()
    status = r.status()
    assert (status["phase"], status["reason"]) == ("Failed", "ProbeFailed")
    assert "liveness probe of container server failed 2 times in a row" in status["message"]
    assert "connection refused" in status["message"]
    assert r.provider.deleted == [r.iid]  # nothing keeps billing; the ReplicaSet replaces the pod


def test_without_a_liveness_probe_a_replica_not_ready_for_the_timeout_fails(rented: list[Rented]) -> None:
    r = Rented(readinessProbe=READINESS)
    rented.append(r)
    r.boot(load_seconds=10_000)  # a model that never loads
    r.tick(60)
    assert r.status()["phase"] == "Running"
    r.tick(61)
    status = r.status()
    assert (status["phase"], status["reason"]) == ("Failed", "NotReadyTimeout")
    assert "not ready for 2m" in status["message"]
    assert "statuscode: 503" in status["message"]
    assert r.provider.deleted == [r.iid]
    assert r.svc.tracker.rate("fake-a") > 0  # counted against the provider, like a dead instance


def test_a_pod_without_probes_is_ready_once_running(rented: list[Rented]) -> None:
    r = Rented()
    rented.append(r)
    r.boot()
    assert r.status()["containers"][0]["ready"] is True
    assert r.endpoint_ready() is True


def test_a_pod_with_an_exec_probe_is_refused_for_bursting_before_anything_is_rented() -> None:
    r = rig()
    pod = make_pod()
    pod["spec"]["containers"][0]["readinessProbe"] = {"exec": {"command": ["cat", "/tmp/ready"]}}
    r.submit(pod)
    status = r.status()
    assert (status["phase"], status["reason"]) == ("Failed", "ProviderCreateFailed")
    assert "spec.containers[0].readinessProbe.exec" in status["message"]
    assert r.provider.created == []


def test_a_deleted_replica_drains_through_its_prestop_sleep_with_its_endpoint_terminating(rented: list[Rented]) -> None:
    """As the kubelet runs a preStop sleep before it stops the container: the instance keeps serving, its endpoint
    says terminating (traffic goes elsewhere while what is in flight finishes), then the instance is deleted."""
    r = Rented(readinessProbe=READINESS, lifecycle={"preStop": {"sleep": {"seconds": 5}}})
    rented.append(r)
    r.boot(load_seconds=0)
    r.tick()
    assert r.endpoint_ready() is True
    assert r.svc.delete_pod("inference", "web-1") == 5
    r.source.pods.clear()  # the pod is terminating: no longer live
    r.endpoints.sync(r.svc.records(), r.source.pods)
    ((_, es),) = r.source.slices.items()
    (endpoint,) = es["endpoints"]
    assert endpoint["conditions"] == {"ready": False, "serving": True, "terminating": True}
    r.tick(4)
    r.svc.poll_once()
    assert r.provider.deleted == []  # still serving
    r.tick(1)
    r.svc.poll_once()
    assert r.provider.deleted == [r.iid]
    assert r.svc.get_pod("inference", "web-1") is None
    r.endpoints.sync(r.svc.records(), r.source.pods)
    assert r.source.slices == {}


# --- a restart of the service: readiness that is not known is not taken away --------------------------------------


def _restarted(r: Rented, ready: bool) -> tuple[BurstService, Reconciler]:
    """The service restarted beside the running replica: a new process rebuilding its records from the provider's
    listing, the pod in the cluster as the node last recorded it (``ready`` or not)."""
    (pod,) = r.source.pods
    pod["status"] = {
        "phase": "Running",
        "containerStatuses": [{"name": "server", "ready": ready, "started": True, "restartCount": 0}],
    }
    svc = BurstService(r.svc.settings, {"fake-a": r.provider}, r.source, clock=r.clock, spawn=r.spawn)
    reconciler = Reconciler(svc, r.source, EndpointManager(r.source, r.svc.settings), timer=r.clock)
    assert reconciler.startup()
    r.svc, r.endpoints = svc, reconciler.endpoints  # type: ignore[assignment]
    return svc, reconciler


def test_after_a_restart_a_ready_replica_stays_ready_until_its_probes_say_otherwise(rented: list[Rented]) -> None:
    r = Rented(readinessProbe=READINESS)
    rented.append(r)
    r.boot(load_seconds=0)
    r.tick()
    assert r.endpoint_ready() is True
    svc, reconciler = _restarted(r, ready=True)
    # Rebuilt, its pod not read yet: not listed, so the node keeps the pod's Ready status as it was.
    assert svc.list_pods() == []
    reconciler.run_once()  # the pod read from the cluster: resumed as the cluster last saw it
    assert r.status()["containers"][0]["ready"] is True
    assert r.endpoint_ready() is True
    assert r.replica is not None
    r.replica.stop()  # it really stopped serving while the service was down
    for _ in range(2):
        r.tick()
    assert r.endpoint_ready() is True  # two failures: below the threshold, as for any running replica
    r.tick()
    assert r.endpoint_ready() is False


def test_after_a_restart_the_nodes_post_gives_the_rebuilt_replica_its_last_known_readiness(
    rented: list[Rented],
) -> None:
    r = Rented(readinessProbe=READINESS)
    rented.append(r)
    r.boot(load_seconds=0)
    r.tick()
    svc, _ = _restarted(r, ready=True)
    (pod,) = r.source.pods
    status = svc.create_pod(pod)  # the node posts the pods the service no longer lists, with their status
    assert status["containers"][0]["ready"] is True
    assert [s["name"] for s in svc.list_pods()] == ["web-1"]


def test_after_a_restart_a_replica_the_cluster_saw_unready_waits_for_its_probe(rented: list[Rented]) -> None:
    r = Rented(readinessProbe=READINESS)
    rented.append(r)
    r.boot(load_seconds=5)
    _, reconciler = _restarted(r, ready=False)
    reconciler.run_once()
    assert r.status()["containers"][0]["ready"] is False
    assert r.endpoint_ready() is False
    r.tick(6)
    assert r.status()["containers"][0]["ready"] is True


def test_endpoints_are_left_alone_while_a_rebuilt_replicas_pod_is_unknown(rented: list[Rented]) -> None:
    r = Rented(readinessProbe=READINESS)
    rented.append(r)
    r.boot(load_seconds=0)
    r.tick()
    assert r.endpoint_ready() is True
    before = dict(r.source.slices)
    svc, _ = _restarted(r, ready=True)
    r.endpoints.sync(svc.records(), None)  # the pods could not be listed: nothing is known of it
    assert r.source.slices == before
