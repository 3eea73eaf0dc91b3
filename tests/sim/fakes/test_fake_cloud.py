"""The fake rental cloud and its adapter: lifecycle, knobs, stats, determinism, persistence and the CLI process."""

from __future__ import annotations

import ipaddress
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from contract.burst_settings import ProviderSettings
from daemons.burst_provider.providers.base import (
    AdapterContext,
    CapacityError,
    ContainerSpec,
    GpuTypePrice,
    InstanceSpec,
    InstanceState,
    InstanceTags,
    Port,
    ProviderError,
)
from daemons.burst_provider.providers.fake import FakeCloudProvider
from daemons.burst_provider.registry import adapter_class
from daemons.burst_provider.secrets import SecretStore
from sim.fakes._http import ManualClock
from sim.fakes.cloud_server import ADDRESS_FORMS, FakeCloud, FakeCloudServer, Knobs, reported

BOOT = 5.0


@dataclass
class Env:
    clock: ManualClock
    cloud: FakeCloud
    server: FakeCloudServer
    provider: FakeCloudProvider

    def knobs(self, **update: Any) -> dict[str, Any]:
        knobs: dict[str, Any] = http_json(self.server.url + "/admin/knobs", update)
        return knobs

    def stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = http_json(self.server.url + "/admin/stats")
        return stats


def http_json(url: str, body: object = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="GET" if body is None else "POST")
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=5) as resp:
        return json.loads(resp.read())


def start(knobs: Knobs | None = None, state_file: Path | None = None, clock: ManualClock | None = None) -> Env:
    clock = clock or ManualClock()
    cloud = FakeCloud(knobs or Knobs(boot_seconds=BOOT, capacity={"H100": 8}), clock=clock, state_file=state_file)
    server = FakeCloudServer(cloud)
    server.start()
    provider = FakeCloudProvider("fake-a", server.url, {"H100": GpuTypePrice(2.5)}, max_gpus=16, backoff=0.0)
    return Env(clock, cloud, server, provider)


@pytest.fixture
def env() -> Iterator[Env]:
    e = start()
    yield e
    e.server.stop()


def spec(node: str = "gpu-burst", uid: str = "uid-1", gpus: int = 1, gpu_type: str = "H100") -> InstanceSpec:
    c = ContainerSpec(
        name="server", image="ghcr.io/example/sd:1", env=(("A", "1"),), ports=(Port(8080, "TCP", "http"),)
    )
    return InstanceSpec(InstanceTags(node, "inference", "sd-serve", uid), gpu_type, gpus, (c,))


@pytest.mark.parametrize(
    ("form", "text"),
    [("dotted", "127.0.0.5"), ("decimal", "2130706437"), ("short", "127.5"), ("octal", "0177.00.00.05")],
)
def test_each_address_form_is_read_back_as_the_same_ipv4_address_by_a_resolver(form: str, text: str) -> None:
    assert reported("127.0.0.5", form) == text
    assert socket.inet_aton(text) == socket.inet_aton("127.0.0.5")


def test_an_unknown_address_form_is_refused() -> None:
    assert "hex" not in ADDRESS_FORMS
    with pytest.raises(ValueError, match="addressForm must be one of"):
        reported("127.0.0.5", "hex")


def test_instance_boots_after_boot_seconds_with_address_and_ports(env: Env) -> None:
    inst = env.provider.create_instance(spec())
    assert inst.state is InstanceState.CREATING
    assert inst.tags == InstanceTags("gpu-burst", "inference", "sd-serve", "uid-1")
    env.clock.advance(BOOT - 0.5)
    assert env.provider.get_instance(inst.instance_id).state is InstanceState.CREATING  # type: ignore[union-attr]
    env.clock.advance(0.5)
    running = env.provider.get_instance(inst.instance_id)
    assert running is not None
    assert running.state is InstanceState.RUNNING
    assert ipaddress.ip_address(running.address) in ipaddress.ip_network("198.51.100.0/24")
    assert running.ports == (Port(8080, "TCP", "http"),)
    assert running.gpu_type == "H100"
    assert running.gpu_count == 1


def test_list_is_filtered_by_node_tag(env: Env) -> None:
    mine = env.provider.create_instance(spec(node="gpu-burst", uid="u-1"))
    env.provider.create_instance(spec(node="elsewhere", uid="u-2"))
    listed = env.provider.list_instances("gpu-burst")
    assert [(i.instance_id, i.tags.uid) for i in listed] == [(mine.instance_id, "u-1")]


def test_delete_terminates_then_leaves_listings_after_ttl(env: Env) -> None:
    inst = env.provider.create_instance(spec())
    env.provider.delete_instance(inst.instance_id)
    after = env.provider.get_instance(inst.instance_id)
    assert after is not None
    assert after.state is InstanceState.TERMINATED
    assert [i.state for i in env.provider.list_instances("gpu-burst")] == [InstanceState.TERMINATED]
    env.clock.advance(Knobs().terminated_ttl_seconds)
    assert env.provider.get_instance(inst.instance_id) is None
    assert env.provider.list_instances("gpu-burst") == []
    env.provider.delete_instance(inst.instance_id)  # unknown: not an error
    assert env.stats()["deletes"] == 1


def test_failure_rate_one_refuses_every_create(env: Env) -> None:
    env.knobs(createFailureRate=1.0)
    for uid in ("a", "b", "c"):
        with pytest.raises(ProviderError, match="create_instance: HTTP 503"):
            env.provider.create_instance(spec(uid=uid))
    stats = env.stats()
    assert stats["createFailures"] == 3
    assert stats["creates"] == 0
    env.knobs(createFailureRate=0.0)
    env.provider.create_instance(spec(uid="d"))
    assert env.stats()["creates"] == 1


def test_admin_kill_fails_the_instance_with_137(env: Env) -> None:
    inst = env.provider.create_instance(spec())
    env.clock.advance(BOOT)
    killed = http_json(f"{env.server.url}/admin/instances/{inst.instance_id}/kill", {})
    assert killed["state"] == "failed"
    dead = env.provider.get_instance(inst.instance_id)
    assert dead is not None
    assert dead.state is InstanceState.FAILED
    assert dead.exit_code == 137
    assert dead.address == ""
    assert env.stats()["deaths"] == 1


def test_capacity_exhausted_is_refused_and_freed_by_delete(env: Env) -> None:
    first = env.provider.create_instance(spec(uid="a", gpus=6))
    env.provider.create_instance(spec(uid="b", gpus=2))
    assert env.provider.offers()[0].available_gpus == 0
    with pytest.raises(CapacityError, match="insufficient capacity: 1 H100 wanted, 0 free"):
        env.provider.create_instance(spec(uid="c", gpus=1))
    env.provider.delete_instance(first.instance_id)
    assert env.provider.offers()[0].available_gpus == 6
    env.provider.create_instance(spec(uid="c", gpus=1))


def test_offers_follow_price_knob_configured_types_and_cap(env: Env) -> None:
    env.knobs(pricePerGpuHour={"H100": 3.25, "A10": 0.4}, capacity={"H100": 64, "A10": 4})
    offers = env.provider.offers()
    assert [(o.gpu_type, o.price_per_gpu_hour, o.available_gpus) for o in offers] == [("H100", 3.25, 16)]
    everything = FakeCloudProvider("all", env.server.url, max_gpus=100)
    assert {o.gpu_type: o.available_gpus for o in everything.offers()} == {"A10": 4, "H100": 64}


def test_death_rate_kills_running_instances(env: Env) -> None:
    env.knobs(deathRate=60.0, terminatedTtlSeconds=1e9)  # one death per instance-second on average
    ids = [env.provider.create_instance(spec(uid=f"u{i}")).instance_id for i in range(4)]
    env.clock.advance(BOOT + 3600)
    states = [env.provider.get_instance(i) for i in ids]
    assert all(s is not None and s.state is InstanceState.FAILED and s.exit_code == 137 for s in states)
    assert env.stats()["deaths"] == 4


def test_no_deaths_at_rate_zero(env: Env) -> None:
    inst = env.provider.create_instance(spec())
    env.clock.advance(BOOT + 24 * 3600)
    assert env.provider.get_instance(inst.instance_id).state is InstanceState.RUNNING  # type: ignore[union-attr]


def _outcomes(seed: int) -> tuple[list[bool], list[float | None]]:
    """Which of 30 creates succeed at failure rate 0.5, and when the survivors die at 1 death/minute."""
    clock = ManualClock()
    cloud = FakeCloud(
        Knobs(
            boot_seconds=1,
            create_failure_rate=0.5,
            death_rate=1.0,
            capacity={"H100": 100},
            seed=seed,
            terminated_ttl_seconds=1e9,
        ),
        clock=clock,
    )
    body = {"tags": {"node": "n", "namespace": "ns", "pod": "p", "uid": "u"}, "gpuType": "H100", "gpuCount": 1,
            "containers": [{"name": "c", "image": "i"}]}  # fmt: skip
    created = [cloud.create(body) for _ in range(30)]
    clock.advance(10_000)
    listed = json.loads(cloud.list_instances(None).raw)["instances"]
    return [r.status == 201 for r in created], [i["finishedAt"] for i in listed]


def test_same_seed_same_failures_and_deaths() -> None:
    assert _outcomes(7) == _outcomes(7)
    ok, deaths = _outcomes(7)
    assert 0 < sum(ok) < 30  # both outcomes happen at rate 0.5
    assert len(deaths) == sum(ok)
    assert all(d is not None for d in deaths)


def test_different_seed_different_outcomes() -> None:
    assert _outcomes(7) != _outcomes(8)


def test_stats_count_gpu_seconds_from_accept_to_end(env: Env) -> None:
    a = env.provider.create_instance(spec(uid="a", gpus=2))
    env.clock.advance(10)
    env.provider.delete_instance(a.instance_id)
    env.provider.create_instance(spec(uid="b", gpus=1))
    env.clock.advance(4)
    stats = env.stats()
    assert stats["gpuSecondsUsed"] == pytest.approx(2 * 10 + 1 * 4)
    assert stats["liveInstances"] == 1
    assert stats["creates"] == 2


@pytest.mark.parametrize(
    ("update", "problem"),
    [
        ({"createFailureRate": 1.5}, "createFailureRate must be a number in [0, 1]"),
        ({"bootSeconds": -1}, "bootSeconds must be a number"),
        ({"capacity": {"H100": -2}}, "capacity must be an object"),
        ({"capacity": {"H100": 2.5}}, "capacity must be an object"),
        ({"seed": "x"}, "seed must be an integer"),
        ({"bootSecs": 1}, "unknown knobs ['bootSecs']"),
        ({"addressPool": "not-a-cidr"}, "addressPool"),
    ],
)
def test_invalid_knobs_are_refused(env: Env, update: dict[str, Any], problem: str) -> None:
    before = http_json(env.server.url + "/admin/knobs")
    with pytest.raises(urllib.error.HTTPError) as err:
        env.knobs(**update)
    assert err.value.code == 400
    assert problem in json.loads(err.value.read())["error"]
    assert http_json(env.server.url + "/admin/knobs") == before


def test_valid_knobs_round_trip(env: Env) -> None:
    after = env.knobs(bootSeconds=0.5, capacity={"H100": 2}, seed=3)
    assert after["bootSeconds"] == 0.5
    assert after["capacity"] == {"H100": 2}
    assert http_json(env.server.url + "/admin/knobs") == after


def test_invalid_create_body_is_a_provider_error(env: Env) -> None:
    bad = InstanceSpec(InstanceTags("n", "", "p", "u"), "H100", 1, (ContainerSpec("c", "i"),))
    with pytest.raises(ProviderError, match="HTTP 400: tags must be an object"):
        env.provider.create_instance(bad)


def test_logs_tell_the_lifecycle(env: Env) -> None:
    inst = env.provider.create_instance(spec())
    env.clock.advance(BOOT)
    env.provider.delete_instance(inst.instance_id)
    text = env.provider.logs(inst.instance_id, "server", None)
    assert "accepted" in text
    assert "started" in text
    assert "terminated" in text
    assert env.provider.logs(inst.instance_id, "server", 1).count("\n") == 1


def test_built_by_the_registry_from_real_settings(env: Env) -> None:
    settings = ProviderSettings.model_validate(
        {
            "name": "fake-a",
            "kind": "fake",
            "maxGpus": 3,
            "gpuTypes": {"H100": {"pricePerGpuHour": 2.5}},
            "fake": {"url": env.server.url},
        }
    )
    provider = adapter_class("fake")(settings, AdapterContext(SecretStore.from_values({})))
    assert [(o.gpu_type, o.available_gpus) for o in provider.offers()] == [("H100", 3)]
    inst = provider.create_instance(spec())
    assert [i.instance_id for i in provider.list_instances("gpu-burst")] == [inst.instance_id]


def test_unreachable_cloud_is_a_provider_error() -> None:
    provider = FakeCloudProvider("fake-a", "http://127.0.0.1:9", retries=0)
    with pytest.raises(ProviderError, match="provider fake-a: list_instances: unreachable"):
        provider.list_instances("n")


def test_state_file_keeps_instances_across_restarts(tmp_path: Path) -> None:
    path = tmp_path / "cloud.json"
    clock = ManualClock()
    first = start(state_file=path, clock=clock)
    inst = first.provider.create_instance(spec())
    first.server.stop()
    second = start(state_file=path, clock=clock)
    try:
        clock.advance(BOOT)
        again = second.provider.get_instance(inst.instance_id)
        assert again is not None
        assert again.state is InstanceState.RUNNING
        assert again.tags.uid == "uid-1"
        assert second.provider.create_instance(spec(uid="x")).instance_id != inst.instance_id
    finally:
        second.server.stop()


def _read_line(proc: subprocess.Popen[str], wait: float = 30.0) -> str:
    """The first stdout line, or a failure if the process says nothing (a guard, not a timing assertion)."""
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None
    out = proc.stdout
    threading.Thread(target=lambda: lines.put(out.readline()), daemon=True).start()
    try:
        return lines.get(timeout=wait)
    except queue.Empty:
        proc.kill()
        pytest.fail("the server printed no ready line")


def test_cli_serves_prints_ready_line_and_stops_on_sigterm(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "sim.fakes.cloud_server", "--listen", "127.0.0.1:0",
         "--boot-seconds", "0", "--capacity", "H100=4", "--price", "H100=2.5", "--seed", "1",
         "--state-file", str(tmp_path / "s.json")],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])},
    )  # fmt: skip
    try:
        ready = json.loads(_read_line(proc))
        assert ready["ready"] is True
        assert ready["knobs"]["capacity"] == {"H100": 4}
        offers = http_json(ready["url"] + "/offers")
        assert offers == {"offers": [{"gpuType": "H100", "pricePerGpuHour": 2.5, "availableGpus": 4}]}
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_cli_help_and_bad_flags() -> None:
    help_text = subprocess.run(
        [sys.executable, "-m", "sim.fakes.cloud_server", "--help"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    for flag in ("--listen", "--boot-seconds", "--create-failure-rate", "--death-rate", "--capacity", "--price",
                 "--seed", "--terminated-ttl-seconds", "--address-pool", "--state-file", "--log-level"):  # fmt: skip
        assert flag in help_text
    bad = subprocess.run(
        [sys.executable, "-m", "sim.fakes.cloud_server", "--capacity", "H100"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert bad.returncode == 2
    assert "--capacity: 'H100' is not TYPE=INT" in bad.stderr
    assert "Traceback" not in bad.stderr


def _get(address: str, port: int) -> int | str:
    """The status of a GET / at address:port, or why there was none."""
    try:
        with urllib.request.urlopen(f"http://{address}:{port}/health", timeout=2) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as err:
        return int(err.code)
    except urllib.error.URLError as err:
        return str(err.reason)


def test_an_instance_on_a_local_address_loads_then_serves_then_refuses_once_deleted() -> None:
    """The stand-in is no faster than a model server: 503 for the whole model load after it runs, and gone with its
    instance."""
    e = start(Knobs(boot_seconds=BOOT, capacity={"H100": 8}, address_pool="127.79.0.0/24", model_load_seconds=20))
    try:
        inst = e.provider.create_instance(spec())
        e.clock.advance(BOOT)
        running = e.provider.get_instance(inst.instance_id)
        assert running is not None
        assert running.address.startswith("127.79.0.")
        assert _get(running.address, 8080) == 503
        e.clock.advance(19.9)
        assert _get(running.address, 8080) == 503
        e.clock.advance(0.1)
        assert _get(running.address, 8080) == 200
        e.provider.delete_instance(inst.instance_id)
        assert "Connection refused" in str(_get(running.address, 8080))
    finally:
        e.server.stop()
