"""The simulated cluster's Service path: kube-proxy's choice of endpoints, and in-cluster replicas that serve only
while their pod says so."""

from __future__ import annotations

import http.client
import ipaddress
from collections.abc import Iterator
from typing import Any

import pytest

from sim.fakes.replica import ReplicaServer
from tests.support.sim import load_sim_module

serving = load_sim_module("serving")


def endpoint(
    address: str, *, ready: bool | None = True, serving_: bool | None = None, terminating: bool = False
) -> Any:
    conditions: dict[str, Any] = {"terminating": terminating}
    if ready is not None:
        conditions["ready"] = ready
    if serving_ is not None:
        conditions["serving"] = serving_
    return {"addresses": [address], "conditions": conditions}


def slice_of(*endpoints: Any, port: int = 8080, name: str = "http", kind: str = "IPv4") -> Any:
    return {"addressType": kind, "ports": [{"name": name, "port": port}], "endpoints": list(endpoints)}


def test_new_connections_go_to_ready_endpoints_only() -> None:
    slices = [
        slice_of(endpoint("10.0.0.1"), endpoint("10.0.0.2", ready=False)),
        slice_of(endpoint("198.18.0.7", ready=None), port=10042),  # no ready condition: ready, as the API says
    ]
    assert serving.route_targets(slices, "http") == [("10.0.0.1", 8080), ("198.18.0.7", 10042)]
    assert serving.route_targets(slices, "metrics") == []  # the Service port names the slice's port


def test_terminating_endpoints_serve_only_when_none_is_ready() -> None:
    leaving = endpoint("10.0.0.3", ready=False, serving_=True, terminating=True)
    loading = endpoint("10.0.0.4", ready=False, serving_=False)
    assert serving.route_targets([slice_of(leaving, loading)], "http") == [("10.0.0.3", 8080)]
    assert serving.route_targets([slice_of(leaving, endpoint("10.0.0.1"))], "http") == [("10.0.0.1", 8080)]


def test_the_prestop_sleep_is_the_longest_containers_within_the_grace_period() -> None:
    def pod(*sleeps: int, grace: int | None = None) -> Any:
        spec: dict[str, Any] = {
            "containers": [
                {"name": f"c{i}", "lifecycle": {"preStop": {"sleep": {"seconds": s}}}} for i, s in enumerate(sleeps)
            ]
        }
        if grace is not None:
            spec["terminationGracePeriodSeconds"] = grace
        return {"spec": spec}

    assert serving.prestop_sleep_seconds(pod(5, 10)) == 10
    assert serving.prestop_sleep_seconds(pod(60, grace=20)) == 20
    assert serving.prestop_sleep_seconds({"spec": {"containers": [{"name": "c"}]}}) == 0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def pod(ip: str, *, ready: bool, deleting: bool = False, prestop: int = 0, node: str = "gpu-node-001") -> Any:
    meta: dict[str, Any] = {"name": f"sd-{ip}"}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-03T10:00:00Z"
    container: dict[str, Any] = {"name": "server"}
    if prestop:
        container["lifecycle"] = {"preStop": {"sleep": {"seconds": prestop}}}
    return {
        "metadata": meta,
        "spec": {"nodeName": node, "containers": [container]},
        "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


@pytest.fixture
def world() -> Iterator[tuple[Any, Any, Clock]]:
    clock = Clock()
    replicas = serving.Replicas(rented=ipaddress.ip_network("127.0.0.0/8"), clock=clock)
    proxy = serving.ServiceProxy("sd-serve", 0, replicas)
    yield replicas, proxy, clock
    proxy.close()
    replicas.close()


def get(port: int) -> int | str:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=3)
    try:
        conn.request("GET", "/generate")
        return conn.getresponse().status
    except (OSError, http.client.HTTPException) as exc:
        return type(exc).__name__
    finally:
        conn.close()


def test_an_in_cluster_replica_serves_through_the_service_only_while_its_pod_says_so(world: Any) -> None:
    replicas, proxy, clock = world
    proxy.targets = [("10.0.0.5", 8080)]
    replicas.sync([pod("10.0.0.5", ready=False)], "gpu-burst")
    assert get(proxy.port) == 503  # loading (kube-proxy would not route to it; the stand-in does not lie either)
    replicas.sync([pod("10.0.0.5", ready=True)], "gpu-burst")
    assert get(proxy.port) == 200
    replicas.sync([pod("10.0.0.5", ready=True, deleting=True, prestop=5)], "gpu-burst")
    assert get(proxy.port) == 200  # its preStop sleep: still serving
    clock.now += 5
    replicas.sync([], "gpu-burst")
    assert get(proxy.port) in ("RemoteDisconnected", "ConnectionResetError")  # gone: the connection is reset


def test_a_rented_replica_is_reached_at_its_own_address_and_its_pod_gets_no_stand_in(world: Any) -> None:
    replicas, proxy, clock = world
    rented = ReplicaServer("rented", "127.0.0.1", 0, started_at=clock.now, load_seconds=20, clock=clock)
    try:
        replicas.sync([pod("127.0.0.1", ready=True, node="gpu-burst")], "gpu-burst")
        assert replicas.by_ip == {}
        proxy.targets = [("127.0.0.1", rented.port)]
        assert get(proxy.port) == 503
        clock.now += 20
        assert get(proxy.port) == 200
    finally:
        rented.stop()


def test_with_no_endpoint_the_connection_is_reset(world: Any) -> None:
    _, proxy, _ = world
    proxy.targets = []
    assert get(proxy.port) in ("RemoteDisconnected", "ConnectionResetError")


def test_request_heads_are_counted_also_when_a_read_splits_one() -> None:
    counter = serving.RequestCounter()
    assert counter.feed(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\n") == 1
    assert counter.feed(b"Host: x\r\n\r") == 0  # the empty line split across two reads
    assert counter.feed(b"\n") == 1
    assert counter.feed(b"") == 0


def test_the_service_counts_the_requests_it_carries_keep_alive_included(world: Any) -> None:
    replicas, proxy, _ = world
    proxy.targets = [("10.0.0.5", 8080)]
    replicas.sync([pod("10.0.0.5", ready=True)], "gpu-burst")
    conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=3)
    try:
        for _ in range(3):  # one connection, three requests
            conn.request("GET", "/generate")
            assert conn.getresponse().read() is not None
    finally:
        conn.close()
    assert get(proxy.port) == 200
    ref = serving.ServiceRef("inference", "sd-serve", proxy.port)
    text = serving.exposition([ref], {"sd-serve": proxy})
    # the text format Prometheus scrapes, the counter's name and labels the adapter's query reads
    assert 'gpucluster_sim_service_requests_total{namespace="inference",service="sd-serve"} 4\n' in text
    assert "# TYPE gpucluster_sim_service_requests_total counter\n" in text
