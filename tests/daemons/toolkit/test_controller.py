"""What every controller shares: the constructor the runner calls, the loop, the Events and their throttle."""

from __future__ import annotations

import logging
import threading
from dataclasses import KW_ONLY, dataclass
from typing import Any

import pytest

from daemons.toolkit.controller import EventRecorder, OnTheApi, Querying, Replica, Throttle
from daemons.toolkit.kube import KubeError
from daemons.toolkit.prometheus import PrometheusClient, QueryResult
from daemons.toolkit.runner import Wiring, querying

log = logging.getLogger("controller-test")


@dataclass(frozen=True)
class Settings:
    interval_seconds: float = 0.001
    request_timeout_seconds: float = 2.5
    prometheus_url: str = "http://prometheus.invalid:9090"


class Events:
    """The ``create_event`` of a client: what was posted, or a failure to raise."""

    def __init__(self) -> None:
        self.posted: list[dict[str, Any]] = []
        self.fail: Exception | None = None

    def create_event(self, body: dict[str, Any]) -> None:
        if self.fail is not None:
            raise self.fail
        self.posted.append(body)


class OnApi(OnTheApi[Settings, Events, list[str]]):
    logger = log

    def __post_init__(self) -> None:
        self.made_of = (self.settings, self.api, self.metrics, self.identity, self.dry_run)
        self.events = self.recorder(self.api.create_event, "gpucluster-test", clock=self.clock, warn_every=300)

    def cycle(self) -> Tick:
        self.metrics.append("cycle")
        return Tick(self.is_leader(), len(self.metrics))


class Querier:
    def query(self, promql: str) -> QueryResult:
        return QueryResult("vector", ())


@dataclass(frozen=True)
class Tick:
    leader: bool
    ticks: int


@dataclass(eq=False, repr=False)
class Ticking(Querying[Settings, Events, list[str]]):
    logger = log
    step = "tick"
    _: KW_ONLY
    identity: str = "ticking"

    def cycle(self) -> Tick:
        self.metrics.append("tick")
        if len(self.metrics) == 2:
            raise RuntimeError("Prometheus went away")
        return Tick(self.is_leader(), len(self.metrics))


def test_the_constructor_is_settings_inputs_metrics_then_the_replica() -> None:
    settings, api = Settings(), Events()
    c = OnApi(settings, api, [], is_leader=lambda: False, identity="replica-1", clock=lambda: 5.0)
    assert c.made_of == (settings, api, [], "replica-1", False)  # __post_init__ sees every field
    assert c.is_leader() is False
    assert (c.clock(), c.timer is not None) == (5.0, True)
    q = Ticking(settings, Querier(), api, [], is_leader=lambda: True, dry_run=True)
    assert (q.identity, q.dry_run, q.api) == ("ticking", True, api)


def test_controllers_compare_by_identity() -> None:
    a = OnApi(Settings(), Events(), [], is_leader=lambda: True, identity="a")
    b = OnApi(Settings(), Events(), [], is_leader=lambda: True, identity="a")
    assert a != b
    assert len({a, b}) == 2


def test_a_replica_must_implement_its_cycle() -> None:
    @dataclass(eq=False)
    class Bare(Replica[Settings]):
        pass

    with pytest.raises(NotImplementedError):
        Bare(Settings(), is_leader=lambda: True, identity="x").cycle()


def test_the_loop_runs_a_cycle_every_interval_and_logs_a_failed_one_by_its_name(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stop = threading.Event()
    seen: list[str] = []

    class Stopping(list[str]):
        def append(self, item: str) -> None:
            super().append(item)
            seen.append(item)
            if len(self) == 3:
                stop.set()

    q = Ticking(Settings(), Querier(), Events(), Stopping(), is_leader=lambda: True)
    with caplog.at_level(logging.ERROR, logger="controller-test"):
        q.run(stop)
    assert seen == ["tick", "tick", "tick"]
    assert [(r.name, r.getMessage()) for r in caplog.records] == [("controller-test", "tick failed")]


def test_the_runner_builds_a_querying_controller_on_its_settings_clients() -> None:
    api_client = object()
    made: list[tuple[Any, float]] = []

    def kube_api(client: Any, timeout_s: float) -> Events:
        made.append((client, timeout_s))
        return Events()

    wiring: Wiring[Any, Any] = Wiring(
        settings=Settings(), api_client=api_client, metrics=[], identity="r-1", dry_run=True, is_leader=lambda: True
    )
    c = querying(Ticking, kube_api)(wiring)
    assert made == [(api_client, 2.5)]
    assert isinstance(c.querier, PrometheusClient)
    assert (c.querier.base_url, c.querier.timeout_s) == ("http://prometheus.invalid:9090", 2.5)
    assert (c.identity, c.dry_run, c.metrics) == ("r-1", True, [])


def involved(name: str, namespace: str | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node" if namespace is None else "Pod", "name": name, "namespace": namespace}


def test_an_event_carries_the_component_the_replica_and_the_clocks_time() -> None:
    events = Events()
    recorder = EventRecorder(
        events.create_event, component="gpucluster-x", identity="pod-1_7", log=log, clock=lambda: 0
    )
    recorder.record(involved("n1"), "default", "Normal", "Reserved", "reserved for w")
    (body,) = events.posted
    assert body["source"] == {"component": "gpucluster-x"}
    assert (body["reportingComponent"], body["reportingInstance"]) == ("gpucluster-x", "pod-1_7")
    assert (body["reason"], body["type"], body["message"]) == ("Reserved", "Normal", "reserved for w")
    assert body["firstTimestamp"] == "1970-01-01T00:00:00Z"
    assert body["metadata"] == {"generateName": "n1.", "namespace": "default"}


def test_a_dry_run_writes_no_event_and_reads_no_clock() -> None:
    events = Events()

    def clock() -> float:
        raise AssertionError("a dry run reads no clock")

    recorder = EventRecorder(events.create_event, component="c", identity="i", log=log, clock=clock, dry_run=True)
    recorder.record(involved("n1"), "default", "Warning", "Failed", "x")
    assert events.posted == []


def test_a_warning_about_one_object_for_one_reason_goes_out_at_most_every_interval() -> None:
    events, now = Events(), [1000.0]
    recorder = EventRecorder(
        events.create_event, component="c", identity="i", log=log, clock=lambda: now[0], warn_every=300
    )
    for _ in range(3):
        recorder.record(involved("n1"), "default", "Warning", "Failed", "x")
        recorder.record(involved("n1"), "default", "Normal", "Reserved", "x")  # Normal Events are never held back
    recorder.record(involved("n2"), "default", "Warning", "Failed", "x")  # another object
    recorder.record(involved("n1", "team-a"), "team-a", "Warning", "Failed", "x")  # another object, by namespace
    recorder.record(involved("n1"), "default", "Warning", "Other", "x")  # another reason
    now[0] += 300
    recorder.record(involved("n1"), "default", "Warning", "Failed", "x")
    said = [(e["involvedObject"]["name"], e["involvedObject"]["namespace"], e["reason"]) for e in events.posted]
    assert said == [
        ("n1", None, "Failed"),
        ("n1", None, "Reserved"),
        ("n1", None, "Reserved"),
        ("n1", None, "Reserved"),
        ("n2", None, "Failed"),
        ("n1", "team-a", "Failed"),
        ("n1", None, "Other"),
        ("n1", None, "Failed"),
    ]


def test_a_failed_event_is_logged_never_raised(caplog: pytest.LogCaptureFixture) -> None:
    events = Events()
    events.fail = KubeError("create event: HTTP 403: forbidden")
    recorder = EventRecorder(events.create_event, component="c", identity="i", log=log)
    with caplog.at_level(logging.WARNING, logger="controller-test"):
        recorder.record(involved("n1"), "default", "Warning", "Failed", "x")
    (record,) = caplog.records
    assert record.getMessage() == "cannot record an event"
    assert (record.reason, record.error) == ("Failed", "create event: HTTP 403: forbidden")  # type: ignore[attr-defined]


def test_throttle_lets_a_key_through_once_per_interval() -> None:
    throttle = Throttle(60)
    assert throttle.due("query", 0.0)
    assert not throttle.due("query", 59.9)
    assert throttle.due("ledger", 59.9)
    assert throttle.due("query", 60.0)
    assert not throttle.due("query", 100.0)
