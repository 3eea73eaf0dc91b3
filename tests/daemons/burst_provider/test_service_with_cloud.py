"""The service against the fake cloud over HTTP through the real adapter: running, death, restart, orphans."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from contract.burst_settings import BurstSettings
from daemons.burst_provider.providers.base import AdapterContext
from daemons.burst_provider.reconcile import Reconciler
from daemons.burst_provider.registry import build_providers
from daemons.burst_provider.secrets import SecretStore
from daemons.burst_provider.service import BurstService
from sim.fakes.cloud_server import FakeCloud, FakeCloudServer, Knobs
from tests.daemons.burst_provider.support import (
    FakeSource,
    ManualClock,
    make_pod,
    make_settings,
    provider_entry,
    sync_spawn,
)


@pytest.fixture
def cloud() -> Iterator[tuple[FakeCloud, FakeCloudServer, ManualClock]]:
    clock = ManualClock()
    fake = FakeCloud(Knobs(boot_seconds=5, capacity={"H100": 4}), clock=clock)
    with FakeCloudServer(fake) as server:
        yield fake, server, clock


def start(server: FakeCloudServer, clock: ManualClock, source: FakeSource) -> tuple[BurstService, Reconciler]:
    entry = provider_entry("fake-a", max_gpus=4)
    entry["fake"] = {"url": server.url}
    settings: BurstSettings = make_settings(entry)
    providers = build_providers(settings, AdapterContext(SecretStore.from_values({})))
    svc = BurstService(settings, providers, source, clock=clock, spawn=sync_spawn)
    rec = Reconciler(svc, source, timer=clock)
    assert rec.startup()
    return svc, rec


def test_pod_runs_dies_and_is_rebuilt_after_a_restart(cloud: tuple[FakeCloud, FakeCloudServer, ManualClock]) -> None:
    fake, server, clock = cloud
    source = FakeSource()
    svc, _ = start(server, clock, source)
    a, b = make_pod("web-a"), make_pod("web-b")
    source.pods += [a, b]
    svc.create_pod(a)
    svc.create_pod(b)
    assert svc.get_pod("inference", "web-a")["phase"] == "Pending"  # type: ignore[index]
    clock.advance(6)
    svc.poll_once()
    status = svc.get_pod("inference", "web-a")
    assert status is not None
    assert status["phase"] == "Running"
    assert status["address"].startswith("198.51.100.")
    fake.kill(status["instanceId"], 137)
    svc.poll_once()
    dead = svc.get_pod("inference", "web-a")
    assert dead is not None
    assert (dead["phase"], dead["reason"], dead["containers"][0]["exitCode"]) == ("Failed", "InstanceDied", 137)

    # a restarted service knows web-b from the cloud's listing alone
    svc2, _ = start(server, clock, source)
    rebuilt = svc2.get_pod("inference", "web-b")
    assert rebuilt is not None
    assert (rebuilt["phase"], rebuilt["provider"]) == ("Running", "fake-a")


def test_orphans_in_the_cloud_are_deleted(cloud: tuple[FakeCloud, FakeCloudServer, ManualClock]) -> None:
    _, server, clock = cloud
    source = FakeSource()
    svc, rec = start(server, clock, source)
    pod = make_pod()
    svc.create_pod(pod)  # never listed as live in the source cluster: the pod is gone
    report = rec.run_once()
    assert len(report.orphans_deleted) == 1
    clock.advance(1)
    svc.poll_once()
    status = svc.get_pod("inference", "web-1")
    assert status is not None
    assert status["phase"] == "Failed"
    assert status["reason"] in ("InstanceDied", "InstanceVanished")
