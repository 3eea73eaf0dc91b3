"""What RunPod's REST API v2 says, apart from any state: its OpenAPI document and the rules a fake is held to.

The document is RunPod's own, kept as ``tests/fixtures/runpod/openapi-v2.json`` (its source, commit and sha256 in the
README beside it). Here: the document and validators for its schemas (:func:`schema_errors`), the createPod
handler's rules beyond the schema (:func:`create_rule_problem`), the CPU flavors of the catalogue, and RFC 9457
problem replies (:func:`problem`). ``runpod_server`` serves the API with these; the contract test checks every reply
against the same document.

Validating needs the dev dependencies (``jsonschema``, ``referencing``), imported where a schema is used, so this
module imports without them; :func:`contract_problem` says why validation cannot run here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sim.fakes._http import Reply

if TYPE_CHECKING:  # the dev dependencies: imported where a schema is used, so the module imports without them
    import jsonschema
    import referencing

#: RunPod's document, a test fixture of the project (so the fake runs from a checkout).
OPENAPI = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "runpod" / "openapi-v2.json"
DOCUMENT_URI = "urn:runpod:openapi-v2"
PROBLEM = "application/problem+json"
PORT_RE = re.compile(r"^(\d{1,5})/(http|tcp)$")
TITLES = {
    400: "Bad Request",
    401: "Unauthorized",
    402: "Payment Required",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    422: "Unprocessable Entity",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
}
#: The CPU flavors of the catalogue (getCpuType).
CPU_FLAVORS: dict[str, dict[str, Any]] = {
    "cpu5c": {"name": "Compute-Optimized", "group": "Gen 5", "min": 2, "max": 32, "ram": 2.0, "price": 0.04},
    "cpu5g": {"name": "General Purpose", "group": "Gen 5", "min": 2, "max": 32, "ram": 4.0, "price": 0.05},
}


@cache
def document() -> dict[str, Any]:
    """RunPod's v2 OpenAPI document (the test fixture)."""
    value: dict[str, Any] = json.loads(OPENAPI.read_bytes())
    return value


@cache
def registry() -> referencing.Registry[Any]:
    import referencing  # noqa: PLC0415 (a dev dependency, see the module docstring)
    import referencing.jsonschema  # noqa: PLC0415

    resource = referencing.Resource.from_contents(document(), default_specification=referencing.jsonschema.DRAFT202012)
    value: referencing.Registry[Any] = referencing.Registry().with_resource(DOCUMENT_URI, resource)
    return value


def validator(pointer: str) -> jsonschema.Draft202012Validator:
    """A validator for the document's schema at ``pointer`` (``components/schemas/Pod``), resolving its $refs."""
    import jsonschema  # noqa: PLC0415 (a dev dependency, see the module docstring)

    return jsonschema.Draft202012Validator({"$ref": f"{DOCUMENT_URI}#/{pointer}"}, registry=registry())


def schema_errors(pointer: str, value: object) -> list[str]:
    """Each way ``value`` breaks the document's schema at ``pointer``, as ``$.path: message``."""
    out = []
    for error in sorted(validator(pointer).iter_errors(value), key=lambda e: list(e.absolute_path)):
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
        out.append(f"${path}: {error.message}")
    return out


def problem(status: int, detail: str, errors: Sequence[str] = (), headers: tuple[tuple[str, str], ...] = ()) -> Reply:
    body: dict[str, Any] = {"title": TITLES.get(status, "Error"), "status": status, "detail": detail}
    if errors:
        body["errors"] = list(errors)
    return Reply(status, body, content_type=PROBLEM, headers=headers)


def create_rule_problem(body: dict[str, Any]) -> str:
    """The createPod handler's rules beyond the schema (a 400), or "" when the body keeps them."""
    if ("gpu" in body) == ("cpu" in body):
        return "exactly one of gpu or cpu must be set"
    if "cpu" in body:
        count = body["cpu"]["vcpuCount"]
        if count & (count - 1):
            return f"cpu.vcpuCount {count} is not a power of two"
        flavor = CPU_FLAVORS.get(body["cpu"]["id"])
        if flavor is None:
            return f"CPU flavor {body['cpu']['id']} does not exist"
        if not flavor["min"] <= count <= flavor["max"]:
            return f"cpu.vcpuCount {count} is outside {flavor['min']}..{flavor['max']} for {body['cpu']['id']}"
        if "persistent" in body.get("mounts", {}):
            return "mounts.persistent is invalid when cpu is set"
    for port in body.get("ports", []):
        if not PORT_RE.match(port):
            return f'ports: {port!r} is not "<port>/http" or "<port>/tcp"'
    return ""


def contract_problem() -> str:
    """Why creates cannot be validated against RunPod's document here, or ""."""
    if not OPENAPI.is_file():
        return f"RunPod's OpenAPI document is not at {OPENAPI}: run this fake from a checkout of the project"
    try:
        import jsonschema  # noqa: F401, PLC0415 (only checked: a dev dependency)
        import referencing  # noqa: F401, PLC0415
    except ImportError as exc:
        return f"{exc.name or exc} is not installed: the fake validates creates with the dev dependencies (make venv)"
    return ""
