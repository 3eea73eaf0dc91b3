"""The kubelet's probe rules for rented replicas: what is refused, and how results become Ready or a kill."""

from __future__ import annotations

from typing import Any

import pytest

from daemons.burst_provider.probes import (
    Killed,
    Probe,
    ProbeSpecError,
    ReplicaProbes,
    parse_probe,
    pod_probes,
)
from tests.daemons.burst_provider.support import make_pod

CONTAINER = {"name": "server", "ports": [{"name": "http", "containerPort": 8080}]}


def pod_with(**probes: Any) -> dict[str, Any]:
    pod = make_pod()
    pod["spec"]["containers"][0].update(probes)
    return pod


def test_an_http_probe_gets_the_kubelet_defaults_and_its_named_port() -> None:
    p = parse_probe("readiness", {"httpGet": {"path": "health", "port": "http"}}, CONTAINER, "x")
    assert (p.action, p.port, p.port_name, p.path, p.scheme) == ("http", 8080, "http", "/health", "http")
    assert (p.period, p.timeout, p.success_threshold, p.failure_threshold, p.initial_delay) == (10, 1, 1, 3, 0)


def test_a_tcp_probe_by_number_finds_the_ports_name() -> None:
    p = parse_probe("liveness", {"tcpSocket": {"port": 8080}, "periodSeconds": 2}, CONTAINER, "x")
    assert (p.action, p.port, p.port_name, p.period) == ("tcp", 8080, "http", 2)


@pytest.mark.parametrize(
    ("raw", "field", "why"),
    [
        ({"exec": {"command": ["cat", "/ready"]}}, "readinessProbe.exec", "runs inside the container"),
        ({"grpc": {"port": 9000}}, "readinessProbe.grpc", "gRPC"),
        ({"httpGet": {"port": 8080, "host": "10.0.0.1"}}, "readinessProbe.httpGet.host", "its own address"),
        ({"tcpSocket": {"port": "metrics"}}, "readinessProbe.tcpSocket.port", "no container port is named"),
        ({"httpGet": {"port": 8080}, "periodSeconds": 0}, "readinessProbe.periodSeconds", "at least 1"),
        ({"httpGet": {"port": 8080, "scheme": "FTP"}}, "readinessProbe.httpGet.scheme", "HTTP or HTTPS"),
        ({}, "readinessProbe", "exactly one of"),
    ],
)
def test_what_cannot_run_against_a_rented_replica_is_refused_by_field(raw: object, field: str, why: str) -> None:
    with pytest.raises(ProbeSpecError) as err:
        pod_probes(pod_with(readinessProbe=raw))
    assert f"spec.containers[0].{field}" in str(err.value)
    assert why in str(err.value)


def test_a_liveness_probe_must_succeed_once() -> None:
    with pytest.raises(ProbeSpecError, match=r"livenessProbe.successThreshold: must be 1"):
        pod_probes(pod_with(livenessProbe={"tcpSocket": {"port": 8080}, "successThreshold": 2}))


def probe(kind: str, **kw: Any) -> Probe:
    return Probe(kind, "server", "http", 8080, "http", **kw)  # type: ignore[arg-type]


def run(rp: ReplicaProbes, now: float, ok: bool) -> list[Killed]:
    """Run every due probe at ``now`` with the same outcome; the kills it caused."""
    kills = [rp.record(s, ok, "" if ok else "HTTP 503", now) for s in rp.due(now)]
    return [k for k in kills if k is not None]


def test_readiness_starts_failed_and_needs_its_success_threshold() -> None:
    rp = ReplicaProbes.for_pod([probe("readiness", success_threshold=2, period=5)], ["server"], 100.0)
    assert not rp.ready()
    run(rp, 100.0, ok=True)
    assert not rp.ready()  # one success of two
    assert rp.due(104.0) == []  # not before the period
    run(rp, 105.0, ok=True)
    assert rp.ready()


def test_readiness_stays_until_its_failure_threshold() -> None:
    rp = ReplicaProbes.for_pod([probe("readiness", period=1)], ["server"], 0.0)
    run(rp, 0.0, ok=True)
    assert rp.ready()
    run(rp, 1.0, ok=False)
    run(rp, 2.0, ok=False)
    assert rp.ready()  # two failures of three
    run(rp, 3.0, ok=False)
    assert not rp.ready()
    assert "HTTP 503" in rp.failing()


def test_a_container_without_a_readiness_probe_is_ready_once_running() -> None:
    assert ReplicaProbes.for_pod([probe("liveness")], ["server"], 0.0).ready()
    assert ReplicaProbes.for_pod([], ["server"], 0.0).ready()


def test_the_initial_delay_counts_from_when_the_instance_ran() -> None:
    rp = ReplicaProbes.for_pod([probe("readiness", initial_delay=30)], ["server"], 100.0)
    assert rp.due(129.0) == []
    assert len(rp.due(130.0)) == 1


def test_a_startup_probe_holds_back_readiness_and_liveness_until_it_passes() -> None:
    probes = [probe("startup", period=1, failure_threshold=30), probe("readiness", period=1), probe("liveness")]
    rp = ReplicaProbes.for_pod(probes, ["server"], 0.0)
    assert [s.probe.kind for s in rp.due(0.0)] == ["startup"]
    rp.states[0].in_flight = False
    run(rp, 1.0, ok=True)  # startup passes
    assert not rp.ready()  # readiness has not run yet
    assert sorted(s.probe.kind for s in rp.due(2.0)) == ["liveness", "readiness"]


def test_a_liveness_probe_kills_at_its_failure_threshold_and_not_before() -> None:
    rp = ReplicaProbes.for_pod([probe("liveness", period=1, failure_threshold=2)], ["server"], 0.0)
    assert run(rp, 0.0, ok=False) == []
    (kill,) = run(rp, 1.0, ok=False)
    assert (kill.kind, kill.container, kill.failures) == ("liveness", "server", 2)
    assert "failed 2 times in a row: HTTP 503" in kill.message()
    assert rp.due(10.0) == []  # on hold: the container is gone


def test_a_startup_probe_that_never_passes_kills() -> None:
    rp = ReplicaProbes.for_pod([probe("startup", period=1, failure_threshold=3)], ["server"], 0.0)
    kills = [k for t in range(3) for k in run(rp, float(t), ok=False)]
    assert [k.kind for k in kills] == ["startup"]
