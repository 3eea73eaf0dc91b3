"""KubeSourceCluster's calls, against a stub API server speaking just enough of the Kubernetes REST API."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from daemons.burst_provider.kube import KubeSourceCluster


def pod(name: str, phase: str = "Running", deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "inference", "uid": f"uid-{name}", "labels": {"app": "web"}}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-29T10:00:00Z"
    return {
        "metadata": meta,
        "spec": {"nodeName": "gpu-burst", "containers": [{"name": "server", "image": "x:1"}]},
        "status": {"phase": phase},
    }


def slice_obj(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": "inference", "resourceVersion": "7", "labels": {"a": "b"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["203.0.113.1"], "conditions": {"ready": True}}],
        "ports": [{"name": "web", "port": 8080, "protocol": "TCP"}],
    }


class Stub:
    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, list[str]], Any]] = []
        self.slices: dict[str, dict[str, Any]] = {"existing": slice_obj("existing")}
        self.silent_for = 0.0  # seconds the server holds every answer back (an API server that stopped answering)

    def answer(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> tuple[int, Any]:
        self.requests.append((method, path, query, body))
        not_found = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}
        if path == "/api/v1/pods":
            items = [pod("a"), pod("done", phase="Succeeded"), pod("bye", deleting=True)]
            return 200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}
        if path == "/api/v1/namespaces/inference/configmaps/cfg":
            return 200, {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "cfg"}, "data": {"k": "v"}}
        if path == "/api/v1/namespaces/inference/secrets/tok":
            data = {"token": base64.b64encode(b"s3cret").decode()}
            return 200, {"kind": "Secret", "apiVersion": "v1", "metadata": {"name": "tok"}, "data": data}
        if path == "/api/v1/namespaces/inference/services":
            svc = {"metadata": {"name": "web"}, "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}
            return 200, {"kind": "ServiceList", "apiVersion": "v1", "metadata": {}, "items": [svc]}
        if path.startswith("/api/v1/namespaces/inference/pods/") and method == "PATCH":
            if path.endswith("/gone"):
                return 404, not_found
            return 200, pod(path.rsplit("/", 1)[1])
        base = "/apis/discovery.k8s.io/v1/namespaces/inference/endpointslices"
        if path == base and method == "GET":
            return 200, {"kind": "EndpointSliceList", "metadata": {}, "items": list(self.slices.values())}
        if path == base and method == "POST":
            self.slices[body["metadata"]["name"]] = body
            return 201, body
        if path.startswith(base + "/"):
            name = path.rsplit("/", 1)[1]
            if name not in self.slices:
                return 404, not_found
            if method == "GET":
                return 200, self.slices[name]
            if method == "PUT":
                self.slices[name] = body
                return 200, body
            if method == "DELETE":
                del self.slices[name]
                return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success"}
        return 404, not_found


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[KubeSourceCluster, Stub]]:
    stub = Stub()

    class Handler(BaseHTTPRequestHandler):
        def _do(self) -> None:
            url = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            time.sleep(stub.silent_for)
            code, answer = stub.answer(self.command, url.path, parse_qs(url.query), body)
            raw = json.dumps(answer).encode()
            try:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up waiting (the timeout test)

        def do_GET(self) -> None:
            self._do()

        def do_POST(self) -> None:
            self._do()

        def do_PUT(self) -> None:
            self._do()

        def do_PATCH(self) -> None:
            self._do()

        def do_DELETE(self) -> None:
            self._do()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{server.server_address[1]}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    try:
        yield KubeSourceCluster(str(kubeconfig)), stub
    finally:
        server.shutdown()
        server.server_close()


def test_live_pods_leave_out_terminal_and_deleting(api: tuple[KubeSourceCluster, Stub]) -> None:
    source, stub = api
    pods = source.live_pods_on_node("gpu-burst")
    assert [p["metadata"]["name"] for p in pods] == ["a"]
    assert pods[0]["metadata"]["uid"] == "uid-a"  # camelCase JSON, as the service expects
    assert pods[0]["spec"]["nodeName"] == "gpu-burst"
    assert stub.requests[0][2]["fieldSelector"] == ["spec.nodeName=gpu-burst"]


def test_references(api: tuple[KubeSourceCluster, Stub]) -> None:
    source, _ = api
    assert source.config_map("inference", "cfg") == {"k": "v"}
    assert source.config_map("inference", "absent") is None
    assert source.secret("inference", "tok") == {"token": "s3cret"}
    assert source.secret("inference", "absent") is None
    (svc,) = source.services("inference")
    assert svc["spec"]["selector"] == {"app": "web"}


def test_annotations_patch_and_missing_pod(api: tuple[KubeSourceCluster, Stub]) -> None:
    source, stub = api
    source.annotate_pod("inference", "a", {"burst.gpucluster.io/address": "203.0.113.1", "old": None})
    method, path, _, body = stub.requests[-1]
    assert (method, path) == ("PATCH", "/api/v1/namespaces/inference/pods/a")
    assert body == {"metadata": {"annotations": {"burst.gpucluster.io/address": "203.0.113.1", "old": None}}}
    source.annotate_pod("inference", "gone", {"x": "y"})  # no error


def test_endpoint_slices_create_replace_delete(api: tuple[KubeSourceCluster, Stub]) -> None:
    source, stub = api
    (existing,) = source.endpoint_slices("inference", {"a": "b", "c": "d"})
    assert existing["addressType"] == "IPv4"
    assert stub.requests[-1][2]["labelSelector"] == ["a=b,c=d"]
    fresh = slice_obj("fresh")
    del fresh["metadata"]["resourceVersion"]
    source.apply_endpoint_slice(fresh)
    assert stub.requests[-1][0] == "POST"
    changed = slice_obj("existing")
    del changed["metadata"]["resourceVersion"]
    changed["endpoints"][0]["addresses"] = ["203.0.113.2"]
    source.apply_endpoint_slice(changed)
    method, _, _, body = stub.requests[-1]
    assert method == "PUT"
    assert body["metadata"]["resourceVersion"] == "7"
    assert stub.slices["existing"]["endpoints"][0]["addresses"] == ["203.0.113.2"]
    source.delete_endpoint_slice("inference", "existing")
    source.delete_endpoint_slice("inference", "existing")  # already gone: no error
    assert set(stub.slices) == {"fresh"}


def test_an_api_server_that_stops_answering_fails_the_call_instead_of_stopping_the_loop(
    api: tuple[KubeSourceCluster, Stub], tmp_path: Path
) -> None:
    """Every call carries a timeout: the reconcile loop logs the error and carries on at its next pass."""
    _, stub = api
    source = KubeSourceCluster(str(tmp_path / "kubeconfig"), request_timeout=(1.0, 0.3))
    stub.silent_for = 1.5
    calls = [
        lambda: source.live_pods_on_node("gpu-burst"),
        lambda: source.services("inference"),
        lambda: source.annotate_pod("inference", "a", {"x": "y"}),
        lambda: source.endpoint_slices("inference", {"a": "b"}),
        lambda: source.config_map("inference", "cfg"),
    ]
    for call in calls:
        started = time.monotonic()
        with pytest.raises(Exception, match=r"(?i)timed out"):
            call()
        assert time.monotonic() - started < stub.silent_for
    stub.silent_for = 0.0
    assert [p["metadata"]["name"] for p in source.live_pods_on_node("gpu-burst")] == ["a"]
