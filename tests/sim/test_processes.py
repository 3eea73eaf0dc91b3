"""The stack's daemons as local processes (sim/processes.py), prepared against a canned cluster (no API server).

``kubectl`` is the stand-in of tests/support/fake_kubectl.py in a scratch tool cache, so the command lines, the
files each daemon reads and the order they start in are checked exactly; and a program that is missing (not
built, not installed) is one line saying what to run, never a traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from contract.registry import CONTROLLERS
from tests.support import fake_kubectl
from tests.support.sim import load_sim_module, path_without

ROOT = Path(__file__).resolve().parents[2]
processes = load_sim_module("processes")
outside = load_sim_module("outside")
daemon_runtime = load_sim_module("daemon_runtime")
VENV_PY = processes.python()
#: The routes the daemons' preparation asked for.
ROUTED: list[str] = []


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A scratch tool cache holding the canned kubectl, and an admin kubeconfig; the daemons' state below it."""
    cache = tmp_path / "cache"
    fake_kubectl.install(cache / "tools" / "bin")
    monkeypatch.setenv("GPUCLUSTER_CACHE", str(cache))
    for knob in (*outside.FAKE_CLOUD_ENV.values(), "GPUCLUSTER_FAKE_SEED", "GPUCLUSTER_SIM_STACK"):
        monkeypatch.delenv(knob, raising=False)
    admin = tmp_path / "admin-kubeconfig"
    admin.write_text("{}")
    monkeypatch.setattr(daemon_runtime, "ADMIN_KUBECONFIG", admin)
    monkeypatch.setattr(processes, "ADMIN_KUBECONFIG", admin)
    ROUTED.clear()  # the real one changes this machine's routes: record the calls instead
    monkeypatch.setattr(outside, "route_rented_network", lambda: ROUTED.append(outside.RENTED_NETWORK))
    return tmp_path


#: The metrics adapter's three kubeconfig flags (custom-metrics-apiserver's): all its ServiceAccount's.
KUBECONFIG_FLAGS = ("lister", "authentication", "authorization")


def _registry(tmp: Path) -> dict[str, object]:
    return dict(processes.registry(state=tmp / "daemons"))


def test_daemons_start_in_dependency_order(cluster: Path) -> None:
    assert list(_registry(cluster)) == [
        "fake-cloud-fake-a",
        "fake-runpod-runpod-fake",
        "serving",
        "kube-state-metrics",
        "fake-dcgm",
        "scrape-targets",
        "prometheus",
        # Nothing the stack deploys as a pod: every controller, the metrics adapter, the virtual node with its
        # provider service and the charts' pods run on the real node (test_nothing_the_stack_deploys_is_a_process).
    ]


def test_the_fakes_listen_on_loopback_where_the_stack_names_the_real_node(cluster: Path) -> None:
    """The local stack's providers point at the node's address (where the virtual node's pod reaches this machine's
    loopback); the fakes standing for them listen on loopback, on the same port."""
    config = processes.stack_config()
    urls = sorted(str(p.fake.url if p.fake else p.runpod.url) for p in config.burst.settings.providers)
    assert urls == ["http://100.127.0.1:18080", "http://100.127.0.1:18082/v2"]
    daemons = processes.registry(state=cluster / "daemons")
    assert daemons["fake-cloud-fake-a"].prepare()[3:5] == ["--listen", "127.0.0.1:18080"]
    assert daemons["fake-cloud-fake-a"].ready_url == "http://127.0.0.1:18080/offers"
    assert daemons["fake-runpod-runpod-fake"].prepare()[3:5] == ["--listen", "127.0.0.1:18082"]


def test_a_fake_provider_url_this_machine_cannot_serve_is_refused(cluster: Path, tmp_path: Path) -> None:
    document = yaml.safe_load((processes.ROOT / "stacks" / "Pulumi.local.yaml").read_text())
    (fake,) = [p for p in document["config"]["gpucluster:burst"]["providers"] if p["kind"] == "fake"]
    fake["fake"]["url"] = "http://192.0.2.7:18080"
    stack = tmp_path / "Pulumi.elsewhere.yaml"
    stack.write_text(yaml.safe_dump(document))
    with pytest.raises(processes.DaemonError, match=r"provider fake-a: fake.url http://192.0.2.7:18080 is neither"):
        processes.registry(stack_file=stack, state=cluster / "daemons")


def test_command_lines_are_the_programs_with_what_pulumi_deployed(cluster: Path) -> None:
    daemons = processes.registry(state=cluster / "daemons")
    state, tools = cluster / "daemons", cluster / "cache" / "tools" / "bin"
    cmds = {name: d.prepare() for name, d in daemons.items()}
    # Both fakes' rented addresses are local to this machine before they start (routed, not on loopback).
    assert ROUTED == ["198.18.0.0/15", "198.18.0.0/15"]
    assert cmds["fake-cloud-fake-a"] == [
        VENV_PY,
        *("-m", "sim.fakes.cloud_server", "--listen", "127.0.0.1:18080"),
        *("--address-pool", "198.18.0.0/16"),
        *("--boot-seconds", "5", "--create-failure-rate", "0", "--death-rate", "0", "--model-load-seconds", "10"),
        *("--capacity", "H100=96", "--price", "H100=2.5", "--seed", "1"),
        *("--state-file", f"{state}/fake-cloud-fake-a.json"),
    ]
    assert cmds["fake-runpod-runpod-fake"] == [
        VENV_PY,
        *("-m", "sim.fakes.runpod_cli", "--listen", "127.0.0.1:18082"),
        *("--api-key-file", f"{state}/fake-runpod-runpod-fake/api-key", "--boot-seconds", "5", "--price", "8.0"),
        *("--public-ip-pool", "198.19.0.0/24", "--model-load-seconds", "10"),
        *("--capacity", "NVIDIA H100 80GB HBM3=8"),
    ]
    assert cmds["serving"] == [
        VENV_PY,
        *(str(ROOT / "sim" / "serving.py"), "--kubeconfig", str(cluster / "admin-kubeconfig")),
        *("--node", "gpu-burst", "--rented-network", "198.18.0.0/15", "--metrics-port", "18099"),
        *("--service", "inference/sd-serve=18100"),
    ]
    assert cmds["kube-state-metrics"] == [
        f"{tools}/kube-state-metrics",
        f"--kubeconfig={cluster}/admin-kubeconfig",
        *("--host=127.0.0.1", "--port=18090", "--telemetry-host=127.0.0.1", "--telemetry-port=18091"),
        "--resources=nodes,pods",
        "--metric-labels-allowlist=nodes=[nvidia.com/gpu.product]",
        "--metric-annotations-allowlist=pods=[burst.gpucluster.io/gpu-type]",
        "--metric-opt-in-list=kube_pod_nodeselectors",
    ]
    assert cmds["prometheus"] == [
        "prometheus",
        f"--config.file={state}/prometheus/prometheus.yml",
        f"--storage.tsdb.path={state}/prometheus/data",
        "--web.listen-address=127.0.0.1:9090",
        "--storage.tsdb.retention.time=1d",
        "--log.level=warn",
        "--web.enable-admin-api",
    ]
    assert cmds["fake-dcgm"] == [
        VENV_PY,
        str(processes.ROOT / "sim" / "fake_dcgm.py"),
        *("--listen", "127.0.0.1:18094", "--stack", str(processes.ROOT / "stacks" / "Pulumi.local.yaml")),
        *("--kubeconfig", f"{cluster}/admin-kubeconfig", "--enable-pod-labels"),
    ]
    assert set(cmds) == {*processes.outside_registry(), "serving", "kube-state-metrics", "fake-dcgm"} | {
        "scrape-targets",
        "prometheus",
    }


def test_each_daemon_reads_the_deployed_files_with_its_own_serviceaccount(cluster: Path) -> None:
    state = cluster / "daemons"
    for d in processes.registry(state=state).values():
        d.prepare()
    # The RunPod fake accepts the key the provider service sends: the same Secret key, in a file of its own.
    key = state / "fake-runpod-runpod-fake" / "api-key"
    assert key.read_bytes() == b"not-a-real-key"
    assert key.stat().st_mode & 0o777 == 0o600
    # The virtual node, its provider service, the controllers and the descheduler run as the stack's pods on the
    # real node: no process reads for them.
    assert sorted(p.name for p in state.iterdir() if p.is_dir()) == ["fake-runpod-runpod-fake", "prometheus"]
    prom = json.loads((state / "prometheus" / "prometheus.yml").read_text())
    jobs = {j["job_name"]: j["static_configs"][0]["targets"] for j in prom["scrape_configs"] if "static_configs" in j}
    assert jobs == {
        "kube-state-metrics": ["127.0.0.1:18090"],
        "dcgm-exporter": ["127.0.0.1:18094"],
        # sim/serving.py's request counters, which the metrics adapter's query reads
        "serving": ["127.0.0.1:18099"],
        # the fake dcgm-exporter serves the fabric exporter's data counters too, on a path of its own
        "gpucluster-fabric-exporter": ["127.0.0.1:18094"],
    }
    # The real node's pods, as sim/scrape_targets.py discovers them by the stack's contract: one job per honour-labels
    # setting, each pod under its own job label.
    discovered = {
        j["job_name"]: (j["honor_labels"], j["file_sd_configs"])
        for j in prom["scrape_configs"]
        if "file_sd_configs" in j
    }
    assert discovered == {
        "kubernetes-pods": (False, [{"files": [f"{state}/prometheus/discovery/pods.json"], "refresh_interval": "5s"}]),
        "kubernetes-pods-honor-labels": (
            True,
            [{"files": [f"{state}/prometheus/discovery/pods-honor-labels.json"], "refresh_interval": "5s"}],
        ),
    }
    paths = {j["job_name"]: j.get("metrics_path", "/metrics") for j in prom["scrape_configs"]}
    assert paths["gpucluster-fabric-exporter"] == "/fabric/metrics"
    assert paths["dcgm-exporter"] == "/metrics"
    # dcgm-exporter's own namespace and job labels win over the scrape's, and so do those of the pods that say so (the
    # accounting's and the stall detector's, on the real node).
    honored = {j["job_name"] for j in prom["scrape_configs"] if j["honor_labels"]}
    assert honored == {"dcgm-exporter", "kubernetes-pods-honor-labels"}
    assert prom["rule_files"] == [f"{state}/prometheus/rules.yaml"]
    assert (state / "prometheus" / "rules.yaml").read_text() == fake_kubectl.RULES


def test_the_fakes_follow_the_key_the_provider_sends_and_their_code(cluster: Path) -> None:
    daemons = processes.registry(state=cluster / "daemons")
    # The key it accepts and its code: a changed key, or a fake of older code, restarts it.
    runpod = daemons["fake-runpod-runpod-fake"].fingerprint()
    assert runpod.startswith(fake_kubectl.SECRET_DATA["runpodFakeApiKey"])
    assert "class FakeRunpod" in runpod
    assert "class ReplicaServer" in runpod
    assert "class FakeCloud" in daemons["fake-cloud-fake-a"].fingerprint()
    assert daemons["kube-state-metrics"].fingerprint is None


def _adapter_outside_stack(tmp_path: Path) -> Path:
    """The local stack with the metrics adapter run outside the cluster, on the port its ExternalName Service names:
    the stack deploys no pod of it."""
    document = yaml.safe_load((processes.ROOT / "stacks" / "Pulumi.local.yaml").read_text())
    adapter = document["config"]["gpucluster:metricsAdapter"]
    del adapter["nodeSelector"], adapter["tolerations"]
    adapter["externalAddress"] = "localhost:18445"
    stack = tmp_path / "Pulumi.outside.yaml"
    stack.write_text(yaml.safe_dump(document))
    return stack


@pytest.mark.parametrize(
    "stack",
    [
        "stacks/Pulumi.local.yaml",
        *(f"benchmarks/stacks/Pulumi.{s}.yaml" for s in ("scale96", "scale512", "capacity96")),
    ],
)
def test_nothing_the_stack_deploys_is_a_process(cluster: Path, stack: str) -> None:
    """Every pod the stack deploys runs on the real node (sim/placement.py refuses a stack that leaves one off it):
    no process here runs a controller, the adapter, the virtual node, its provider or a chart's controller, and
    Prometheus has no target of theirs written here."""
    placement = load_sim_module("placement")
    config = processes.stack_config(ROOT / stack)
    pods = {pod.name for pod in placement.pods(config)}
    running = {spec.name for spec in CONTROLLERS if config.running(spec) is not None}
    assert running
    assert running <= pods
    assert {"virtual-node", "kueue", "jobset", "descheduler"} <= pods
    state = cluster / "daemons"
    names = set(processes.registry(stack_file=ROOT / stack, state=state))
    assert not {n for n in names if any(n == p or n.startswith(f"{p}-") for p in pods | {"provider"})}
    processes.registry(stack_file=ROOT / stack, state=state)["prometheus"].prepare()
    prom = json.loads((state / "prometheus" / "prometheus.yml").read_text())
    static = {j["job_name"] for j in prom["scrape_configs"] if "static_configs" in j}
    assert static <= {"kube-state-metrics", "dcgm-exporter", "serving", "gpucluster-fabric-exporter"}


def test_an_adapter_the_stack_runs_outside_the_cluster_runs_here_with_its_serviceaccount(
    cluster: Path, tmp_path: Path
) -> None:
    state = cluster / "daemons"
    daemons = processes.registry(stack_file=_adapter_outside_stack(tmp_path), state=state)
    tools = cluster / "cache" / "tools" / "bin"
    assert daemons["metrics-adapter"].prepare() == [
        f"{tools}/gpucluster-metrics-adapter",
        f"--config={state}/metrics-adapter/config.json",
        "--bind-address=127.0.0.1",
        "--secure-port=18445",
        f"--cert-dir={state}/metrics-adapter/serving-cert",
        *(f"--{k}-kubeconfig={state}/metrics-adapter/kubeconfig" for k in KUBECONFIG_FLAGS),
    ]
    assert (state / "metrics-adapter" / "config.json").read_text() == fake_kubectl.METRICS_ADAPTER[3]
    adapter = json.loads((state / "metrics-adapter" / "kubeconfig").read_text())
    user = "gpucluster-metrics-gpucluster-metrics-adapter"
    assert adapter["users"] == [{"name": user, "user": {"token": f"token-of-{user}"}}]
    assert adapter["clusters"][0]["cluster"]["server"] == "https://127.0.0.1:6443"
    assert (state / "metrics-adapter" / "kubeconfig").stat().st_mode & 0o777 == 0o600
    assert "metrics-adapter" not in processes.registry(state=cluster / "daemons-local")


def _stack_with_runpod_url(tmp_path: Path, url: str) -> Path:
    document = yaml.safe_load((processes.ROOT / "stacks" / "Pulumi.local.yaml").read_text())
    (runpod,) = [p for p in document["config"]["gpucluster:burst"]["providers"] if p["kind"] == "runpod"]
    runpod["runpod"]["url"] = url
    stack = tmp_path / "Pulumi.runpod.yaml"
    stack.write_text(yaml.safe_dump(document))
    return stack


def test_a_runpod_provider_elsewhere_than_loopback_gets_no_fake(cluster: Path, tmp_path: Path) -> None:
    stack = _stack_with_runpod_url(tmp_path, "https://api.runpod.io/v2")
    names = list(processes.registry(stack_file=stack, state=cluster / "daemons"))
    assert not [n for n in names if n.startswith("fake-runpod")]
    assert names[:2] == ["fake-cloud-fake-a", "serving"]


def test_the_fake_runpod_listens_where_a_localhost_url_points(cluster: Path, tmp_path: Path) -> None:
    stack = _stack_with_runpod_url(tmp_path, "http://localhost:18181/v2/")
    fake = processes.registry(stack_file=stack, state=cluster / "daemons")["fake-runpod-runpod-fake"]
    assert fake.prepare()[3:5] == ["--listen", "127.0.0.1:18181"]
    assert fake.ready_url == "http://127.0.0.1:18181/healthz"


@pytest.mark.parametrize("url", ["http://127.0.0.1:18082/api", "https://127.0.0.1:18082/v2"])
def test_a_runpod_url_on_loopback_the_fake_cannot_serve_is_refused(cluster: Path, tmp_path: Path, url: str) -> None:
    stack = _stack_with_runpod_url(tmp_path, url)
    with pytest.raises(processes.DaemonError, match=r"provider runpod-fake: runpod.url .* serves plain http under /v2"):
        processes.registry(stack_file=stack, state=cluster / "daemons")


def test_a_provider_secret_without_the_runpod_key_is_a_clear_error(cluster: Path) -> None:
    with pytest.raises(processes.DaemonError, match="Secret gpucluster-burst/gpucluster-virtual-node-provider-secrets"):
        processes.secret_value("gpucluster-burst", "gpucluster-virtual-node-provider-secrets", "otherKey")


def test_a_configmap_without_the_settings_key_is_a_clear_error(cluster: Path) -> None:
    with pytest.raises(processes.DaemonError, match="ConfigMap gpucluster-burst/gpucluster-virtual-node-settings"):
        processes.deployed_text("gpucluster-burst", "gpucluster-virtual-node-settings", "other.json")
    assert processes.deployed_text("gpucluster-burst", "gpucluster-virtual-node-settings", "settings.json")


# --- a missing program: one line saying what to run ------------------------------------------------------------


def _start(
    cluster: Path, name: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, path: str
) -> tuple[int, str]:
    monkeypatch.setenv("PATH", path)
    rc = processes.main(["start", name], registry=lambda: processes.registry(state=cluster / "daemons"))
    return rc, capsys.readouterr().err


def test_prometheus_not_installed_says_run_make_debian_deps(
    cluster: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rc, err = _start(cluster, "prometheus", capsys, monkeypatch, path_without(cluster, "prometheus"))
    assert (rc, err) == (1, "sim/processes.py: error: prometheus not found: run make debian-deps\n")
    assert not (cluster / "daemons" / "prometheus.pid").exists()


def test_prometheus_on_the_path_is_the_one_started(cluster: Path) -> None:
    bin_dir = cluster / "bin"
    bin_dir.mkdir()
    (bin_dir / "prometheus").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "prometheus").chmod(0o755)
    env = {"PATH": f"{bin_dir}{os.pathsep}{path_without(cluster, 'prometheus')}"}
    assert processes.require_program("prometheus", env) == str(bin_dir / "prometheus")


@pytest.mark.parametrize(
    ("daemon", "program"), [("kube-state-metrics", "kube-state-metrics"), ("metrics-adapter", "kubectl")]
)
def test_a_pinned_tool_not_built_says_run_make_tools(
    daemon: str,
    program: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GPUCLUSTER_CACHE", str(tmp_path / "empty-cache"))
    # The adapter runs as a process only where the stack runs it outside the cluster.
    monkeypatch.setenv("GPUCLUSTER_SIM_STACK", str(_adapter_outside_stack(tmp_path)))
    rc, err = _start(tmp_path, daemon, capsys, monkeypatch, os.environ["PATH"])
    bin_dir = tmp_path / "empty-cache" / "tools" / "bin"
    assert (rc, err) == (1, f"sim/processes.py: error: {program} not found in {bin_dir}: run make tools\n")


def test_an_interpreter_without_the_project_dependencies_says_run_make_venv(tmp_path: Path) -> None:
    """sim/processes.py run by a Python that cannot import the stack's model (no venv): one line, exit 1."""
    env = {"PATH": path_without(tmp_path), "HOME": str(tmp_path), "PYTHONNOUSERSITE": "1"}
    proc = subprocess.run(
        [sys.executable, "-S", "-I", str(ROOT / "sim" / "processes.py"), "status"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.startswith("sim/processes.py: error: ")
    assert proc.stderr.rstrip().endswith("run make venv")
    assert len(proc.stderr.splitlines()) == 1


def test_the_summary_without_kubectl_is_one_line(tmp_path: Path) -> None:
    env = {"PATH": path_without(tmp_path, "kubectl"), "HOME": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "sim" / "summary.py")], capture_output=True, text=True, env=env, check=False
    )
    assert proc.returncode == 1
    assert proc.stderr == (
        "sim/summary.py: cannot summarise the cluster: kubectl not found on PATH: run make tools "
        "(sim/env.sh puts them on PATH)\n"
    )


def test_start_stops_a_process_the_registry_no_longer_has(tmp_path: Path) -> None:
    """A daemon that moved onto the real node must not go on running beside its pods."""
    state = tmp_path / "daemons"
    state.mkdir()
    departed = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        (state / "stall-detector-a.pid").write_text(str(departed.pid))
        (state / "gone-long-ago.pid").write_text("999999999")
        kept = daemon_runtime.Daemon("kept", list, state=state)
        assert processes.stop_departed({"kept": kept}) == ["stall-detector-a"]
        assert departed.wait(timeout=20) is not None
        assert sorted(p.name for p in state.glob("*.pid")) == []
    finally:
        departed.kill()


# --- the fake providers start before the stack is deployed -------------------------------------------------------


def _fake_pulumi(cluster: Path, script: str) -> Path:
    """A pulumi in the scratch tool cache that records its arguments and runs ``script``."""
    pulumi = cluster / "cache" / "tools" / "bin" / "pulumi"
    pulumi.write_text(f'#!/bin/sh\necho "$@" > "{cluster}/pulumi-args"\n{script}\n')
    pulumi.chmod(0o755)
    return cluster / "pulumi-args"


def test_before_the_first_update_runpods_fake_takes_its_key_from_the_stacks_config(
    cluster: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No provider Secret yet (the fakes start before pulumi up): the key is the stack config's value it is made
    from, as RunPod knows the keys it issued before any cluster is deployed."""
    args = _fake_pulumi(cluster, "printf 'key-from-config\\n'")
    monkeypatch.setattr(outside, "kubectl", lambda *a, **k: "")  # kubectl get secret --ignore-not-found: none
    monkeypatch.setenv("GPUCLUSTER_STACK", "local")
    key = outside.runpod_key("gpucluster-burst", "gpucluster-virtual-node-provider-secrets", "runpodFakeApiKey")
    assert key == b"key-from-config"
    assert args.read_text().split() == ["config", "get", "gpucluster:runpodFakeApiKey", "--stack", "local"]


def test_once_deployed_runpods_fake_takes_the_key_the_provider_secret_holds(cluster: Path) -> None:
    args = _fake_pulumi(cluster, "exit 1")
    key = outside.runpod_key("gpucluster-burst", "gpucluster-virtual-node-provider-secrets", "runpodFakeApiKey")
    assert key == b"not-a-real-key"
    assert not args.exists(), "pulumi is not asked once the Secret exists"


def test_a_stack_secret_pulumi_cannot_read_is_a_clear_error_that_shows_no_value(cluster: Path) -> None:
    _fake_pulumi(cluster, "echo 'half-a-secret'; echo 'error: no passphrase' >&2; exit 255")
    with pytest.raises(
        processes.DaemonError, match=r"pulumi config get gpucluster:runpodFakeApiKey .*no passphrase"
    ) as refused:
        outside.stack_secret("runpodFakeApiKey")
    assert "half-a-secret" not in str(refused.value)


def test_start_outside_starts_the_fake_providers_alone(cluster: Path) -> None:
    names = list(processes.outside_registry())
    assert names == ["fake-cloud-fake-a", "fake-runpod-runpod-fake"]
