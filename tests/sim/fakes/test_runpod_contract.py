"""The RunPod adapter and the fake RunPod server against RunPod's own v2 OpenAPI document.

The document is a fixture (tests/fixtures/runpod/, with its source and sha256); its sha256 is checked first, so it
is never edited to fit. Then the adapter runs every call it makes, refusals included, against the fake, and:

- every request the adapter sent names an operation of the document (method and path template), its query
  parameters are the operation's and match their schemas, and its body matches the operation's request schema;
- every reply the fake sent has a status the operation documents (or falls under its ``default``), the content type
  the document gives that response, and a body matching the response schema; a 429 carries an integer
  ``Retry-After``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest

from daemons.burst_provider.providers.base import InstanceSpec, ProviderError
from sim.fakes._http import ManualClock
from sim.fakes.runpod_contract import OPENAPI, document, registry, validator
from sim.fakes.runpod_server import FakeRunpod, FakeRunpodServer
from tests.daemons.burst_provider.test_runpod_provider import BOOT, H100_ID, KEY, Env, make_provider, spec

OPENAPI_SHA256 = "b8bce61c5a2290d28a7cb2ed53173637166817249986cb18b101b2fd651fd313"
BASE = "/v2"  # the document's paths carry the version; the adapter's base URL ends in it


def test_the_document_is_runpods_unchanged() -> None:
    assert hashlib.sha256(OPENAPI.read_bytes()).hexdigest() == OPENAPI_SHA256, (
        f"{OPENAPI} is not the document its README names; copy it again from RunPod's docs repository"
    )
    assert document()["info"]["version"] == "2.0.0"


def _operation(method: str, path: str) -> tuple[str, dict[str, Any], list[dict[str, Any]]]:
    """The document's (template, operation, parameters) for a concrete request path."""
    for template, item in document()["paths"].items():
        pattern = "^" + re.sub(r"\{[^/]+\}", "[^/]+", template) + "$"
        if re.match(pattern, path) and method.lower() in item:
            op = item[method.lower()]
            return template, op, [*item.get("parameters", []), *op.get("parameters", [])]
    raise AssertionError(f"{method} {path} is no operation of RunPod's v2 document")


def _deref(value: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in value:
        node: Any = document()
        for part in value["$ref"].removeprefix("#/").split("/"):
            node = node[part]
        value = node
    return value


def _check(schema: dict[str, Any], value: object, what: str) -> None:
    errors = [e.message for e in jsonschema.Draft202012Validator(schema, registry=registry()).iter_errors(value)]
    assert not errors, f"{what}: {errors}"


def _absolute(schema: dict[str, Any]) -> dict[str, Any]:
    """A schema from the document with its local $refs made to point into the registered document."""
    text = json.dumps(schema).replace('"#/', '"urn:runpod:openapi-v2#/')
    value: dict[str, Any] = json.loads(text)
    return value


def _query_value(schema: dict[str, Any], raw: str) -> object:
    kind = _deref(schema).get("type")
    if kind == "array":
        return raw.split(",")
    if kind == "integer":
        return int(raw) if raw.lstrip("-").isdigit() else raw
    if kind == "boolean":
        return {"true": True, "false": False}.get(raw, raw)
    return raw


def check_request(method: str, path: str, query: dict[str, list[str]], body: object) -> None:
    template, op, parameters = _operation(method, path)
    params = {p["name"]: p for p in (_deref(p) for p in parameters) if p["in"] == "query"}
    for name, values in query.items():
        assert name in params, f"{method} {template}: query parameter {name} is not the operation's"
        schema = _absolute(params[name]["schema"])
        _check(schema, _query_value(params[name]["schema"], values[0]), f"{method} {template} ?{name}")
    request_body = op.get("requestBody")
    if request_body is None:
        assert body is None, f"{method} {template} takes no body"
        return
    schema = _absolute(request_body["content"]["application/json"]["schema"])
    _check(schema, body, f"{method} {template} request body")


def check_reply(method: str, path: str, status: int, content_type: str, raw: bytes, *, headers: dict[str, str]) -> None:
    template, op, _ = _operation(method, path)
    responses = op["responses"]
    response = _deref(responses.get(str(status)) or responses["default"])
    content = response.get("content")
    if not content:
        assert raw == b"", f"{method} {template} {status} has no body in the document"
        return
    assert content_type in content, f"{method} {template} {status}: {content_type} is not {sorted(content)}"
    _check(_absolute(content[content_type]["schema"]), json.loads(raw), f"{method} {template} {status} reply")
    if status == 429:
        assert headers.get("Retry-After", "").isdigit(), f"{method} {template} 429 without an integer Retry-After"


@pytest.fixture
def env() -> Iterator[Env]:
    clock = ManualClock()
    api = FakeRunpod(KEY, boot_seconds=BOOT, clock=clock, capacity={H100_ID: 8})
    with FakeRunpodServer(api) as server:
        yield Env(clock, api, server, make_provider(server.base_url, clock=clock))


def _everything(env: Env) -> None:
    """Every call the adapter makes, and every refusal the fake has a knob for."""
    provider = env.provider
    provider.offers()
    inst = provider.create_instance(spec(uid="u-1"))
    provider.get_instance(inst.instance_id)
    env.clock.advance(BOOT)
    provider.get_instance(inst.instance_id)
    provider.list_instances("gpu-burst")
    base = spec(uid="u-2", gpus=0)
    provider.create_instance(InstanceSpec(base.tags, base.gpu_type, 0, base.containers, 3000, 8 * 10**9))
    env.api.fail_after_create(502)
    provider.create_instance(spec(uid="u-3"))
    env.api.rate_limit(times=1, retry_after=0)
    provider.create_instance(spec(uid="u-4"))
    for status in (400, 402, 403):
        env.api.refuse(status)
        with pytest.raises(ProviderError):
            provider.create_instance(spec(uid=f"u-{status}"))
    with pytest.raises(ProviderError):
        provider.create_instance(spec(uid="u-5", gpus=8))  # capacity: 3 of 8 H100 are taken
    env.api.exit_container(inst.instance_id)
    provider.get_instance(inst.instance_id)
    env.api.set_status(inst.instance_id, "EXITED")
    provider.get_instance(inst.instance_id)
    provider.delete_instance(inst.instance_id)
    provider.get_instance(inst.instance_id)  # 404
    with pytest.raises(ProviderError):
        make_provider(env.server.base_url, key="rpa_WRONG0000000000000", retries=0).list_instances("n")  # 401


def test_every_request_the_adapter_sends_matches_the_document(env: Env) -> None:
    _everything(env)
    assert len(env.api.bodies) >= 20
    for method, path, query, body in env.api.bodies:
        check_request(method, path, query, body)


def test_every_reply_the_fake_sends_matches_the_document(env: Env) -> None:
    _everything(env)
    statuses = {status for _, _, status, _, _, _ in env.api.replies}
    assert {200, 201, 204, 400, 401, 402, 403, 404, 429, 502} <= statuses, statuses
    for method, path, status, content_type, raw, headers in env.api.replies:
        check_reply(method, path, status, content_type, raw, headers=headers)


def test_429_replies_carry_an_integer_retry_after(env: Env) -> None:
    env.api.rate_limit(times=1, retry_after=3)
    reply = env.api.handle("GET", "/v2/pods", {}, b"", {"authorization": f"Bearer {KEY}"})
    assert reply.status == 429
    check_reply("GET", "/v2/pods", reply.status, reply.content_type, reply.raw, headers=dict(reply.headers))
    assert dict(reply.headers)["Retry-After"] == "3"


def test_the_fake_validates_creates_with_the_documents_own_schema() -> None:
    good = {"name": "p", "image": "x", "gpu": {"id": H100_ID, "count": 1}, "disk": 50}
    assert list(validator("components/schemas/CreatePodRequest").iter_errors(good)) == []
    for bad in (
        {"name": "p", "image": "x", "gpu": {"id": H100_ID}, "gpuCount": 1},  # a v1 field
        {"name": "p", "imageName": "x", "gpu": {"id": H100_ID}},  # v1's image field
        {"name": "p", "image": "x", "cpu": {"id": "cpu5c", "vcpuCount": 1}},  # below the minimum of 2
        {"name": "p", "image": "x", "gpu": {"id": H100_ID}, "mounts": {"persistent": {"size": 5, "path": "/w"}}},
    ):
        assert list(validator("components/schemas/CreatePodRequest").iter_errors(bad)), bad
