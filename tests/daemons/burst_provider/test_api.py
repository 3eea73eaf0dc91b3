"""The provider API end to end over HTTP on an ephemeral port, with real background threads."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from daemons.burst_provider.api import serve
from daemons.burst_provider.providers.base import InstanceState
from daemons.burst_provider.reconcile import Reconciler
from daemons.burst_provider.service import BurstService
from daemons.toolkit.http import HttpService
from tests.daemons.burst_provider.support import FakeSource, MemoryProvider, make_pod, make_settings

WAIT_S = 10.0  # upper bound for background work to land; tests never assert on durations


def wait_for(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


class Client:
    def __init__(self, server: HttpService) -> None:
        self.base = server.url

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=WAIT_S) as resp:
                raw = resp.read()
                status = resp.status
                ctype = resp.headers.get("Content-Type", "")
        except urllib.error.HTTPError as err:
            raw, status, ctype = err.read(), err.code, err.headers.get("Content-Type", "")
        return status, json.loads(raw) if ctype.startswith("application/json") else raw.decode()


@pytest.fixture
def stack() -> Iterator[tuple[Client, MemoryProvider, Reconciler, BurstService]]:
    provider = MemoryProvider("fake-a")
    settings = make_settings()
    svc = BurstService(settings, {"fake-a": provider}, FakeSource())
    rec = Reconciler(svc, None)
    server = serve(svc, settings, "127.0.0.1", 0, rec.ready.is_set)
    try:
        yield Client(server), provider, rec, svc
    finally:
        if provider.create_gate is not None:
            provider.create_gate.set()
        server.stop()


def test_healthz_waits_for_the_rebuild_and_post_is_refused_until_then(stack: Any) -> None:
    client, _, rec, _ = stack
    assert client.call("GET", "/healthz")[0] == 503
    status, body = client.call("POST", "/v1/pods", {"pod": make_pod()})
    assert status == 503
    assert "rebuilding" in body["error"]
    rec.startup()
    assert client.call("GET", "/healthz") == (200, "ok\n")


def test_livez_answers_while_the_rebuild_waits(stack: Any) -> None:
    """Liveness is the process serving: a provider's API down at start keeps /healthz at 503 for the startup grace,
    and the kubelet must not restart the service for it (the wait would only start again)."""
    client, _, _, _ = stack
    assert client.call("GET", "/healthz")[0] == 503
    assert client.call("GET", "/livez") == (200, "ok\n")


def test_post_returns_202_while_the_provider_is_still_creating(stack: Any) -> None:
    client, provider, rec, svc = stack
    rec.startup()
    provider.create_gate = threading.Event()  # create_instance blocks until the test opens the gate
    status, body = client.call("POST", "/v1/pods", {"pod": make_pod()})
    assert status == 202
    assert body["status"]["phase"] == "Pending"
    assert body["status"]["reason"] == "ProviderCreating"
    assert provider.created == []  # the answer came before the provider finished
    provider.create_gate.set()
    wait_for(lambda: len(provider.created) == 1)
    provider.set_state(provider.created[0], InstanceState.RUNNING)
    svc.poll_once()
    status, pod = client.call("GET", "/v1/pods/inference/web-1")
    assert status == 200
    assert (pod["phase"], pod["address"], pod["uid"]) == ("Running", "203.0.113.1", "uid-web-1")
    status, listing = client.call("GET", "/v1/pods")
    assert [p["name"] for p in listing["pods"]] == ["web-1"]
    status, logs = client.call("GET", "/v1/pods/inference/web-1/logs?container=server&tail=5")
    assert (status, logs) == (200, "logs of fake-a-i1/server tail=5\n")
    status, deleted = client.call("DELETE", "/v1/pods/inference/web-1?uid=uid-web-1")
    assert (status, deleted) == (200, {"deleted": True, "drainSeconds": 0.0})
    wait_for(lambda: client.call("GET", "/v1/pods/inference/web-1")[0] == 404)
    assert provider.deleted == ["fake-a-i1"]


def test_errors_are_json(stack: Any) -> None:
    client, _, rec, _ = stack
    rec.startup()
    assert client.call("GET", "/v1/pods/inference/nope") == (404, {"error": "pod inference/nope is unknown"})
    assert client.call("DELETE", "/v1/pods/inference/nope?uid=x")[0] == 404
    status, body = client.call("POST", "/v1/pods", {"notapod": 1})
    assert status == 400
    assert "pod" in body["error"]
    status, body = client.call("POST", "/v1/pods", {"pod": {"metadata": {"name": "x"}}})
    assert status == 400
    assert "uid" in body["error"]
    assert client.call("GET", "/v1/nothing")[0] == 404
    status, body = client.call("GET", "/v1/pods/inference/nope/logs?tail=many")
    assert status == 400


def test_capacity_and_metrics(stack: Any) -> None:
    client, _, _, _ = stack
    status, cap = client.call("GET", "/v1/capacity")
    assert status == 200
    assert cap["nvidia.com/gpu"] == "16"
    status, text = client.call("GET", "/metrics")
    assert status == 200
    assert "gpucluster_burst_reconcile_duration_seconds" in text
