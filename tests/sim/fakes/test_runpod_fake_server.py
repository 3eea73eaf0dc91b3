"""The fake RunPod server's own routes (health, knobs, pod events, stats) and its key file, as a process uses them.

What it serves under ``/v2`` is held to RunPod's document by test_runpod_contract.py; these routes are the fake's,
so a test can drive it from outside as the simulated cluster runs it (``sim/processes.py``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from daemons.burst_provider.providers.base import InstanceState, ProviderError
from sim.fakes.runpod_server import FakeRunpod, FakeRunpodServer
from tests.daemons.burst_provider.test_runpod_provider import H100_ID, KEY, make_provider, spec


@pytest.fixture
def server() -> Iterator[FakeRunpodServer]:
    with FakeRunpodServer(FakeRunpod(KEY, boot_seconds=0.0, capacity={H100_ID: 8})) as srv:
        yield srv


def _call(url: str, method: str = "GET", body: object = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            status, raw = reply.status, reply.read()
    except urllib.error.HTTPError as err:
        status, raw = err.code, err.read()
    text = raw.decode()
    return status, json.loads(text) if text.startswith(("{", "[")) else text


def test_health_and_admin_need_no_key_and_are_not_recorded_as_runpod_traffic(server: FakeRunpodServer) -> None:
    assert _call(server.url + "/healthz") == (200, "ok\n")
    status, knobs = _call(server.url + "/admin/knobs")
    assert status == 200
    assert knobs == {
        "bootSeconds": 0.0,
        "pricePerGpuHour": 2.99,
        "capacity": {H100_ID: 8},
        "neverAddress": False,
        "refusals": [],
        "rateLimits": [],
        "failAfterCreate": [],
    }
    assert server.api.requests == []
    assert server.api.replies == []


def test_knobs_set_from_outside_decide_the_next_creates(server: FakeRunpodServer) -> None:
    status, knobs = _call(server.url + "/admin/knobs", "POST", {"refusals": [402], "capacity": {H100_ID: 1}})
    assert status == 200
    assert (knobs["refusals"], knobs["capacity"], knobs["bootSeconds"]) == ([402], {H100_ID: 1}, 0.0)
    provider = make_provider(server.base_url)
    with pytest.raises(ProviderError, match="Insufficient balance"):
        provider.create_instance(spec())
    inst = provider.create_instance(spec())
    assert inst.state is InstanceState.RUNNING
    assert _call(server.url + "/admin/stats")[1] == {
        "pods": 1,
        "creates": 1,
        "refusals": 1,
        "deletes": 0,
        "billing": {inst.instance_id: "compute"},
    }
    # The one H100 is taken: the catalogue says NONE, so the adapter offers nothing.
    assert {o.gpu_type: o.available_gpus for o in provider.offers()}["H100"] == 0
    provider.delete_instance(inst.instance_id)
    assert _call(server.url + "/admin/stats")[1]["deletes"] == 1


@pytest.mark.parametrize(
    ("update", "message"),
    [
        ({"refusals": [404]}, "refusals must be a list, each item one of [400, 402, 403]"),
        ({"failAfterCreate": [404]}, "failAfterCreate must be a list, each item a 5xx status"),
        ({"rateLimits": [-1]}, "rateLimits must be a list"),
        ({"bootSeconds": "2"}, "bootSeconds must be a finite number >= 0"),
        ({"capacity": {H100_ID: 1.5}}, "capacity must be an object"),
        ({"neverAddress": 1}, "neverAddress must be true or false"),
        ({"colour": "red"}, "unknown knobs ['colour']"),
        ([1], "knobs must be a JSON object"),
    ],
)
def test_a_bad_knob_is_refused_and_nothing_changes(server: FakeRunpodServer, update: object, message: str) -> None:
    before = _call(server.url + "/admin/knobs")[1]
    # A good knob beside the bad one is not applied either.
    payload = {"bootSeconds": 9, **update} if isinstance(update, dict) else update
    status, body = _call(server.url + "/admin/knobs", "POST", payload)
    assert status == 400
    assert message in body["error"]
    assert _call(server.url + "/admin/knobs")[1] == before


def test_pod_events_from_outside(server: FakeRunpodServer) -> None:
    provider = make_provider(server.base_url)
    inst = provider.create_instance(spec())
    pod = inst.instance_id
    assert _call(f"{server.url}/admin/pods/{pod}/exit", "POST") == (200, {"id": pod, "status": "STARTING"})
    assert _call(f"{server.url}/admin/pods/{pod}/status", "POST", {"status": "EXITED"})[0] == 200
    assert server.api.billing() == {pod: "disk"}
    status, body = _call(f"{server.url}/admin/pods/{pod}/status", "POST", {"status": "GONE"})
    assert status == 400
    assert "status must be one of" in body["error"]
    assert _call(f"{server.url}/admin/pods/nope/exit", "POST") == (404, {"error": "pod nope not found"})
    assert _call(f"{server.url}/admin/nothing")[0] == 404


def _serve(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "sim.fakes.runpod_cli", "--listen", "127.0.0.1:0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )


def test_the_cli_takes_its_key_from_a_file(tmp_path: Path) -> None:
    key_file = tmp_path / "runpodApiKey"
    key_file.write_text(KEY + "\n")
    env = {k: v for k, v in os.environ.items() if k != "RUNPOD_API_KEY"}
    proc = _serve("--api-key-file", str(key_file), "--boot-seconds", "0", "--capacity", f"{H100_ID}=2", env=env)
    try:
        assert proc.stdout is not None
        ready = json.loads(proc.stdout.readline())
        assert ready["baseUrl"].endswith("/v2")
        base = ready["baseUrl"].removesuffix("/v2")
        assert _call(base + "/healthz") == (200, "ok\n")
        assert make_provider(ready["baseUrl"]).create_instance(spec()).state is InstanceState.RUNNING
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.parametrize(("content", "message"), [(None, "cannot read"), ("\n", "is empty")])
def test_the_cli_refuses_a_key_file_it_cannot_use(tmp_path: Path, content: str | None, message: str) -> None:
    key_file = tmp_path / "key"
    if content is not None:
        key_file.write_text(content)
    bad = subprocess.run(
        [sys.executable, "-m", "sim.fakes.runpod_cli", "--api-key-file", str(key_file)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2
    assert "error: --api-key-file: " in bad.stderr
    assert str(key_file) in bad.stderr
    assert message in bad.stderr


def test_the_module_imports_without_the_dev_dependencies() -> None:
    """The daemon image carries the fakes package without jsonschema: importing the fake must not need it."""
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('jsonschema', 'referencing'):\n"
        "            raise ModuleNotFoundError(name, name=name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import sim.fakes.runpod_server\n"
        "import sim.fakes.runpod_contract as m\n"
        "print(m.contract_problem())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "jsonschema is not installed" in out


def test_a_running_pod_on_a_local_public_ip_loads_then_serves_and_closes_when_stopped() -> None:
    """RunPod publishes a container port on a public IP and port of its own; the fake answers there, 503 while the
    model loads, and stops answering when the pod stops (or restarts, or is deleted)."""
    from sim.fakes._http import ManualClock  # noqa: PLC0415

    clock = ManualClock()
    api = FakeRunpod(KEY, boot_seconds=2.0, capacity={H100_ID: 8}, public_ip_pool="127.79.1.0/24", clock=clock)
    with FakeRunpodServer(api) as srv:
        provider = make_provider(srv.base_url, clock=clock)
        inst = provider.create_instance(spec())
        clock.advance(2.0)
        running = provider.get_instance(inst.instance_id)
        assert running is not None
        assert running.state is InstanceState.RUNNING
        public = {p.name: p.port for p in running.ports}["http"]
        assert public != 8080  # RunPod maps the port
        url = f"http://{running.address}:{public}/health"
        assert _call(url)[0] == 503
        clock.advance(20.0)
        assert _call(url)[0] == 200
        assert _call(f"{srv.url}/admin/pods/{inst.instance_id}/status", "POST", {"status": "EXITED"})[0] == 200
        provider.get_instance(inst.instance_id)  # any API call settles the pods' ports
        with pytest.raises(urllib.error.URLError, match="Connection refused"):
            _call(url)
