"""The layers point one way, followed transitively: ``contract/`` (settings, constants, specs, the registry) below
both ``components/`` and ``daemons/``, which never reach each other; no import loops; and importing any daemon
module never imports Pulumi, nor any contract module Pulumi or the Kubernetes client (the daemon image installs only
the daemons' dependencies; the contract is pure data).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.imports import cycles, graph, imported_names, project_modules, reachable

ROOT = Path(__file__).resolve().parents[1]
BLOCKED = ("pulumi", "pulumi_kubernetes", "pulumi_policy")

#: Run in a fresh interpreter: a meta-path finder refuses the blocked packages, then every module is imported.
_CHECK = """
import importlib, importlib.abc, json, pkgutil, sys

BLOCKED = set(sys.argv[1].split(","))

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is blocked")
        return None

sys.meta_path.insert(0, Block())
package = importlib.import_module(sys.argv[2])
names = [package.__name__] + [
    m.name for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")
]
failed = {}
for name in names:
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed[name] = f"{type(exc).__name__}: {exc}"
print(json.dumps({"imported": names, "failed": failed}))
"""


def _import_all(package: str, blocked: tuple[str, ...] = BLOCKED) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", _CHECK, ",".join(blocked), package],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    result: dict[str, object] = json.loads(proc.stdout)
    return result


def test_every_daemon_module_imports_without_pulumi() -> None:
    result = _import_all("daemons")
    imported = result["imported"]
    assert isinstance(imported, list)
    assert {"daemons.burst_provider.__main__", "daemons.taint_controller.__main__"} <= set(imported)
    assert result["failed"] == {}


def test_the_check_catches_a_module_that_imports_pulumi() -> None:
    """The same check on the components package: its Pulumi components must fail under the blocker."""
    failed = _import_all("components")["failed"]
    assert isinstance(failed, dict)
    assert "components.queues" in failed
    assert "pulumi is blocked" in str(failed["components.queues"])


def test_every_contract_module_imports_without_pulumi_or_the_kubernetes_client() -> None:
    result = _import_all("contract", (*BLOCKED, "kubernetes", "prometheus_client"))
    imported = result["imported"]
    assert isinstance(imported, list)
    assert {"contract.registry", "contract.controllers.quarantine", "contract.burst_settings"} <= set(imported)
    assert result["failed"] == {}


# --- the layers, read from the source ---------------------------------------------------------------------------

MODULES = project_modules()
EDGES = graph(MODULES)
#: What the contract may not reach, by top-level package: the other project packages, Pulumi, the Kubernetes client
#: and the metrics client (a daemon's, not the contract's).
CONTRACT_MAY_NOT_REACH = frozenset(
    {"components", "policies", "daemons", "sim", "images", "pulumi", "pulumi_kubernetes", "pulumi_policy"}
    | {"kubernetes", "prometheus_client"}
)
#: Package -> the project packages it may never reach, directly or through another module.
NEVER_REACHES = {
    "contract": CONTRACT_MAY_NOT_REACH,
    "components": frozenset({"daemons", "sim", "images"}),
    "policies": frozenset({"daemons", "sim", "images"}),
    "daemons": frozenset({"components", "policies", "sim", "images", "pulumi", "pulumi_kubernetes", "pulumi_policy"}),
}


def layer_breaches(edges: dict[str, set[str]]) -> dict[str, list[str]]:
    """Each module whose imports, followed transitively, reach a package its own may not reach: the first few
    such modules, and the imports of its own that lead there."""
    out: dict[str, list[str]] = {}
    for module, targets in edges.items():
        forbidden = NEVER_REACHES.get(module.split(".")[0])
        if not forbidden:
            continue
        bad = sorted(n for n in reachable(edges, module) if n.split(".")[0] in forbidden)
        if bad:
            via = sorted(t for t in targets if t in bad or set(bad) & reachable(edges, t))
            out[module] = [f"reaches {', '.join(bad[:3])} (through {', '.join(via[:2])})"]
    return out


def with_edge(source: str, target: str) -> dict[str, set[str]]:
    """The project's graph with one more import."""
    edges = {m: set(t) for m, t in EDGES.items()}
    edges[source].add(target)
    return edges


def test_the_layers_point_one_way() -> None:
    """The contract reaches none of the others, nor Pulumi or the Kubernetes client; components and policies never
    reach daemons; daemons never reach components or policies."""
    assert layer_breaches(EDGES) == {}


def test_no_import_loops() -> None:
    assert cycles(EDGES) == []


def test_the_layer_checks_catch_a_breach_two_imports_away() -> None:
    """One breach of each kind, each caught in the module that imports it and in a module two imports away that
    is itself clean; and a loop closed by a type-only import."""
    # a contract module importing a daemon's: caught there, and in the registry that reaches it through a spec
    breaches = layer_breaches(with_edge("contract.quota_controller_settings", "daemons.quota_controller.decide"))
    assert "daemons.quota_controller.decide" in breaches["contract.quota_controller_settings"][0]
    assert "contract.controllers.quota_controller" in breaches["contract.registry"][0]
    # ... or the Kubernetes client
    breaches = layer_breaches(with_edge("contract.controllers.quarantine", "kubernetes.client"))
    assert "kubernetes.client" in breaches["contract.controllers.quarantine"][0]
    # a daemon reaching components through the contract, and a component reaching a daemon through it
    breaches = layer_breaches(with_edge("contract.xids", "components.cluster"))
    assert "components.cluster" in breaches["daemons.stall_detector.queries"][0]
    breaches = layer_breaches(with_edge("contract.registry", "daemons.toolkit.serve"))
    assert "daemons.toolkit." in breaches["components.cluster"][0]
    # a component importing a daemon module directly
    breaches = layer_breaches(with_edge("components.cluster", "daemons.quota_controller.controller"))
    assert "daemons.quota_controller.controller" in breaches["components.cluster"][0]
    edges = {m: set(t) for m, t in EDGES.items()}
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from daemons.make_before_break.decide import X\n"
    edges["daemons.make_before_break.cycle"] |= imported_names(source) & set(MODULES)
    assert ["daemons.make_before_break.cycle", "daemons.make_before_break.decide"] in [
        [m for m in c if m in {"daemons.make_before_break.cycle", "daemons.make_before_break.decide"}]
        for c in cycles(edges)
    ]
