"""The RunPod adapter against the fake RunPod REST v1 server (real HTTP on an ephemeral port, a clock moved by hand)."""

from __future__ import annotations

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

from components.burst_settings import ProviderSettings
from daemons.burst_provider.fakes._http import ManualClock
from daemons.burst_provider.providers.base import (
    AdapterContext,
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
from tests.support.fake_runpod import FakeRunpod, FakeRunpodServer, validate_create

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
        provider = make_provider(server.base_url)
        yield Env(clock, api, server, provider)


def make_provider(url: str, key: str = KEY, **kw: float) -> RunPodProvider:
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
    )


def spec(node: str = "gpu-burst", *, pod: str = "sd-serve-abc", uid: str = "7b1c0000-0000-4000-8000-000000000001",
         gpus: int = 1, containers: int = 1, gpu_type: str = "H100") -> InstanceSpec:  # fmt: skip
    c = ContainerSpec(
        name="server",
        image="ghcr.io/example/sd:1",
        command=("python",),
        args=("-m", "serve"),
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


def test_pod_body_follows_the_documented_create_input(env: Env) -> None:
    inst = env.provider.create_instance(spec())
    sent = env.api._pods[inst.instance_id].body
    assert validate_create(sent) == ""
    assert sent["gpuTypeIds"] == [H100_ID]
    assert sent["gpuCount"] == 1
    assert sent["computeType"] == "GPU"
    assert sent["cloudType"] == "SECURE"
    assert sent["ports"] == ["8080/tcp", "9090/tcp"]
    assert sent["imageName"] == "ghcr.io/example/sd:1"
    assert sent["dockerEntrypoint"] == ["python"]
    assert sent["dockerStartCmd"] == ["-m", "serve"]
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
    assert env.api._pods[inst.instance_id].body["gpuTypeIds"] == [sent]
    assert inst.gpu_type == gpu_type


def test_pod_name_stays_within_limit_for_long_node_names() -> None:
    tags = InstanceTags("n" * 80, "ns", "p", "7b1c0000-0000-4000-8000-000000000001")
    name = pod_name(tags)
    assert len(name) <= 63
    assert name.startswith("gpucluster-n")
    assert name.endswith(tags.uid)


def test_cpu_only_pod_asks_for_cpu_compute(env: Env) -> None:
    inst = env.provider.create_instance(spec(gpus=0))
    sent = env.api._pods[inst.instance_id].body
    assert sent["computeType"] == "CPU"
    assert "gpuTypeIds" not in sent


def test_list_returns_only_this_nodes_pods(env: Env) -> None:
    mine = env.provider.create_instance(spec(node="gpu-burst", uid="u-1"))
    env.provider.create_instance(spec(node="other-node", uid="u-2"))
    # A pod someone made by hand in the same account: no tags at all.
    req = urllib.request.Request(
        env.server.base_url + "/pods",
        data=json.dumps({"name": "notebook", "imageName": "jupyter", "gpuTypeIds": [H100_ID]}).encode(),
        headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.status == 201
    listed = env.provider.list_instances("gpu-burst")
    assert [i.instance_id for i in listed] == [mine.instance_id]
    assert listed[0].tags.uid == "u-1"
    assert env.provider.list_instances("nobody") == []


def test_delete_makes_the_pod_unknown(env: Env) -> None:
    inst = env.provider.create_instance(spec())
    env.provider.delete_instance(inst.instance_id)
    assert env.provider.get_instance(inst.instance_id) is None
    assert env.provider.list_instances("gpu-burst") == []
    env.provider.delete_instance(inst.instance_id)  # deleting an unknown pod is not an error
    assert ("DELETE", f"/v1/pods/{inst.instance_id}") in env.api.requests


def test_stopped_and_terminated_pods_map_to_exited_and_terminated(env: Env) -> None:
    inst = env.provider.create_instance(spec())
    env.provider.stop_instance(inst.instance_id)
    stopped = env.provider.get_instance(inst.instance_id)
    assert stopped is not None
    assert stopped.state is InstanceState.EXITED
    env.api.set_status(inst.instance_id, "TERMINATED")
    gone = env.provider.get_instance(inst.instance_id)
    assert gone is not None
    assert gone.state is InstanceState.TERMINATED
    assert gone.address == ""


def test_wrong_key_is_a_provider_error_without_the_key(env: Env) -> None:
    wrong = "rpa_WRONGKEY9876543210"
    provider = make_provider(env.server.base_url, key=wrong)
    with pytest.raises(ProviderError) as err:
        provider.list_instances("gpu-burst")
    assert err.value.provider == "runpod"
    assert err.value.call == "list_instances"
    assert "401" in str(err.value)
    assert wrong not in str(err.value)
    assert wrong not in repr(provider)
    assert wrong not in repr(provider._http)
    assert KEY not in repr(env.provider)


def test_a_key_echoed_by_the_server_is_scrubbed(env: Env) -> None:
    env.api.inject(400, json.dumps({"error": f"bad key {KEY}", "status": 400}))
    with pytest.raises(ProviderError) as err:
        env.provider.create_instance(spec())
    assert KEY not in str(err.value)
    assert "<redacted>" in str(err.value)


def test_server_error_on_get_is_retried(env: Env) -> None:
    inst = env.provider.create_instance(spec())
    env.api.inject(500, '{"error": "internal", "status": 500}', times=2)
    assert env.provider.get_instance(inst.instance_id) is not None  # third attempt succeeds


def test_server_error_beyond_retries_is_a_provider_error(env: Env) -> None:
    env.api.inject(503, '{"error": "unavailable", "status": 503}', times=3)
    with pytest.raises(ProviderError, match=r"provider runpod: list_instances: HTTP 503: unavailable"):
        env.provider.list_instances("gpu-burst")


def test_create_is_not_retried(env: Env) -> None:
    env.api.inject(500, '{"error": "internal", "status": 500}')
    with pytest.raises(ProviderError, match="create_instance: HTTP 500"):
        env.provider.create_instance(spec())
    assert env.api.pod_count() == 0
    assert [m for m, _ in env.api.requests].count("POST") == 1


def test_bad_json_reply_is_a_provider_error(env: Env) -> None:
    env.api.inject(200, "<html>gateway</html>")
    with pytest.raises(ProviderError, match="get_instance: reply is not JSON"):
        env.provider.get_instance("abc")


def test_wrong_shape_reply_is_a_provider_error(env: Env) -> None:
    env.api.inject(200, '{"pods": []}')
    with pytest.raises(ProviderError, match="list_instances: reply: expected a list, got an object with 1 keys"):
        env.provider.list_instances("gpu-burst")


def test_timeout_is_a_provider_error(env: Env) -> None:
    provider = make_provider(env.server.base_url, timeout=0.2, retries=0)
    env.api.inject(200, "[]", delay=1.0)
    with pytest.raises(ProviderError, match="list_instances: unreachable"):
        provider.list_instances("gpu-burst")


def test_unreachable_server_is_a_provider_error() -> None:
    provider = make_provider("http://127.0.0.1:9/v1", retries=1)
    with pytest.raises(ProviderError, match="unreachable"):
        provider.list_instances("gpu-burst")


def test_capacity_exhausted_is_refused(env: Env) -> None:
    env.provider.create_instance(spec(gpus=8, uid="u-1"))
    with pytest.raises(ProviderError, match="no longer any instances available"):
        env.provider.create_instance(spec(gpus=1, uid="u-2"))


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


def test_offers_are_the_configured_prices_and_cap(env: Env) -> None:
    offers = {o.gpu_type: o for o in env.provider.offers()}
    assert offers["H100"].price_per_gpu_hour == 2.99
    assert offers["H100"].available_gpus == 8
    assert env.api.requests == []  # no call: RunPod's availability is not in the REST API


def test_logs_explain_there_is_no_log_api(env: Env) -> None:
    assert "no log endpoint" in env.provider.logs("abc", "server", 10)


def test_fake_server_rejects_invalid_bodies_like_runpod(env: Env) -> None:
    req = urllib.request.Request(
        env.server.base_url + "/pods",
        data=json.dumps({"imageName": "x", "gpuTypeIds": [H100_ID], "gpuCnt": 1}).encode(),
        headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=5)
    assert err.value.code == 400
    assert json.loads(err.value.read()) == {"error": "unknown fields: gpuCnt", "status": 400}


@pytest.mark.parametrize(
    ("body", "ok"),
    [
        ({"imageName": "x", "gpuTypeIds": [H100_ID], "gpuCount": 2, "ports": ["8080/http", "22/tcp"]}, True),
        ({"imageName": "x", "computeType": "CPU"}, True),
        ({"imageName": "x", "gpuTypeIds": []}, False),
        ({"imageName": "x", "gpuTypeIds": [H100_ID], "ports": ["8080"]}, False),
        ({"imageName": "x", "gpuTypeIds": [H100_ID], "cloudType": "ALL"}, False),
        ({"imageName": "x", "gpuTypeIds": [H100_ID], "env": {"A": 1}}, False),
        ({"gpuTypeIds": [H100_ID]}, False),
    ],
)
def test_fake_server_validation(body: dict[str, object], ok: bool) -> None:
    assert (validate_create(body) == "") is ok


@dataclass(frozen=True)
class _GpuType:
    price_per_gpu_hour: float
    provider_type: str | None = None


@dataclass(frozen=True)
class _Runpod:
    url: str
    api_key_secret: str
    cloud_type: str = "COMMUNITY"


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
    assert env.api._pods[inst.instance_id].body["cloudType"] == "COMMUNITY"
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
    assert env.api._pods[inst.instance_id].body["gpuTypeIds"] == ["NVIDIA H100 80GB HBM3"]
    assert [(o.gpu_type, o.available_gpus) for o in provider.offers()] == [("H100", 2)]


def test_cli_help_documents_every_flag() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "tests.support.fake_runpod", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for flag in ("--listen", "--api-key-env", "--boot-seconds", "--price", "--capacity", "--log-level"):
        assert flag in out


def test_cli_serves_with_the_key_from_the_environment() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.fake_runpod", "--listen", "127.0.0.1:0",
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
        [sys.executable, "-m", "tests.support.fake_runpod", "--listen", "127.0.0.1:0"],
        capture_output=True, text=True, check=False, env=env,
    )  # fmt: skip
    assert bad.returncode == 2
    assert "RUNPOD_API_KEY is empty or unset" in bad.stderr
