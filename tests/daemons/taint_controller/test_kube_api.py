"""The Kubernetes side against a real etcd + kube-apiserver (the pinned tools): JSON patches, 409s, Events,
Lease election, and the daemon as a process (taint added, lease released on SIGTERM).

Starts its own API server (no scheduler, no controllers: nothing else touches the objects); skipped, saying why,
when the pinned tools are not built.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from kubernetes import client

from daemons.taint_controller.kube import (
    ConflictError,
    KubeError,
    KubeEventSink,
    KubeLeaseApi,
    KubeNodeApi,
    LeaderElector,
    NodeState,
    Taint,
    add_taint_ops,
    remove_taint_ops,
    replace_taint_ops,
)
from tests.daemons.taint_controller.conftest import NS, ApiServer, free_port, wait_for
from tests.support.apiserver import run_once, scrape, start_controller
from tests.support.sim import tools_bin

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:Unverified HTTPS request"),
]

NODE = "gpu-burst"
KEY = "gpucluster.io/in-cluster-capacity"
OURS = Taint(KEY, "NoSchedule", "true")
VK = Taint("virtual-kubelet.io/provider", "NoSchedule", "gpucluster")


@pytest.fixture
def node(apiserver: ApiServer) -> Iterator[KubeNodeApi]:
    core = client.CoreV1Api(apiserver.api_client)
    core.create_node(client.V1Node.model_validate({"metadata": {"name": NODE}, "spec": {"taints": [VK.to_k8s()]}}))
    yield KubeNodeApi(apiserver.api_client)
    core.delete_node(NODE)


def ours_only(state: NodeState) -> tuple[Taint, ...]:
    """The taints minus the ones the API server adds to a node without a kubelet."""
    return tuple(t for t in state.taints if not t.key.startswith("node.kubernetes.io/"))


def test_taint_patches_touch_only_the_burst_taint(node: KubeNodeApi) -> None:
    state = node.get_node(NODE)
    state = node.patch_node(NODE, add_taint_ops(state, OURS))
    assert ours_only(state) == (VK, OURS)
    state = node.patch_node(NODE, remove_taint_ops(state, KEY))
    assert ours_only(state) == (VK,)
    state = node.patch_node(NODE, add_taint_ops(state, Taint(KEY, "NoExecute", "true")))
    state = node.patch_node(NODE, replace_taint_ops(state, KEY, OURS))
    assert ours_only(state) == (VK, OURS)


def test_a_stale_read_is_a_conflict_and_a_bad_patch_is_not(node: KubeNodeApi) -> None:
    stale = node.get_node(NODE)
    node.patch_node(NODE, add_taint_ops(stale, Taint("example.com/other", "NoSchedule")))
    with pytest.raises(ConflictError):
        node.patch_node(NODE, add_taint_ops(stale, OURS))
    fresh = node.get_node(NODE)
    with pytest.raises(KubeError) as info:  # the same key and effect twice: a validation error
        node.patch_node(NODE, add_taint_ops(fresh, VK))
    assert not isinstance(info.value, ConflictError)


def test_a_node_taints_list_is_created_when_absent(apiserver: ApiServer, node: KubeNodeApi) -> None:
    client.CoreV1Api(apiserver.api_client).patch_node(NODE, {"spec": {"taints": None}})
    state = node.get_node(NODE)
    assert state.taints == ()
    assert node.patch_node(NODE, add_taint_ops(state, OURS)).taints == (OURS,)


def test_a_missing_node_is_a_kube_error(apiserver: ApiServer) -> None:
    with pytest.raises(KubeError, match="404"):
        KubeNodeApi(apiserver.api_client).get_node("no-such-node")


def test_events_land_on_the_node(apiserver: ApiServer, node: KubeNodeApi) -> None:
    """In ``default``: the API server refuses an Event about a Node in any other namespace (checked below)."""
    KubeEventSink(apiserver.api_client, "test_1").emit(
        node.get_node(NODE), NODE, "Warning", "HeadroomQueryFailed", "probe"
    )
    events = client.CoreV1Api(apiserver.api_client).list_namespaced_event("default").items
    found = [e for e in events if e.reason == "HeadroomQueryFailed"]
    assert len(found) == 1
    assert (found[0].type, found[0].involved_object.kind, found[0].involved_object.name) == ("Warning", "Node", NODE)
    described = subprocess.run(
        [str(tools_bin() / "kubectl"), "--kubeconfig", str(apiserver.kubeconfig), "describe", "node", NODE],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "HeadroomQueryFailed" in described
    elsewhere = client.CoreV1Event.model_validate(
        {
            "metadata": {"generateName": "x.", "namespace": NS},
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": NODE},
            "reason": "Probe",
            "message": "probe",
        }
    )
    with pytest.raises(client.ApiException) as info:
        client.CoreV1Api(apiserver.api_client).create_namespaced_event(NS, elsewhere)
    assert info.value.status == 422


def test_lease_election_on_the_real_api(apiserver: ApiServer) -> None:
    leases = KubeLeaseApi(apiserver.api_client)

    def elector(identity: str) -> LeaderElector:
        return LeaderElector(leases, NS, "election-test", identity, lease_duration_s=15, renew_deadline_s=10)

    a, b = elector("a"), elector("b")
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    assert a.try_acquire_or_renew()  # renew
    stale = leases.get(NS, "election-test")
    assert stale is not None
    assert stale.holder == "a"
    assert a.try_acquire_or_renew()
    with pytest.raises(ConflictError):
        leases.update(NS, "election-test", stale)
    with pytest.raises(ConflictError):
        leases.create(NS, "election-test", stale)
    assert a.release()
    released = leases.get(NS, "election-test")
    assert released is not None
    assert released.holder == ""
    assert b.try_acquire_or_renew()
    held = leases.get(NS, "election-test")
    assert held is not None
    assert (held.holder, held.transitions) == ("b", 1)


class _Prometheus(ThreadingHTTPServer):
    daemon_threads = True


@pytest.fixture
def prometheus() -> Iterator[str]:
    """Headroom 8 GPUs, nothing pending."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            value = "8" if "allocatable" in self.path else "0"
            body = json.dumps(
                {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [0, value]}]}}
            ).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = _Prometheus(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def settings_file(tmp_path: Path, prometheus: str, lease: str, **more: str) -> Path:
    """The controller's settings: the fake Prometheus, the test node, its own Lease."""
    path = tmp_path / "settings.json"
    path.write_text(
        json.dumps({"prometheusUrl": prometheus, "namespace": NS, "leaseName": lease, "nodeName": NODE, **more})
    )
    return path


def test_the_daemon_adds_the_taint_and_releases_its_lease_on_sigterm(
    apiserver: ApiServer, node: KubeNodeApi, prometheus: str, tmp_path: Path
) -> None:
    settings = settings_file(tmp_path, prometheus, "daemon-test", holdAdd="2s", interval="1s")
    port = free_port()
    flags = ("--listen", f"127.0.0.1:{port}", "--identity", "daemon-1")
    proc = start_controller("daemons.taint_controller", settings, apiserver.kubeconfig, *flags, stderr=subprocess.PIPE)
    try:
        wait_for("burst taint added", lambda: OURS in node.get_node(NODE).taints)
        # The taint is written before the tick updates its gauges: the scrape may come in between.
        present = "gpucluster_taint_controller_taint_present 1.0"
        wait_for("taint_present gauge", lambda: present in scrape(port).splitlines(), 10)
        text = scrape(port).splitlines()
        assert "gpucluster_taint_controller_is_leader 1.0" in text
        assert "gpucluster_taint_controller_taint_present 1.0" in text
        assert 'gpucluster_taint_controller_decisions_total{action="add"} 1.0' in text
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr[-2000:]
    lease = KubeLeaseApi(apiserver.api_client).get(NS, "daemon-test")
    assert lease is not None
    assert lease.holder == ""
    logs = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    assert any(entry["msg"] == "released the lease" for entry in logs)
    events = client.CoreV1Api(apiserver.api_client).list_namespaced_event("default").items
    assert any(e.reason == "BurstTaintAdded" and e.involved_object.name == NODE for e in events)


def test_once_dry_run_prints_the_decision_and_writes_nothing(
    apiserver: ApiServer, node: KubeNodeApi, prometheus: str, tmp_path: Path
) -> None:
    settings = settings_file(tmp_path, prometheus, "once-test", holdAdd="1ms")
    before = node.get_node(NODE)
    proc = run_once("daemons.taint_controller", settings, apiserver.kubeconfig, "--dry-run")
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    assert result["headroom"] == 8
    assert result["pending"] == 0
    assert result["taintPresent"] is False
    assert result["leader"] is True
    assert result["action"] == "hold"  # the first observation starts the hold timer
    assert result["changed"] is None
    assert node.get_node(NODE).resource_version == before.resource_version
    assert KubeLeaseApi(apiserver.api_client).get(NS, "once-test") is None
