"""sim/kwok-cluster.sh, the one script that creates and deletes a kwok cluster, against stand-in tools.

The pinned tools are shell stand-ins in a scratch tool cache (``GPUCLUSTER_CACHE``) that log how they were called,
so what the script asks kwokctl and kubectl to do, for the main cluster's inventory and for the remote one, is
checked without starting a control plane. Its state goes to a scratch directory under .state (the script refuses
any other), removed by ``down``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "sim" / "kwok-cluster.sh"
TOOLS = ("kwokctl", "kwok", "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")

KWOKCTL = """#!/bin/sh
echo "kwokctl $*" >>"$FAKE_TOOLS_LOG"
case "$1 $2" in
  "--version ") echo "kwokctl version v0.8.0 go1.26" ;;
  "create cluster")
    while [ $# -gt 0 ]; do
      case "$1" in --name) name="$2" ;; --kubeconfig) kubeconfig="$2" ;; esac
      shift
    done
    mkdir -p "$KWOK_WORKDIR/clusters/$name/pids" && touch "$KWOK_WORKDIR/clusters/$name/kwok.yaml"
    echo "apiVersion: v1" >"$kubeconfig" ;;
  "delete cluster") rm -rf "$KWOK_WORKDIR/clusters/$4" ;;
esac
"""
KUBECTL = """#!/bin/sh
echo "kubectl $*" >>"$FAKE_TOOLS_LOG"
case "$*" in
  "apply -f -") cat >>"$FAKE_TOOLS_LOG.applied" ;;
  "create namespace"*) printf 'apiVersion: v1\\nkind: Namespace\\nmetadata:\\n  name: %s\\n' "$3" ;;
esac
exit 0
"""
OTHER = """#!/bin/sh
echo "$(basename "$0") $*" >>"$FAKE_TOOLS_LOG"
echo "Kubernetes v1.36.3"
"""


@dataclass(frozen=True)
class Tools:
    env: dict[str, str]
    log: Path
    state: Path

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def applied(self) -> list[str]:
        """Names of the nodes kubectl applied first (the node List), in order."""
        applied = Path(f"{self.log}.applied")
        if not applied.exists():
            return []
        first, _ = json.JSONDecoder().raw_decode(applied.read_text())
        return [n["metadata"]["name"] for n in first["items"]]

    def run(self, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(SCRIPT), *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=self.env,
            cwd=ROOT,
            check=False,
        )


@pytest.fixture
def tools(tmp_path: Path) -> Iterator[Tools]:
    bin_dir = tmp_path / "cache" / "tools" / "bin"
    bin_dir.mkdir(parents=True)
    for name in TOOLS:
        (bin_dir / name).write_text({"kwokctl": KWOKCTL, "kubectl": KUBECTL}.get(name, OTHER))
        (bin_dir / name).chmod(0o755)
    state = ROOT / ".state" / f"test-kwok-cluster-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "GPUCLUSTER_CACHE": str(tmp_path / "cache"), "FAKE_TOOLS_LOG": str(tmp_path / "calls")}
    yield Tools(env=env, log=tmp_path / "calls", state=state)
    shutil.rmtree(state, ignore_errors=True)


def _nodes(*args: str) -> str:
    proc = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "python"), str(ROOT / "sim" / "nodes.py"), *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout


def test_up_creates_the_cluster_applies_the_nodes_and_their_status(tools: Tools) -> None:
    nodes = _nodes(str(ROOT / "stacks" / "Pulumi.local.yaml"))
    proc = tools.run(
        "up", "--name", "sim-test", "--state", str(tools.state), "--node-selector", "gpucluster.io/flavor", stdin=nodes
    )
    assert proc.returncode == 0, proc.stderr
    assert "applying GPU nodes: h100: 4 nodes x 8 GPUs" in proc.stdout
    calls = tools.calls()
    (create,) = [c for c in calls if c.startswith("kwokctl create cluster")]
    for arg in (
        "--name sim-test",
        "--runtime binary",
        f"--kubeconfig {tools.state}/kubeconfig",
        f"--config {ROOT}/sim/kwok-stages.yaml",
        "--extra-args kwok-controller=manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
        "--extra-args kube-scheduler=leader-elect=false",
    ):
        assert arg in create
    assert tools.applied() == [f"h100-node-{i}" for i in range(4)]
    patches = [c for c in calls if c.startswith("kubectl patch node")]
    assert len(patches) == 4
    assert '--subresource=status --type=merge -p {"status": {"capacity":' in patches[0]
    assert calls[-1] == "kubectl wait --for=condition=Ready node -l gpucluster.io/flavor --timeout=120s"
    assert not any("create namespace" in c for c in calls)
    assert (tools.state / "kwok" / "clusters" / "sim-test" / "kwok.yaml").exists()

    # A second up finds it running and only reconciles the nodes.
    again = tools.run(
        "up", "--name", "sim-test", "--state", str(tools.state), "--node-selector", "gpucluster.io/flavor", stdin=nodes
    )
    assert again.returncode == 0, again.stderr
    assert "cluster 'sim-test' is already up" in again.stdout
    assert len([c for c in tools.calls() if c.startswith("kwokctl create")]) == 1

    down = tools.run("down", "--name", "sim-test", "--state", str(tools.state))
    assert down.returncode == 0, down.stderr
    assert "kwokctl delete cluster --name sim-test" in tools.calls()
    assert not tools.state.exists()


def test_the_remote_cluster_gets_its_namespace(tools: Tools) -> None:
    args = ("--name", "remote-test", "--state", str(tools.state), "--node-selector", "gpucluster.io/remote=true")
    proc = tools.run("up", *args, "--namespace", "burst-inference", stdin=_nodes("--remote"))
    assert proc.returncode == 0, proc.stderr
    assert "applying GPU nodes: 2 nodes x 8 GPUs" in proc.stdout
    assert tools.applied() == ["remote-gpu-0", "remote-gpu-1"]
    assert "kubectl create namespace burst-inference --dry-run=client -o yaml" in tools.calls()
    assert tools.calls()[-1] == "kubectl wait --for=condition=Ready node -l gpucluster.io/remote=true --timeout=120s"


def test_a_broken_node_list_stops_before_the_cluster_is_touched(tools: Tools) -> None:
    args = ("up", "--name", "sim-test", "--state", str(tools.state), "--node-selector", "x")
    proc = tools.run(*args, stdin='{"kind": "List"}')
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        "sim/node_list.py: the node list on stdin: not a Kubernetes List: no items[]",
        "kwok-cluster.sh: error: the node list on stdin is not usable (see above)",
    ]
    assert not any(c.startswith("kwokctl create") for c in tools.calls())


def test_tools_not_built_are_named_with_what_to_run(tools: Tools, tmp_path: Path) -> None:
    env = {**tools.env, "GPUCLUSTER_CACHE": str(tmp_path / "empty")}
    proc = subprocess.run(
        ["bash", str(SCRIPT), "up", "--name", "x", "--state", str(tools.state), "--node-selector", "x"],
        input="",
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert proc.returncode == 1
    assert proc.stderr == (
        "kwok-cluster.sh: error: not built: kwokctl kwok etcd kube-apiserver kube-controller-manager kube-scheduler "
        f"kubectl (expected in {tmp_path}/empty/tools/bin); run make tools\n"
    )


def test_down_of_a_cluster_that_does_not_exist_is_not_an_error(tools: Tools) -> None:
    proc = tools.run("down", "--name", "never-created", "--state", str(tools.state))
    assert (proc.returncode, proc.stderr) == (0, "")
    assert tools.calls() == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["down", "--name", "x", "--state", "/tmp"], "--state must be a directory under"),
        (["down", "--name", "x", "--state", ".state/../.."], "--state must be a directory under"),
        (["down", "--name", "Not_A_Label", "--state", ".state/x"], "--name 'Not_A_Label' is not a DNS label"),
        (["down", "--state", ".state/x"], "--name is required"),
        (["sideways", "--name", "x"], "expected up or down, got 'sideways'"),
        (["down", "--name"], "--name needs a value"),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_removed(tools: Tools, args: list[str], message: str) -> None:
    proc = tools.run(*args)
    assert proc.returncode == 1
    assert message in proc.stderr
    assert len(proc.stderr.splitlines()) == 1
    assert tools.calls() == []
