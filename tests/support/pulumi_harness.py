"""Run a Pulumi program under the SDK's mocks and keep what it registered: type, name, inputs, parent, deps.

graph = deploy(lambda: GpuCluster("c", GpuClusterArgs(config=cfg)))
cq = graph.one("kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue", "c-queues-cq-training")
assert graph.parent_of(cq).type == "gpucluster:queues:Queues"
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pulumi
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import rpc

from components.config import StackConfig


@dataclass
class Registered:
    urn: str
    type: str
    name: str
    inputs: dict[str, Any]
    parent: str
    dependencies: list[str] = field(default_factory=list)
    custom: bool = True
    remote: bool = False
    outputs: dict[str, Any] = field(default_factory=dict)
    #: The resource's ``additional_secret_outputs`` (what the policy pack's ``no-secrets-in-clear`` reads).
    secret_outputs: list[str] = field(default_factory=list)
    #: The resource's ``ignore_changes`` property paths.
    ignore_changes: list[str] = field(default_factory=list)


class _Mocks(pulumi.runtime.Mocks):
    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        return (f"{args.name}-id" if args.custom else None), dict(args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        return {}, None


class _RecordingMonitor(pulumi_mocks.MockMonitor):
    def __init__(self, mocks: pulumi.runtime.Mocks) -> None:
        super().__init__(mocks)
        self.registered: dict[str, Registered] = {}

    def RegisterResource(self, request: Any) -> Any:  # noqa: N802 - gRPC method name
        response = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            self.registered[response.urn] = Registered(
                urn=response.urn,
                type=request.type,
                name=request.name,
                inputs=rpc.deserialize_properties(request.object),
                parent=request.parent,
                dependencies=list(request.dependencies),
                custom=request.custom,
                remote=request.remote,
                secret_outputs=list(request.additionalSecretOutputs),
                ignore_changes=list(request.ignoreChanges),
            )
        return response

    def RegisterResourceOutputs(self, request: Any) -> Any:  # noqa: N802 - gRPC method name
        if request.urn in self.registered:
            self.registered[request.urn].outputs = rpc.deserialize_properties(request.outputs)
        return super().RegisterResourceOutputs(request)


@dataclass
class Graph:
    resources: list[Registered]

    def of_type(self, type_: str) -> list[Registered]:
        return [r for r in self.resources if r.type == type_]

    def one(self, type_: str, name: str) -> Registered:
        found = [r for r in self.resources if r.type == type_ and r.name == name]
        assert len(found) == 1, f"expected one {type_} named {name}, found {[r.name for r in self.of_type(type_)]}"
        return found[0]

    def by_urn(self, urn: str) -> Registered:
        return next(r for r in self.resources if r.urn == urn)

    def parent_of(self, r: Registered) -> Registered:
        return self.by_urn(r.parent)

    def children_of(self, r: Registered) -> list[Registered]:
        return [c for c in self.resources if c.parent == r.urn]

    def depends_on(self, r: Registered, other: Registered) -> bool:
        return other.urn in r.dependencies


def deploy(build: Callable[[], object], preview: bool = False) -> Graph:
    """Run `build` as a Pulumi program against mocks; return everything it registered."""
    mocks = _Mocks()
    monitor = _RecordingMonitor(mocks)
    pulumi.runtime.set_mocks(mocks, project="gpucluster", stack="test", preview=preview, monitor=monitor)

    @pulumi.runtime.test
    def program() -> None:
        build()

    program()
    return Graph(list(monitor.registered.values()))


def secrets_of(config: StackConfig) -> dict[str, str]:
    """A stand-in value for each provider secret the stack names, as ``GpuClusterArgs.secrets`` takes them.

    Under the mocks there is no engine to decrypt the stack's ``secure:`` values (the local stack names one, the key
    the simulated cluster's RunPod fake accepts), so a test deploying a real stack passes these instead.
    """
    return {name: f"stand-in-for-{name}" for name in config.provider_secret_names}
