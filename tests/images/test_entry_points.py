"""Every entry point the components use, run inside the built images' own root filesystems.

The images are built from this tree (``images.build``, with the shared cache) and unpacked by umoci; each
container the components render for the prod stack (the controllers, the virtual node's two containers, the
fabric exporter) runs its command with ``--help`` under runc, as the image's user, with a read-only root. So a
module, a library or a console script missing from an image fails here, not in a cluster. Two start for real
against fixtures: the fabric exporter on the fixture sysfs tree (its InfiniBand samples must match the golden
file the unit tests use) and the burst provider, probed by the very httpGet probe its container carries, on the
pod's address.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from components.config import StackConfig, load_stack_file
from components.controller import controller_pod_spec
from components.telemetry.resources import fabric_pod_spec
from components.virtual_node import SETTINGS_DIR, SETTINGS_FILE, virtual_node_pod_spec
from contract.burst_settings import settings_json
from contract.images_settings import IMAGE_NAMES
from contract.registry import INTERRUPTIONS, MAKE_BEFORE_BREAK, QUARANTINE, QUOTA_CONTROLLER, TAINT_CONTROLLER
from images.build import build_all
from images.runtime import Bundle, Container, unpack
from tests.support.require import missing

# One worker builds the images once for the whole module (make test runs the tests that need no cluster on two).
pytestmark = [pytest.mark.images, pytest.mark.xdist_group("images")]

ROOT = Path(__file__).resolve().parents[2]
PROD = ROOT / "stacks" / "Pulumi.prod.yaml"
LOCAL = ROOT / "stacks" / "Pulumi.local.yaml"
SYSFS_FIXTURE = ROOT / "tests" / "fixtures" / "sysfs"
GOLDEN = ROOT / "tests" / "daemons" / "fabric_exporter" / "golden" / "fixture-sysfs-hgx-2gpu.prom"
TOOLS = ("mmdebstrap", "umoci", "runc", "go")


def pod_specs(cfg: StackConfig) -> dict[str, dict[str, Any]]:
    """The pod specs the components render for a stack's images, by what they are."""
    assert cfg.burst is not None, "the prod stack has a burst section"
    specs = {
        "taint controller": controller_pod_spec(TAINT_CONTROLLER, cfg.burst.taint_controller, "cm"),
        "make-before-break": controller_pod_spec(MAKE_BEFORE_BREAK, cfg.controller(MAKE_BEFORE_BREAK), "cm"),
        "quota controller": controller_pod_spec(QUOTA_CONTROLLER, cfg.controller(QUOTA_CONTROLLER), "cm"),
        "quarantine": controller_pod_spec(QUARANTINE, cfg.controller(QUARANTINE), "cm"),
        "interruptions": controller_pod_spec(INTERRUPTIONS, cfg.controller(INTERRUPTIONS), "cm"),
        "virtual node": virtual_node_pod_spec(cfg.burst.settings, "cm", "secret"),
        "fabric exporter": fabric_pod_spec(cfg.telemetry),
    }
    return specs


def containers(cfg: StackConfig) -> list[tuple[str, dict[str, Any]]]:
    return [(f"{what}/{c['name']}", c) for what, spec in pod_specs(cfg).items() for c in spec["containers"]]


def image_name(cfg: StackConfig, ref: str) -> str:
    """Which of our images a container's reference names (under the stack's scheme)."""
    for name in IMAGE_NAMES:
        if ref.startswith(f"{cfg.images.registry}/{name}:{cfg.images.version}"):
            return name
    raise AssertionError(f"{ref} is none of the images make images builds ({', '.join(IMAGE_NAMES)})")


class HostProcess:
    """A program of the checkout run on this machine beside the containers (started and stopped as a Container)."""

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self._proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        self._proc = subprocess.Popen(self.argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def stop(self) -> str:
        """Stop it (SIGTERM, then SIGKILL after 10 s); what it printed."""
        if self._proc is None:
            return ""
        self._proc.terminate()
        try:
            out, _ = self._proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            out, _ = self._proc.communicate()
        return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def prod() -> StackConfig:
    return load_stack_file(PROD)


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Bundle]]:
    absent = [t for t in TOOLS if shutil.which(t) is None]
    if absent:
        missing(f"{', '.join(absent)} not installed (make debian-deps; go from the machine)")
    if os.geteuid() != 0:
        missing("building and running the images needs root (mmdebstrap, umoci unpack, runc)")
    out = tmp_path_factory.mktemp("images")
    built = build_all(out=out, say=lambda _line: None)
    result = {b.definition.name: unpack(b.archive, out / "bundles" / b.definition.name) for b in built}
    yield result
    shutil.rmtree(out, ignore_errors=True)


def test_every_container_names_an_image_make_images_builds(prod: StackConfig) -> None:
    names = {where: image_name(prod, c["image"]) for where, c in containers(prod)}
    assert set(names.values()) == set(IMAGE_NAMES), names
    # prod pins both by digest.
    assert all("@sha256:" in c["image"] for _, c in containers(prod))


@pytest.mark.parametrize("where", [w for w, _ in containers(load_stack_file(PROD))])
def test_entry_point_runs_in_its_image(where: str, prod: StackConfig, bundles: Mapping[str, Bundle]) -> None:
    container = dict(containers(prod))[where]
    bundle = bundles[image_name(prod, container["image"])]
    command = container.get("command") or bundle.image_args
    result = Container(bundle, [*command, "--help"]).run(timeout=60)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"{where}: {' '.join(command)} --help exited {result.returncode}:\n{output[-2000:]}"
    assert "usage" in output.lower(), output[-2000:]


def test_pods_run_as_the_image_user(prod: StackConfig, bundles: Mapping[str, Bundle]) -> None:
    for what, spec in pod_specs(prod).items():
        user = bundles[image_name(prod, spec["containers"][0]["image"])].process["user"]
        assert spec["securityContext"]["runAsUser"] == user["uid"], what
        assert spec["securityContext"]["runAsGroup"] == user["gid"], what
        assert user["uid"] != 0


def test_virtual_node_image_has_no_shell_and_reports_the_project_version(
    prod: StackConfig, bundles: Mapping[str, Bundle]
) -> None:
    bundle = bundles["gpucluster-virtual-node"]
    for shell in ("bin/sh", "bin/bash", "usr/bin/sh"):
        assert not (bundle.rootfs / shell).exists(), shell
    no_shell = Container(bundle, ["/bin/sh", "-c", "true"]).run()
    assert no_shell.returncode != 0
    version = Container(bundle, [*bundle.image_args, "--version"]).run()
    assert version.returncode == 0, version.stderr
    assert version.stdout.split() == ["gpucluster-virtual-node", prod.images.version]
    # the metrics adapter is the other program of the image, run by its Deployment's command
    adapter = Container(bundle, ["gpucluster-metrics-adapter", "--version"]).run()
    assert adapter.returncode == 0, adapter.stderr
    assert adapter.stdout.split() == ["gpucluster-metrics-adapter", prod.images.version]


def test_every_daemon_module_imports_in_the_image_and_the_fakes_are_not_there(bundles: Mapping[str, Bundle]) -> None:
    result = Container(bundles["gpucluster-daemons"], ["python", "-m", "daemons.image", "check-imports"]).run()
    assert result.returncode == 0, result.stdout + result.stderr
    # the fake providers are the simulated cluster's (sim/fakes/), not production's
    fakes = Container(bundles["gpucluster-daemons"], ["python", "-c", "import sim.fakes.cloud_server"]).run()
    assert fakes.returncode != 0, fakes.stdout
    assert "No module named 'sim'" in fakes.stderr, fakes.stderr


def _get(url: str, timeout: float = 20) -> str:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                return str(resp.read().decode())
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def test_fabric_exporter_serves_the_fixture_from_its_image(prod: StackConfig, bundles: Mapping[str, Bundle]) -> None:
    port = free_port()
    fe = prod.telemetry.fabric_exporter.model_copy(update={"port": port})
    spec = fabric_pod_spec(prod.telemetry.model_copy(update={"fabric_exporter": fe}))
    exporter = spec["containers"][0]
    env = {"NODE_NAME": "fixture-node", **{e["name"]: e["value"] for e in exporter["env"] if "value" in e}}
    mounts = {m["mountPath"]: m for m in exporter.get("volumeMounts", [])}
    assert "/host/sys" in mounts, "the component mounts the host's /sys at /host/sys"
    container = Container(
        bundles["gpucluster-daemons"],
        # the kubelet expands $(POD_IP) from the downward API; here the pod's address is loopback
        [*exporter["command"], *(a.replace("$(POD_IP)", "127.0.0.1") for a in exporter["args"])],
        env=env,
        binds={"/host/sys": SYSFS_FIXTURE},
    )
    container.start()
    try:
        scraped = set(_get(f"http://127.0.0.1:{port}/metrics").splitlines())
    finally:
        log = container.stop()
    expected = [
        line
        for line in GOLDEN.read_text(encoding="utf-8").splitlines()
        if line.startswith("gpucluster_fabric_infiniband_")
    ]
    assert expected, "the golden file has InfiniBand samples"
    absent = [line for line in expected if line not in scraped]
    assert not absent, (
        f"{len(absent)} of {len(expected)} golden InfiniBand samples not served, e.g. {absent[:3]}\n{log}"
    )


def test_burst_provider_starts_and_its_probe_passes_on_the_pods_address(
    bundles: Mapping[str, Bundle], tmp_path: Path
) -> None:
    local = load_stack_file(LOCAL)
    assert local.burst is not None
    image = bundles["gpucluster-daemons"]
    # The fake GPU cloud the provider answers to, outside the container as a provider is outside the cluster (the
    # image does not carry the fakes); the local stack's fake providers point at it.
    cloud_port, port = free_port(), free_port()
    cloud = HostProcess([sys.executable, "-m", "sim.fakes.cloud_server", f"--listen=127.0.0.1:{cloud_port}"])
    fakes = [
        p.model_copy(update={"fake": p.fake.model_copy(update={"url": f"http://127.0.0.1:{cloud_port}"})})
        for p in local.burst.settings.providers
        if p.fake is not None
    ]
    assert fakes, "the local stack bursts to a fake cloud"
    vn = local.burst.settings.virtual_node.model_copy(update={"port": port})
    settings = local.burst.settings.model_copy(update={"virtual_node": vn, "providers": fakes})
    spec = virtual_node_pod_spec(settings, "cm", "secret")
    provider = next(c for c in spec["containers"] if c["name"] == "provider")
    settings_dir = tmp_path / "settings"
    settings_dir.mkdir()
    (settings_dir / SETTINGS_FILE).write_text(settings_json(settings), encoding="utf-8")
    secrets_dir = tmp_path / "secrets"
    secrets_dir.mkdir()
    mounts = {m["name"]: m["mountPath"] for m in provider["volumeMounts"]}
    assert mounts["settings"] == SETTINGS_DIR
    binds = {SETTINGS_DIR: settings_dir, mounts["provider-secrets"]: secrets_dir}
    # The kubelet's httpGet probe, on the pod's address: here another loopback address than the API's.
    pod_ip = "127.0.0.2"
    probe = provider["readinessProbe"]["httpGet"]
    ports = {p["name"]: p["containerPort"] for p in provider["ports"]}
    health = f"http://{pod_ip}:{ports[probe['port']]}{probe['path']}"

    # Nothing serves yet: the probe must fail, or it proves nothing below.
    with pytest.raises(urllib.error.URLError, match="Connection refused"):
        urllib.request.urlopen(health, timeout=2)

    # No source cluster here: the provider runs without one (its flag for tests); everything else as rendered, with
    # $(POD_IP) expanded as the kubelet expands it from the downward API.
    args = [a.replace("$(POD_IP)", pod_ip) for a in provider["args"]]
    service = Container(image, [*provider["command"], *args, "--no-source-cluster"], binds=binds)
    cloud.start()
    service.start()
    try:
        _get(f"http://127.0.0.1:{cloud_port}/healthz")
        _get(health)
        metrics = _get(f"http://{pod_ip}:{ports['burst-metrics']}/metrics")
        # the API, which has no authentication, is not on the pod's address
        with pytest.raises(urllib.error.URLError, match="Connection refused"):
            urllib.request.urlopen(f"http://{pod_ip}:{port}/v1/capacity", timeout=2)
        capacity = _get(f"http://127.0.0.1:{port}/v1/capacity")
    finally:
        log = service.stop() + cloud.stop()
    assert "gpucluster_burst_decisions" in metrics, log
    assert "nvidia.com/gpu" in capacity, log
