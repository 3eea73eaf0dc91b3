"""What the policy tests share: calling a policy the way the engine does, and resources to call it on."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pulumi_policy import (
    PolicyCustomTimeouts,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.policy import _NotApplicableError

from tests.support.pulumi_harness import Graph

ROOT = Path(__file__).resolve().parents[2]
NA = "not applicable"
KEY = "gpucluster.io/in-cluster-capacity"
CM = "kubernetes:core/v1:ConfigMap"
DEPLOY = "kubernetes:apps/v1:Deployment"


def _opts(secret_outputs: Sequence[str] = ()) -> PolicyResourceOptions:
    return PolicyResourceOptions(False, [], None, [], PolicyCustomTimeouts(0, 0, 0), list(secret_outputs))


def check_resource(
    policy: ResourceValidationPolicy,
    type_: str,
    props: Mapping[str, Any],
    config: Mapping[str, Any] | None = None,
    secret_outputs: Sequence[str] = (),
) -> list[str] | str:
    found: list[str] = []
    args = ResourceValidationArgs(type_, props, f"urn:{type_}::x", "x", _opts(secret_outputs), None, config or {})
    try:
        policy.validate(args, lambda message, urn=None: found.append(message))
    except _NotApplicableError:
        return NA
    return found


def resource(
    type_: str, props: Mapping[str, Any], name: str = "r", secret_outputs: Sequence[str] = ()
) -> PolicyResource:
    return PolicyResource(type_, props, f"urn:{type_}::{name}", name, _opts(secret_outputs), None, None, [], {})


def check_stack(
    policy: StackValidationPolicy, resources: Sequence[PolicyResource], config: Mapping[str, Any] | None = None
) -> list[str] | str:
    found: list[str] = []
    try:
        policy.validate(
            StackValidationArgs(list(resources), config or {}), lambda message, urn=None: found.append(message)
        )
    except _NotApplicableError:
        return NA
    return found


def app_deployment(namespace: str = "inference", **container: Any) -> dict[str, Any]:
    c = {"name": "app", "image": "registry.example/app:1.2.3", **container}
    return {"metadata": {"name": "app", "namespace": namespace}, "spec": {"template": {"spec": {"containers": [c]}}}}


def as_policy_resources(graph: Graph) -> list[PolicyResource]:
    return [resource(r.type, r.inputs, r.name, r.secret_outputs) for r in graph.resources if r.custom]
