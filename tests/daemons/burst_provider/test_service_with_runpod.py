"""The service with the RunPod adapter against the fake RunPod v2 server: what the service makes of RunPod's ways.

A pod that runs but never gets an address fails after ``creationTimeout``; a stopped pod (which bills its disk) and
a container RunPod restarted (which keeps billing) fail their replica and are deleted; a GPU type the catalogue has
no stock of is not placed on RunPod.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from daemons.burst_provider.providers.base import AdapterContext
from daemons.burst_provider.registry import build_providers
from daemons.burst_provider.secrets import SecretStore
from daemons.burst_provider.service import BurstService
from sim.fakes.runpod_server import FakeRunpod, FakeRunpodServer
from tests.daemons.burst_provider.support import FakeSource, ManualClock, make_pod, make_settings, provider_entry

KEY = "rpa_SERVICEKEY0123456789"
H100_ID = "NVIDIA H100 80GB HBM3"
BOOT = 30.0


@dataclass
class World:
    api: FakeRunpod
    clock: ManualClock
    svc: BurstService

    def status(self, name: str = "web-1") -> dict[str, Any]:
        status = self.svc.get_pod("inference", name)
        assert status is not None
        return status


@pytest.fixture
def world() -> Iterator[World]:
    clock = ManualClock()
    api = FakeRunpod(KEY, boot_seconds=BOOT, clock=clock, capacity={H100_ID: 4})
    with FakeRunpodServer(api) as server:
        entry = provider_entry("runpod", max_gpus=4)
        del entry["fake"]
        entry.update(kind="runpod", runpod={"url": server.base_url, "apiKeySecret": "runpodApiKey"})
        settings = make_settings(entry, creationTimeout="2m")
        providers = build_providers(settings, AdapterContext(SecretStore.from_values({"runpodApiKey": KEY})))
        svc = BurstService(settings, providers, FakeSource(), clock=clock, spawn=lambda target, name: target())
        yield World(api, clock, svc)


def _pod(name: str = "web-1") -> dict[str, Any]:
    pod = make_pod(name)
    del pod["spec"]["containers"][0]["command"]  # RunPod v2 takes no entrypoint
    return pod


def test_a_pod_runs_once_runpod_gives_it_an_address(world: World) -> None:
    world.svc.create_pod(_pod())
    assert world.status()["phase"] == "Pending"
    world.clock.advance(BOOT)
    world.svc.poll_once()
    running = world.status()
    assert running["phase"] == "Running"
    assert running["address"].startswith("203.0.113.")


def test_a_pod_that_never_gets_an_address_fails_after_creation_timeout_and_is_deleted(world: World) -> None:
    world.api.never_address = True
    world.svc.create_pod(_pod())
    world.clock.advance(BOOT)
    world.svc.poll_once()
    assert world.status()["phase"] == "Pending"
    world.clock.advance(121)
    world.svc.poll_once()
    failed = world.status()
    assert (failed["phase"], failed["reason"]) == ("Failed", "ProviderTimeout")
    assert world.api.billing() == {}  # deleted: nothing bills


@pytest.mark.parametrize("how", ["stopped", "restarted"])
def test_a_stopped_or_restarted_pod_fails_its_replica_and_is_deleted(world: World, how: str) -> None:
    world.svc.create_pod(_pod())
    world.clock.advance(BOOT)
    world.svc.poll_once()
    running = world.status()
    assert running["phase"] == "Running"
    if how == "stopped":
        world.api.set_status(running["instanceId"], "EXITED")
    else:
        world.api.exit_container(running["instanceId"])
    world.svc.poll_once()
    failed = world.status()
    assert (failed["phase"], failed["reason"]) == ("Failed", "InstanceDied")
    assert world.api.billing() == {}


def test_a_gpu_type_without_stock_is_not_placed_on_runpod(world: World) -> None:
    world.api.capacity[H100_ID] = 0
    world.svc.create_pod(_pod())
    failed = world.status()
    assert (failed["phase"], failed["reason"]) == ("Failed", "NoCapacity")
    assert "capacity: 0 H100 GPUs free" in failed["message"]
    assert world.api.pod_count() == 0


def test_runpod_out_of_capacity_spills_to_the_next_provider_in_the_same_placement() -> None:
    """RunPod is the cheaper and answers the create 400 in its words for no capacity: nothing was created there, so
    the same placement goes on to the fake cloud at once, with no Failed pod and nothing billed at RunPod."""
    from sim.fakes.cloud_server import FakeCloud, FakeCloudServer, Knobs  # noqa: PLC0415

    clock = ManualClock()
    api = FakeRunpod(KEY, boot_seconds=BOOT, clock=clock, capacity={H100_ID: 4})
    cloud = FakeCloud(Knobs(boot_seconds=BOOT, capacity={"H100": 4}), clock=clock)
    with FakeRunpodServer(api) as rp_server, FakeCloudServer(cloud) as cloud_server:
        runpod = provider_entry("runpod", price=1.0, max_gpus=4)
        del runpod["fake"]
        runpod.update(kind="runpod", runpod={"url": rp_server.base_url, "apiKeySecret": "runpodApiKey"})
        fake = provider_entry("cloud", price=2.5, max_gpus=4, fake={"url": cloud_server.url})
        settings = make_settings(runpod, fake)
        providers = build_providers(settings, AdapterContext(SecretStore.from_values({"runpodApiKey": KEY})))
        svc = BurstService(settings, providers, FakeSource(), clock=clock, spawn=lambda target, name: target())
        api.refuse(400)
        svc.create_pod(_pod())
        clock.advance(BOOT)
        svc.poll_once()
        status = svc.get_pod("inference", "web-1")
        assert status is not None
        assert (status["phase"], status["provider"]) == ("Running", "cloud")
        assert api.billing() == {}
        assert api.stats()["refusals"] == 1
        assert cloud.stats()["liveInstances"] == 1
