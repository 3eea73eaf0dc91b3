"""The RunPod adapter against the fake RunPod REST v2 server (real HTTP on an ephemeral port, a clock moved by hand)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field

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
from daemons.burst_provider.providers.runpod import RunPodProvider, pod_name
from daemons.burst_provider.registry import adapter_class
from daemons.burst_provider.secrets import SecretStore
from sim.fakes._http import ManualClock
from sim.fakes.runpod_contract import schema_errors
from sim.fakes.runpod_server import FakeRunpod, FakeRunpodServer

KEY = "rpa_SECRETKEY0123456789"
H100_ID = "NVIDIA H100 80GB HBM3"
BOOT = 30.0


@dataclass
class Env:
    clock: ManualClock
    api: FakeRunpod
    server: FakeRunpodServer
    provider: RunPodProvider


@pytest.fixture
def env() -> Iterator[Env]:
    clock = ManualClock()
    api = FakeRunpod(KEY, boot_seconds=BOOT, clock=clock, capacity={H100_ID: 8})
    with FakeRunpodServer(api) as server:
        provider = make_provider(server.base_url, clock=clock)
        yield Env(clock, api, server, provider)


def make_provider(url: str, key: str = KEY, clock: ManualClock | None = None, **kw: float) -> RunPodProvider:
    opts: dict[str, float] = {"timeout": 2.0, "retries": 2, "backoff": 0.0, **kw}
    return RunPodProvider(
        "runpod",
        key,
        {"H100": GpuTypePrice(2.99, H100_ID), "A10": GpuTypePrice(0.5, "")},
        url=url,
        max_gpus=8,
        timeout=opts["timeout"],
        retries=int(opts["retries"]),
        backoff=opts["backoff"],
        clock=clock or ManualClock(),
        sleep=lambda _: None,
    )


def spec(node: str = "gpu-burst", *, pod: str = "sd-serve-abc", uid: str = "7b1c0000-0000-4000-8000-000000000001",
         gpus: int = 1, containers: int = 1, gpu_type: str = "H100") -> InstanceSpec:  # fmt: skip
    c = ContainerSpec(
        name="server",
        image="ghcr.io/example/sd:1",
        args=("-m", "serve", "--model", "sd 1.5"),
        env=(("MODEL", "sd"),),
        ports=(Port(8080, "TCP", "http"), Port(9090, "TCP", "metrics")),
    )
    return InstanceSpec(InstanceTags(node, "inference", pod, uid), gpu_type, gpus, (c,) * containers)


def test_create_then_running_after_boot_delay(env: Env) -> None:
    inst = env.provider.create_instance(spec())
    assert inst.state is InstanceState.CREATING
    assert inst.address == ""
    assert inst.tags == InstanceTags("gpu-burst", "inference", "sd-serve-abc", "7b1c0000-0000-4000-8000-000000000001")

    env.clock.advance(BOOT - 1)
    booting = env.provider.get_instance(inst.instance_id)
    assert booting is not None
    assert booting.state is InstanceState.CREATING
    assert booting.message == "starting"

    env.clock.advance(1)
    running = env.provider.get_instance(inst.instance_id)
    assert running is not None
    assert running.state is InstanceState.RUNNING
    assert running.address.startswith("203.0.113.")
    assert running.gpu_type == "H100"
    assert running.gpu_count == 1
    assert running.started_at is not None
    # Public ports, named as the pod named them, in the pod's order.
    assert [p.name for p in running.ports] == ["http", "metrics"]
    assert all(p.port >= 10000 for p in running.ports)


def test_pod_body_is_a_v2_create_pod_request(env: Env) -> None:
    inst = env.provider.create_instance(spec())
    sent = env.api._pods[inst.instance_id].body
    assert schema_errors("components/schemas/CreatePodRequest", sent) == []
    assert sent["gpu"] == {"id": H100_ID, "count": 1}
    assert sent["cloud"] == "SECURE"
    assert sent["disk"] == 50
    assert "mounts" not in sent  # no persistent volume to bill after a stop
    assert sent["ports"] == ["8080/tcp", "9090/tcp"]
    assert sent["image"] == "ghcr.io/example/sd:1"
    assert sent["args"] == "-m serve --model 'sd 1.5'"
    assert sent["env"]["MODEL"] == "sd"
    assert sent["env"]["GPUCLUSTER_NODE"] == "gpu-burst"
    assert sent["env"]["GPUCLUSTER_POD_NAMESPACE"] == "inference"
    assert sent["env"]["GPUCLUSTER_POD_NAME"] == "sd-serve-abc"
    assert sent["env"]["GPUCLUSTER_POD_UID"] == "7b1c0000-0000-4000-8000-000000000001"
    assert sent["name"] == "gpucluster-gpu-burst-7b1c0000-0000-4000-8000-000000000001"


@pytest.mark.parametrize(
    ("gpu_type", "configured", "sent"),
    [
        ("H100", H100_ID, H100_ID),  # providerType given
        ("H100", "", "NVIDIA H100 80GB HBM3"),  # known name
        ("A10", "", "A10"),  # unknown name: sent as it is
    ],
)
def test_gpu_type_id_mapping(env: Env, gpu_type: str, configured: str, sent: str) -> None:
    provider = RunPodProvider("runpod", KEY, {gpu_type: GpuTypePrice(1.0, configured)}, url=env.server.base_url)
    inst = provider.create_instance(spec(gpu_type=gpu_type))
    assert env.api._pods[inst.instance_id].body["gpu"]["id"] == sent
    assert inst.gpu_type == gpu_type


def test_pod_name_stays_within_limit_for_long_node_names() -> None:
    tags = InstanceTags("n" * 80, "ns", "p", "7b1c0000-0000-4000-8000-000000000001")
    name = pod_name(tags)
    assert len(name) <= 63
    assert name.startswith("gpucluster-n")
    assert name.endswith(tags.uid)


@pytest.mark.parametrize(
    ("cpu_millis", "memory_gb", "vcpus"),
    [(0, 0, 2), (500, 0, 2), (3000, 0, 4), (1000, 15, 8), (4000, 64, 32)],
)
def test_cpu_only_pod_asks_for_the_fewest_vcpus_that_cover_cpu_and_memory(
    env: Env, cpu_millis: int, memory_gb: int, vcpus: int
) -> None:
    # cpu5c gives 2 GB per vCPU in the fake's catalogue.
    base = spec(gpus=0)
    pod_spec = InstanceSpec(base.tags, base.gpu_type, 0, base.containers, cpu_millis, memory_gb * 10**9)
    inst = env.provider.create_instance(pod_spec)
    sent = env.api._pods[inst.instance_id].body
    assert sent["cpu"] == {"id": "cpu5c", "vcpuCount": vcpus}
    assert "gpu" not in sent


def test_cpu_only_pod_larger_than_the_flavor_is_refused(env: Env) -> None:
    base = spec(gpus=0)
    with pytest.raises(ProviderError, match="CPU flavor cpu5c offers at most 32 vCPUs"):
        env.provider.create_instance(InstanceSpec(base.tags, base.gpu_type, 0, base.containers, 1000, 100 * 10**9))
    assert env.api.pod_count() == 0


def _post(env: Env, body: dict[str, object]) -> int:
    req = urllib.request.Request(
        env.server.base_url + "/pods",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_list_returns_only_this_nodes_pods(env: Env) -> None:
    mine = env.provider.create_instance(spec(node="gpu-burst", uid="u-1"))
    env.provider.create_instance(spec(node="other-node", uid="u-2"))
    # A pod someone made by hand in the same account: no tags at all.
    assert _post(env, {"name": "notebook", "image": "jupyter", "gpu": {"id": H100_ID}}) == 201
    listed = env.provider.list_instances("gpu-burst")
    assert [i.instance_id for i in listed] == [mine.instance_id]
    assert listed[0].tags.uid == "u-1"
    assert env.provider.list_instances("nobody") == []


def test_delete_makes_the_pod_unknown_and_stops_its_billing(env: Env) -> None:
    inst = env.provider.create_instance(spec())
    env.provider.delete_instance(inst.instance_id)
    assert env.provider.get_instance(inst.instance_id) is None
    assert env.provider.list_instances("gpu-burst") == []
    assert env.api.billing() == {}
    env.provider.delete_instance(inst.instance_id)  # deleting an unknown pod is not an error
    assert ("DELETE", f"/v2/pods/{inst.instance_id}") in env.api.requests


def test_stopped_pods_are_exited_and_bill_their_disk_until_deleted(env: Env) -> None:
    inst = env.provider.create_instance(spec())
    env.api.set_status(inst.instance_id, "EXITED")
    stopped = env.provider.get_instance(inst.instance_id)
    assert stopped is not None
    assert stopped.state is InstanceState.EXITED
    assert stopped.exit_code is None  # not a clean exit: the service fails the pod and deletes this one
    assert "bills until the pod is deleted" in stopped.message
    assert env.api.billing() == {inst.instance_id: "disk"}
    for status, state in (("ERROR", InstanceState.FAILED), ("TERMINATED", InstanceState.TERMINATED)):
        env.api.set_status(inst.instance_id, status)
        seen = env.provider.get_instance(inst.instance_id)
        assert seen is not None
        assert seen.state is state
        assert seen.address == ""


def test_a_container_restarted_by_runpod_fails_the_instance(env: Env) -> None:
    inst = env.provider.create_instance(spec())
    env.clock.advance(BOOT)
    running = env.provider.get_instance(inst.instance_id)
    assert running is not None
    assert running.state is InstanceState.RUNNING
    env.api.exit_container(inst.instance_id)
    assert env.api.billing() == {inst.instance_id: "compute"}  # RunPod restarts it and keeps billing
    restarting = env.provider.get_instance(inst.instance_id)
    assert restarting is not None
    assert restarting.state is InstanceState.FAILED
    assert "RunPod restarted it" in restarting.message


def test_a_restart_seen_only_by_a_later_start_time_fails_the_instance(env: Env) -> None:
    inst = env.provider.create_instance(spec())
    env.clock.advance(BOOT)
    assert env.provider.get_instance(inst.instance_id).state is InstanceState.RUNNING  # type: ignore[union-attr]
    env.api.exit_container(inst.instance_id)
    env.clock.advance(BOOT + 1)  # restarted and running again before the next poll
    again = env.provider.get_instance(inst.instance_id)
    assert again is not None
    assert again.state is InstanceState.FAILED


def test_a_pod_that_never_gets_an_address_stays_creating(env: Env) -> None:
    env.api.never_address = True
    inst = env.provider.create_instance(spec())
    env.clock.advance(BOOT * 10)
    seen = env.provider.get_instance(inst.instance_id)
    assert seen is not None
    assert seen.state is InstanceState.CREATING  # the service fails it after creationTimeout and deletes it
    assert "waiting for a public address" in seen.message


def test_wrong_key_is_a_provider_error_without_the_key(env: Env) -> None:
    wrong = "rpa_WRONGKEY9876543210"
    provider = make_provider(env.server.base_url, key=wrong)
    with pytest.raises(ProviderError) as err:
        provider.list_instances("gpu-burst")
    assert err.value.provider == "runpod"
    assert err.value.call == "list_instances"
    assert "HTTP 401: the API key is not valid" in str(err.value)
    assert wrong not in str(err.value)
    assert wrong not in repr(provider)
    assert wrong not in repr(provider._http)
    assert KEY not in repr(env.provider)


def test_a_key_echoed_by_the_server_is_scrubbed(env: Env) -> None:
    env.api.inject(422, json.dumps({"title": "Unprocessable Entity", "status": 422, "detail": f"bad key {KEY}"}))
    with pytest.raises(ProviderError) as err:
        env.provider.create_instance(spec())
    assert KEY not in str(err.value)
    assert "<redacted>" in str(err.value)


def test_server_error_on_get_is_retried(env: Env) -> None:
    inst = env.provider.create_instance(spec())
    env.api.inject(500, '{"title": "Internal Server Error", "status": 500, "detail": "internal"}', times=2)
    assert env.provider.get_instance(inst.instance_id) is not None  # third attempt succeeds


def test_server_error_beyond_retries_is_a_provider_error(env: Env) -> None:
    env.api.inject(503, '{"title": "Service Unavailable", "status": 503, "detail": "unavailable"}', times=3)
    with pytest.raises(ProviderError, match=r"provider runpod: list_instances: HTTP 503: unavailable"):
        env.provider.list_instances("gpu-burst")


def test_a_429_is_waited_out_for_its_retry_after_and_sent_again(env: Env) -> None:
    waits: list[float] = []
    env.provider._sleep = waits.append
    env.api.rate_limit(times=1, retry_after=7)
    inst = env.provider.create_instance(spec())
    assert waits == [7]
    assert env.api.pod_count() == 1
    assert env.provider.get_instance(inst.instance_id) is not None


def test_a_5xx_after_the_pod_was_created_adopts_it_instead_of_creating_another(env: Env) -> None:
    env.api.fail_after_create(502)
    inst = env.provider.create_instance(spec())
    assert env.api.pod_count() == 1  # never two billed pods for one replica
    assert [m for m, p in env.api.requests if p == "/v2/pods"] == ["POST", "GET"]
    assert inst.tags.uid == "7b1c0000-0000-4000-8000-000000000001"


def test_a_5xx_with_no_pod_created_is_sent_again_after_looking(env: Env) -> None:
    env.api.inject(500, '{"title": "Internal Server Error", "status": 500, "detail": "internal"}')
    env.provider.create_instance(spec())
    assert env.api.pod_count() == 1
    assert [m for m, p in env.api.requests if p == "/v2/pods"] == ["POST", "GET", "POST"]


def test_a_timeout_on_create_looks_the_pod_up_before_any_retry(env: Env) -> None:
    provider = make_provider(env.server.base_url, timeout=0.3, retries=1)
    env.api.inject(201, "{}", delay=1.0)  # the create is slow: no answer within the timeout
    inst = provider.create_instance(spec())
    assert env.api.pod_count() == 1
    assert [m for m, p in env.api.requests if p == "/v2/pods"] == ["POST", "GET", "POST"]
    assert provider.get_instance(inst.instance_id) is not None


def test_when_the_lookup_fails_the_create_is_not_sent_again(env: Env) -> None:
    env.api.inject(502, '{"title": "Bad Gateway", "status": 502, "detail": "upstream"}', times=4)
    with pytest.raises(ProviderError, match="whether a pod was created anyway is unknown"):
        env.provider.create_instance(spec())
    assert [m for m, p in env.api.requests if p == "/v2/pods"].count("POST") == 1


@pytest.mark.parametrize(
    ("status", "meaning"),
    [
        (400, r"no capacity \(HTTP 400: There are no longer any instances available"),
        (402, "insufficient RunPod balance"),
        (403, "may not use this GPU pool"),
    ],
)
def test_refusals_fail_the_create_with_what_runpod_said(env: Env, status: int, meaning: str) -> None:
    env.api.refuse(status)
    with pytest.raises(ProviderError, match=meaning):
        env.provider.create_instance(spec())
    assert env.api.pod_count() == 0
    assert [m for m, p in env.api.requests if p == "/v2/pods"] == ["POST"]  # refusals are not retried


def test_after_a_402_or_403_offers_report_no_free_gpus_for_a_while(env: Env) -> None:
    env.api.refuse(402)
    with pytest.raises(ProviderError):
        env.provider.create_instance(spec())
    assert {o.gpu_type: o.available_gpus for o in env.provider.offers()} == {"A10": 0, "H100": 0}
    env.clock.advance(301)
    assert {o.gpu_type: o.available_gpus for o in env.provider.offers()}["H100"] == 8
    env.api.refuse(403)
    with pytest.raises(ProviderError):
        env.provider.create_instance(spec())
    assert {o.gpu_type: o.available_gpus for o in env.provider.offers()}["H100"] == 0


def test_a_body_breaking_the_contract_is_a_422_with_its_errors(env: Env) -> None:
    assert _post(env, {"name": "x", "image": "x", "gpu": {"id": H100_ID}, "gpuCount": 1}) == 422
    _, _, status, content_type, raw, _ = env.api.replies[-1]
    reply = json.loads(raw)
    assert (status, content_type) == (422, "application/problem+json")
    assert reply["title"] == "Unprocessable Entity"
    assert any("gpuCount" in e for e in reply["errors"])


def test_exactly_one_of_gpu_or_cpu(env: Env) -> None:
    assert _post(env, {"name": "x", "image": "x"}) == 400
    assert (
        _post(env, {"name": "x", "image": "x", "gpu": {"id": H100_ID}, "cpu": {"id": "cpu5c", "vcpuCount": 2}}) == 400
    )


def test_bad_json_reply_is_a_provider_error(env: Env) -> None:
    env.api.inject(200, "<html>gateway</html>")
    with pytest.raises(ProviderError, match="get_instance: reply is not JSON"):
        env.provider.get_instance("abc")


def test_wrong_shape_reply_is_a_provider_error(env: Env) -> None:
    env.api.inject(200, "[]")
    with pytest.raises(ProviderError, match="list_instances: reply: expected an object, got a list of 0 items"):
        env.provider.list_instances("gpu-burst")


def test_timeout_is_a_provider_error(env: Env) -> None:
    provider = make_provider(env.server.base_url, timeout=0.2, retries=0)
    env.api.inject(200, '{"pods": []}', delay=1.0)
    with pytest.raises(ProviderError, match="list_instances: unreachable"):
        provider.list_instances("gpu-burst")


def test_unreachable_server_is_a_provider_error() -> None:
    provider = make_provider("http://127.0.0.1:9/v2", retries=1)
    with pytest.raises(ProviderError, match="unreachable"):
        provider.list_instances("gpu-burst")


def test_capacity_exhausted_is_a_capacity_refusal(env: Env) -> None:
    """RunPod's 400 in its words for no capacity: nothing was created, so the service may try the next provider."""
    env.provider.create_instance(spec(gpus=8, uid="u-1"))
    with pytest.raises(CapacityError, match="no longer any instances available"):
        env.provider.create_instance(spec(gpus=1, uid="u-2"))
    assert env.api.pod_count() == 1


def test_a_400_for_another_reason_is_not_a_capacity_refusal(env: Env) -> None:
    env.api.inject(400, json.dumps({"title": "Bad Request", "status": 400, "detail": "gpu.count: at most 8"}))
    with pytest.raises(ProviderError, match="at most 8") as err:
        env.provider.create_instance(spec(uid="u-3"))
    assert not isinstance(err.value, CapacityError)


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"containers": 2}, "one container per pod"),
        ({"gpu_type": "B200"}, "GPU type 'B200' is not configured"),
    ],
)
def test_what_runpod_cannot_run_is_refused_before_any_call(
    env: Env, kwargs: dict[str, int | str], problem: str
) -> None:
    with pytest.raises(ProviderError, match=problem):
        env.provider.create_instance(spec(**kwargs))  # type: ignore[arg-type]
    assert env.api.requests == []


def test_a_command_is_refused_v2_has_no_entrypoint(env: Env) -> None:
    base = spec()
    c = dataclasses.replace(base.containers[0], command=("python",))
    with pytest.raises(ProviderError, match="sets command: RunPod's v2 create takes no entrypoint"):
        env.provider.create_instance(dataclasses.replace(base, containers=(c,)))
    assert env.api.requests == []


def test_offers_come_from_the_catalogue(env: Env) -> None:
    offers = {o.gpu_type: o for o in env.provider.offers()}
    assert offers["H100"].price_per_gpu_hour == 2.99
    assert offers["H100"].available_gpus == 8
    assert offers["A10"].available_gpus == 0  # not in RunPod's catalogue: never chosen for it
    method, path, query, _ = env.api.bodies[-1]
    assert (method, path) == ("GET", "/v2/catalog/gpus")
    assert query == {"include": ["AVAILABILITY"], "product": ["POD"], "cloud": ["SECURE"]}


def test_a_gpu_type_without_stock_is_offered_as_none_free(env: Env) -> None:
    env.provider.create_instance(spec(gpus=8, uid="u-1"))  # the fake's 8 H100 are all taken
    assert {o.gpu_type: o.available_gpus for o in env.provider.offers()}["H100"] == 0


def test_logs_name_the_streaming_endpoint(env: Env) -> None:
    assert "/v2/pods/abc/logs" in env.provider.logs("abc", "server", 10)


@dataclass(frozen=True)
class _GpuType:
    price_per_gpu_hour: float
    provider_type: str | None = None


@dataclass(frozen=True)
class _Runpod:
    url: str
    api_key_secret: str
    cloud_type: str = "COMMUNITY"
    container_disk_gb: int = 20
    cpu_flavor: str = "cpu5g"


@dataclass(frozen=True)
class _Settings:
    name: str
    max_gpus: int
    gpu_types: dict[str, _GpuType] = field(default_factory=dict)
    runpod: _Runpod | None = None
    fake: None = None
    kubernetes: None = None


class _Secrets:
    def get(self, name: str) -> str:
        return {"runpodApiKey": KEY}[name]


def test_from_settings_reads_the_key_from_the_secret_store(env: Env) -> None:
    settings = _Settings("runpod", 4, {"H100": _GpuType(2.5, H100_ID)}, _Runpod(env.server.base_url, "runpodApiKey"))
    provider = RunPodProvider.from_settings(settings, AdapterContext(_Secrets()))
    inst = provider.create_instance(spec())
    sent = env.api._pods[inst.instance_id].body
    assert (sent["cloud"], sent["disk"]) == ("COMMUNITY", 20)
    assert provider.offers()[0].available_gpus == 4


def test_from_settings_without_runpod_section_is_refused() -> None:
    with pytest.raises(ValueError, match="needs a runpod section"):
        RunPodProvider.from_settings(_Settings("runpod", 4), AdapterContext(_Secrets()))


def test_built_by_the_registry_from_real_settings(env: Env) -> None:
    settings = ProviderSettings.model_validate(
        {
            "name": "runpod",
            "kind": "runpod",
            "maxGpus": 2,
            "gpuTypes": {"H100": {"pricePerGpuHour": 2.99}},
            "runpod": {"url": env.server.base_url, "apiKeySecret": "runpodApiKey"},
        }
    )
    provider = adapter_class("runpod")(settings, AdapterContext(SecretStore.from_values({"runpodApiKey": KEY})))
    inst = provider.create_instance(spec())
    assert env.api._pods[inst.instance_id].body["gpu"] == {"id": "NVIDIA H100 80GB HBM3", "count": 1}
    assert [(o.gpu_type, o.available_gpus) for o in provider.offers()] == [("H100", 2)]


def test_cli_help_documents_every_flag() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "sim.fakes.runpod_cli", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for flag in (
        "--listen",
        "--api-key-file",
        "--api-key-env",
        "--boot-seconds",
        "--price",
        "--capacity",
        "--never-address",
        "--log-level",
    ):
        assert flag in out


def test_cli_serves_with_the_key_from_the_environment() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "sim.fakes.runpod_cli", "--listen", "127.0.0.1:0",
         "--boot-seconds", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "RUNPOD_API_KEY": KEY},
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        ready = json.loads(proc.stdout.readline())
        provider = make_provider(ready["baseUrl"])
        inst = provider.create_instance(spec())
        assert inst.state is InstanceState.RUNNING
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_cli_refuses_to_start_without_a_key() -> None:
    env = {k: v for k, v in os.environ.items() if k != "RUNPOD_API_KEY"}
    bad = subprocess.run(
        [sys.executable, "-m", "sim.fakes.runpod_cli", "--listen", "127.0.0.1:0"],
        capture_output=True, text=True, check=False, env=env,
    )  # fmt: skip
    assert bad.returncode == 2
    assert "RUNPOD_API_KEY is empty or unset" in bad.stderr
