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
from daemons.burst_provider.fakes.replica import ReplicaServer
from daemons.burst_provider.providers.base import InstanceState
from daemons.burst_provider.service import BurstService
from tests.daemons.burst_provider.support import (
    FakeSource,
    ManualClock,
    MemoryProvider,
    QueuedSpawn,
    make_pod,
    make_settings,
    provider_entry,
)

READINESS = {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 1}
LIVENESS = {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 5, "failureThreshold": 2}
_hosts = itertools.count(1)


class Rented:
    """One burst pod on a memory provider whose instance answers HTTP at a loopback address of its own."""

    def __init__(self, **probes: Any) -> None:
        self.clock = ManualClock()
        self.spawn = QueuedSpawn()
        self.provider = MemoryProvider("fake-a")
        self.source = FakeSource()
        self.source.svcs["inference"] = [
            {
                "metadata": {"name": "web", "namespace": "inference"},
                "spec": {"selector": {"app": "web"}, "ports": [{"name": "web", "port": 80, "targetPort": "http"}]},
            }
        ]
        settings = make_settings(provider_entry("fake-a"), notReadyTimeout="2m")
        self.svc = BurstService(settings, {"fake-a": self.provider}, self.source, clock=self.clock, spawn=self.spawn)
        self.endpoints = EndpointManager(self.source, settings)
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
    provider = MemoryProvider("fake-a")
    spawn = QueuedSpawn()
    svc = BurstService(make_settings(), {"fake-a": provider}, FakeSource(), clock=ManualClock(), spawn=spawn)
    pod = make_pod()
    pod["spec"]["containers"][0]["readinessProbe"] = {"exec": {"command": ["cat", "/tmp/ready"]}}
    svc.create_pod(pod)
    spawn.run_all()
    status = svc.get_pod("inference", "web-1")
    assert status is not None
    assert (status["phase"], status["reason"]) == ("Failed", "ProviderCreateFailed")
    assert "spec.containers[0].readinessProbe.exec" in status["message"]
    assert provider.created == []


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
