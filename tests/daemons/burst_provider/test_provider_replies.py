"""Hostile provider replies: not JSON, the wrong shape, a wrong type, huge, nested without end, echoing a key.

Every class is refused by each adapter (fake cloud, RunPod, the target cluster) with a ProviderError that names the
provider, the call and the field, shows no value that could be a credential and never grows with the reply; the
well-formed reply next to it is accepted. The replies come from a stand-in server that answers each path with the
bytes a test gives it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from daemons.burst_provider import replies
from daemons.burst_provider.http_client import redact
from daemons.burst_provider.providers.base import InstanceState, ProviderError
from daemons.burst_provider.providers.fake import FakeCloudProvider
from daemons.burst_provider.providers.kubernetes.provider import KubernetesClusterProvider
from daemons.burst_provider.providers.runpod import ENV_NODE, NAME_PREFIX, RunPodProvider
from daemons.burst_provider.replies import ReplyError
from daemons.toolkit.http import HttpService, Request, Response, Routes

SECRET = "sk-live-0123456789abcdef"
KEY = "rpa_TESTKEY0123456789"


class Stub:
    """Answers each path with the (status, bytes) a test set; 404 otherwise."""

    def __init__(self) -> None:
        self.answers: dict[str, tuple[int, bytes]] = {}
        self.service = HttpService(
            "127.0.0.1", 0, Routes(fallback=self._answer), log=logging.getLogger("stub"), methods=("GET", "POST")
        ).start()

    def _answer(self, request: Request) -> Response:
        request.read_body()
        status, body = self.answers.get(request.path, (404, b'{"error": "not found"}'))
        return Response(status, body, "application/json")

    def set(self, path: str, body: object, status: int = 200) -> None:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.answers[path] = (status, raw)


@pytest.fixture
def stub() -> Iterator[Stub]:
    s = Stub()
    yield s
    s.service.stop()


def refused(call: Any, *args: Any) -> str:
    with pytest.raises(ProviderError) as info:
        call(*args)
    text = str(info.value)
    assert SECRET not in text
    assert KEY not in text
    assert len(text) < 700
    return text


# --- the reply readers themselves ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (b"<html>gateway</html>", "reply is not JSON"),
        (b"\xff\xfe{}", "reply is not UTF-8 text"),
        (b"[" * 100_000 + b"]" * 100_000, "reply nests too deeply"),
        (b"1" * 5000, "reply holds a number too long"),
    ],
)
def test_decode_json_refuses(raw: bytes, problem: str) -> None:
    with pytest.raises(ReplyError, match=problem):
        replies.decode_json(raw)


def test_decode_json_accepts_json() -> None:
    assert replies.decode_json(b'{"a": [1, 2.5, "x", null, true]}') == {"a": [1, 2.5, "x", None, True]}


def test_read_capped_refuses_more_than_the_limit_and_takes_the_limit() -> None:
    class Body:
        def __init__(self, data: bytes) -> None:
            self.data = data

        def read(self, amt: int = -1, /) -> bytes:
            return self.data[:amt]

    assert replies.read_capped(Body(b"x" * 10), 10) == b"x" * 10
    with pytest.raises(ReplyError, match="larger than 10 bytes"):
        replies.read_capped(Body(b"x" * 11), 10)


@pytest.mark.parametrize(
    ("read", "value", "problem"),
    [
        (lambda v: replies.integer(v, "f"), True, "f: expected a whole number, got a boolean"),
        (lambda v: replies.integer(v, "f"), 2.0, "f: expected a whole number, got a number"),
        (lambda v: replies.integer(v, "f", high=10), 11, r"f: expected a whole number in \[0, 10\], got 11"),
        (lambda v: replies.integer(v, "f"), 10**400, "got a larger one"),
        (lambda v: replies.number(v, "f"), float("nan"), "f: expected a finite number"),
        (lambda v: replies.number(v, "f"), "1.5", "f: expected a number, got a string of 3 characters"),
        (lambda v: replies.text(v, "f", max_len=4), "abcde", "f: expected at most 4 characters, got 5"),
        (lambda v: replies.text(v, "f"), SECRET.encode(), "f: expected a string, got bytes"),
        (lambda v: replies.obj(v, "f"), [SECRET], "f: expected an object, got a list of 1 items"),
        (lambda v: replies.string_map(v, "f"), {"TOKEN": [SECRET]}, "f.TOKEN: expected a string, got a list"),
    ],
)
def test_typed_reads_refuse_naming_the_field_without_the_value(read: Any, value: object, problem: str) -> None:
    with pytest.raises(ReplyError, match=problem) as info:
        read(value)
    assert SECRET not in str(info.value)


def test_typed_reads_accept_what_fits() -> None:
    assert replies.integer(10, "f", high=10) == 10
    assert replies.number(2, "f") == 2.0
    assert replies.opt_text(None, "f") == ""
    assert replies.string_map({"A": "b"}, "f") == {"A": "b"}
    assert replies.opt_items(None, "f") == []


def test_a_long_key_is_cut_in_the_field_path() -> None:
    with pytest.raises(ReplyError) as info:
        replies.string_map({"k" * 5000: 1}, "env")
    assert len(str(info.value)) < 200


@pytest.mark.parametrize(
    "text",
    [
        f"bad key Bearer {SECRET}",
        f'{{"apiKey": "{SECRET}"}}',
        f"token={SECRET} refused",
        f"password: {SECRET}",
    ],
)
def test_redact_hides_credential_looking_text(text: str) -> None:
    out = redact(text)
    assert SECRET not in out
    assert "<redacted>" in out


def test_redact_keeps_an_ordinary_message_and_bounds_it() -> None:
    assert redact("pod not found") == "pod not found"
    assert len(redact("x" * 10_000)) == 300
    assert redact("line\nbreak\x00") == "line break "


# --- the fake cloud -----------------------------------------------------------------------------------------------

GOOD_INSTANCE = {
    "id": "i-000001",
    "tags": {"node": "gpu-burst", "namespace": "inference", "pod": "web-1", "uid": "u-1"},
    "gpuType": "H100",
    "gpuCount": 1,
    "state": "running",
    "address": "198.51.100.1",
    "ports": [{"name": "http", "port": 8000, "protocol": "TCP"}],
    "startedAt": 1_800_000_000.0,
    "finishedAt": None,
    "exitCode": None,
    "message": "",
}


def fake(stub: Stub) -> FakeCloudProvider:
    return FakeCloudProvider("fake-a", stub.service.url, retries=0, backoff=0)


def with_instance(**changes: object) -> dict[str, Any]:
    return {"instances": [{**GOOD_INSTANCE, **changes}]}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"<html>oops</html>", "provider fake-a: list_instances: reply is not JSON"),
        ({"instances": {}}, "list_instances: reply.instances: expected a list, got an object with 0 keys"),
        ([], "list_instances: reply: expected an object, got a list of 0 items"),
        (with_instance(state=5), "reply.instances[0].state: expected a string, got a number"),
        (with_instance(state="zombie"), "reply.instances[0].state: unknown state 'zombie'"),
        (with_instance(state="z" * 200), "reply.instances[0].state: unknown state a string of 200 characters"),
        (with_instance(gpuCount=True), "reply.instances[0].gpuCount: expected a whole number, got a boolean"),
        (with_instance(gpuCount="1"), "reply.instances[0].gpuCount: expected a whole number, got a string"),
        (with_instance(ports=[{"port": 70000}]), "reply.instances[0].ports[0].port: expected a whole number in"),
        (
            with_instance(tags={"node": "gpu-burst"}),
            "reply.instances[0].tags.namespace: expected a string, got null",
        ),
        (with_instance(address={"token": SECRET}), "reply.instances[0].address: expected a string, got an object"),
        (with_instance(message="m" * 5000), "reply.instances[0].message: expected at most 4096 characters"),
        (with_instance(startedAt=float("inf")), "reply.instances[0].startedAt: expected a finite number"),
        (b'{"instances": ' + b"[" * 50_000 + b"]" * 50_000 + b"}", "list_instances: reply nests too deeply"),
    ],
)
def test_fake_cloud_replies_refused(stub: Stub, body: object, message: str) -> None:
    stub.set("/instances", body)
    text = refused(fake(stub).list_instances, "gpu-burst")
    assert message in text


def test_fake_cloud_well_formed_reply_accepted(stub: Stub) -> None:
    stub.set("/instances", {"instances": [GOOD_INSTANCE, {**GOOD_INSTANCE, "id": "i-2", "ports": None}]})
    first, second = fake(stub).list_instances("gpu-burst")
    assert (first.state, first.address, first.ports[0].port) == (InstanceState.RUNNING, "198.51.100.1", 8000)
    assert second.ports == ()


def test_fake_cloud_huge_reply_refused_at_the_limit(stub: Stub) -> None:
    stub.set("/instances", {"instances": [GOOD_INSTANCE] * 20})
    p = fake(stub)
    assert len(p.list_instances("gpu-burst")) == 20
    p._http.reply_limit = 1000
    assert "list_instances: reply is larger than 1000 bytes" in refused(p.list_instances, "gpu-burst")


@pytest.mark.parametrize(
    ("offer", "message"),
    [
        ({"gpuType": "H100", "pricePerGpuHour": "2.5", "availableGpus": 1}, "pricePerGpuHour: expected a number"),
        ({"gpuType": "H100", "pricePerGpuHour": 2.5, "availableGpus": -1}, "availableGpus: expected a whole number in"),
        ({"gpuType": 7, "pricePerGpuHour": 2.5, "availableGpus": 1}, "gpuType: expected a string, got a number"),
    ],
)
def test_fake_cloud_offers_refused(stub: Stub, offer: dict[str, Any], message: str) -> None:
    stub.set("/offers", {"offers": [offer]})
    assert f"provider fake-a: offers: reply.offers[0].{message}" in refused(fake(stub).offers)


def test_fake_cloud_offers_accepted(stub: Stub) -> None:
    stub.set("/offers", {"offers": [{"gpuType": "H100", "pricePerGpuHour": 2.5, "availableGpus": 99}]})
    [offer] = fake(stub).offers()
    assert (offer.gpu_type, offer.price_per_gpu_hour, offer.available_gpus) == ("H100", 2.5, 16)  # capped at maxGpus


def test_an_error_reply_echoing_a_credential_is_redacted(stub: Stub) -> None:
    stub.set("/instances", {"error": f"denied for apiKey={SECRET}"}, status=403)
    text = refused(fake(stub).list_instances, "gpu-burst")
    assert "HTTP 403: denied for apiKey=<redacted>" in text


# --- RunPod -------------------------------------------------------------------------------------------------------

OURS = {"env": {ENV_NODE: "gpu-burst", "GPUCLUSTER_POD_UID": "u-1"}, "name": f"{NAME_PREFIX}gpu-burst-u-1"}
RUNNING = {**OURS, "id": "p1", "status": "RUNNING"}


def runpod(stub: Stub) -> RunPodProvider:
    return RunPodProvider("runpod", KEY, {}, url=stub.service.url + "/v2", retries=0, backoff=0)


@pytest.mark.parametrize(
    ("pod", "message"),
    [
        ({**OURS, "status": "RUNNING"}, "reply.pods[0].id: expected a string, got null"),
        ({**OURS, "id": "p1"}, "reply.pods[0].status: expected a string, got null"),
        (
            {**RUNNING, "runtime": {"ports": [{"private": 8000, "public": "10010", "type": "tcp", "ip": "x"}]}},
            "reply.pods[0].runtime.ports[0].public: expected a whole number",
        ),
        ({**RUNNING, "env": {**OURS["env"], "HF_TOKEN": 5}}, "reply.pods[0].env.HF_TOKEN: expected a string"),
        (
            {**RUNNING, "runtime": {"ports": [{"private": 8000, "public": 1, "type": "tcp", "ip": ["203.0.113.1"]}]}},
            "reply.pods[0].runtime.ports[0].ip: expected a string, got a list",
        ),
        ({**RUNNING, "gpu": "H100"}, "reply.pods[0].gpu: expected an object, got a string"),
        ({**RUNNING, "gpu": {"id": "x", "count": -2}}, "reply.pods[0].gpu.count: expected a whole number in [0, 1024]"),
        ({**RUNNING, "runtime": {"ports": "8000"}}, "reply.pods[0].runtime.ports: expected a list, got a string"),
    ],
)
def test_runpod_pod_fields_refused(stub: Stub, pod: dict[str, Any], message: str) -> None:
    stub.set("/v2/pods", {"pods": [pod]})
    assert f"provider runpod: list_instances: {message}" in refused(runpod(stub).list_instances, "gpu-burst")


def test_runpod_listing_shape_refused(stub: Stub) -> None:
    stub.set("/v2/pods", [RUNNING])  # v1's bare list
    assert "list_instances: reply: expected an object, got a list of 1 items" in refused(
        runpod(stub).list_instances, "n"
    )
    stub.set("/v2/pods", {"pods": ["not a pod"]})
    assert "list_instances: reply.pods[0]: expected an object, got a string" in refused(
        runpod(stub).list_instances, "n"
    )
    stub.set("/v2/pods", {"pods": [{"env": [SECRET]}]})
    assert "reply.pods[0].env: expected an object, got a list of 1 items" in refused(runpod(stub).list_instances, "n")


def test_runpod_other_pods_of_the_account_are_not_read_field_by_field(stub: Stub) -> None:
    ports = [{"private": 8000, "public": 10010, "type": "tcp", "ip": "203.0.113.9"}]
    good = {**RUNNING, "env": {**OURS["env"], "GPUCLUSTER_PORTS": "http:8000/TCP"}, "runtime": {"ports": ports}}
    foreign = {"id": 12, "env": {"OTHER": "x"}, "gpu": "lots"}  # someone else's pod, oddly shaped
    stub.set("/v2/pods", {"pods": [foreign, good]})
    [inst] = runpod(stub).list_instances("gpu-burst")
    assert (inst.instance_id, inst.state, inst.address) == ("p1", InstanceState.RUNNING, "203.0.113.9")
    assert [(p.name, p.port) for p in inst.ports] == [("http", 10010)]


def test_runpod_get_instance_refuses_a_non_object(stub: Stub) -> None:
    stub.set("/v2/pods/p1", [1, 2])
    assert "get_instance: reply: expected an object, got a list of 2 items" in refused(runpod(stub).get_instance, "p1")


def test_runpod_catalogue_refused(stub: Stub) -> None:
    stub.set("/v2/catalog/gpus", {"gpus": [{"id": "NVIDIA H100 80GB HBM3", "maxCount": {"secure": "8"}}]})
    assert "offers: reply.gpus[0].maxCount.secure: expected a whole number" in refused(runpod(stub).offers)


def test_runpod_problem_reply_names_the_detail_and_errors(stub: Stub) -> None:
    body = {"title": "Unprocessable Entity", "status": 422, "detail": "Request validation failed.", "errors": ["$.x"]}
    stub.set("/v2/pods", body, status=422)
    assert "HTTP 422: Request validation failed.; $.x" in refused(runpod(stub).list_instances, "n")


# --- the target cluster -------------------------------------------------------------------------------------------

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{{name: t, cluster: {{server: "{url}"}}}}]
users: [{{name: u, user: {{token: "{token}"}}}}]
contexts: [{{name: t, context: {{cluster: t, user: u}}}}]
current-context: t
"""
BURST_LABELS = {
    "burst.gpucluster.io/node": "gpu-burst",
    "burst.gpucluster.io/source-namespace": "inference",
    "burst.gpucluster.io/source-name": "web",
    "burst.gpucluster.io/source-uid": "u-1",
}


def pod(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "metadata": {"name": "web-u-1", "namespace": "burst", "labels": dict(BURST_LABELS)},
        "spec": {"containers": [{"name": "c", "image": "x", "ports": [{"containerPort": 8000}]}]},
        "status": {"phase": "Running", "podIP": "10.0.0.5", "containerStatuses": [{"ready": True}]},
    }
    for path, value in changes.items():
        target = base
        *parents, last = path.split("__")
        for key in parents:
            target = target[key]
        target[last] = value
    return base


def cluster(stub: Stub) -> KubernetesClusterProvider:
    text = KUBECONFIG.format(url=stub.service.url, token=SECRET)
    return KubernetesClusterProvider("east", text, {"H100": 1.8}, max_gpus=8, request_timeout=(2.0, 5.0))


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (b"<html>proxy</html>", "the API server's answer is not JSON"),
        ([1, 2], "the API server's answer: expected an object, got a list of 2 items"),
        (pod(metadata__labels=["a"]), "reply.metadata.labels: expected an object, got a list of 1 items"),
        (pod(metadata__labels={**BURST_LABELS, "x": 1}), "reply.metadata.labels.x: expected a string, got a number"),
        (pod(status__phase=7), "reply.status.phase: expected a string, got a number"),
        (
            pod(status__containerStatuses=[{"ready": "yes"}]),
            "reply.status.containerStatuses[0].ready: expected a boolean",
        ),
        (
            pod(spec__containers=[{"ports": [{"containerPort": "8000"}]}]),
            "reply.spec.containers[0].ports[0].containerPort: expected",
        ),
        (pod(spec__volumes=[{"secret": SECRET}]), "reply.spec.volumes[0].secret: expected an object, got a string"),
    ],
)
def test_target_cluster_pod_refused(stub: Stub, answer: object, message: str) -> None:
    stub.set("/api/v1/namespaces/burst/pods/web-u-1", answer)
    assert f"provider east: get_instance: {message}" in refused(cluster(stub).get_instance, "burst/web-u-1")


def test_target_cluster_well_formed_pod_accepted(stub: Stub) -> None:
    stub.set("/api/v1/namespaces/burst/pods/web-u-1", pod())
    inst = cluster(stub).get_instance("burst/web-u-1")
    assert inst is not None
    assert (inst.state, inst.address, inst.ports[0].port) == (InstanceState.RUNNING, "10.0.0.5", 8000)


def test_target_cluster_listing_and_nodes_refused_then_accepted(stub: Stub) -> None:
    stub.set("/api/v1/pods", {"items": {"a": 1}})
    assert "list_instances: reply.items: expected a list" in refused(cluster(stub).list_instances, "gpu-burst")
    stub.set("/api/v1/pods", {"items": [pod()]})
    assert [i.instance_id for i in cluster(stub).list_instances("gpu-burst")] == ["burst/web-u-1"]
    node = {
        "metadata": {"name": "n1", "labels": {}},
        "spec": {"unschedulable": "no"},
        "status": {"conditions": [{"type": "Ready", "status": "True"}], "allocatable": {"nvidia.com/gpu": "8"}},
    }
    stub.set("/api/v1/nodes", {"items": [node]})
    assert "offers: reply.items[0].spec.unschedulable: expected a boolean" in refused(cluster(stub).offers)
    node["spec"] = {"unschedulable": False}
    stub.set("/api/v1/nodes", {"items": [node]})
    assert cluster(stub).offers()[0].available_gpus == 8  # the node's 8 GPUs, within maxGpus
