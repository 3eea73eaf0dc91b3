"""The layers point one way, and importing any daemon module never imports Pulumi (the daemon image installs only
the daemons' dependencies).

Each daemon reads its settings through a model in ``components/`` (``burst_settings.py``,
``taint_controller_settings.py``); those models, and everything they import, must stay free of Pulumi and of the
daemons. ``components/`` takes from ``daemons/`` only the registry and the specs; ``daemons/toolkit/`` takes nothing
from ``components/``; no two modules import each other, directly or round a loop.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from tests.support.imports import cycles, graph, imported_names, project_modules, reachable

ROOT = Path(__file__).resolve().parents[2]
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


def _import_all(package: str) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", _CHECK, ",".join(BLOCKED), package],
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
    # ... and the settings models the daemons read are among those that import fine.
    assert "components.burst_settings" not in failed
    assert "components.taint_controller_settings" not in failed


# --- the layers, read from the source ---------------------------------------------------------------------------

MODULES = project_modules()
EDGES = graph(MODULES)
#: What ``components/`` may import from ``daemons/``: the registry, the specs and what a spec is made of, and the
#: kube client the ``submit`` command talks to the API server with.
COMPONENTS_MAY_IMPORT = re.compile(r"^daemons(\.registry|\.\w+\.spec|\.toolkit\.(spec|rbac|kube))$")
#: The settings layer: pure pydantic models and the constants, names and problems they share (the stack model and its
#: cross-section rules; not the loader, which reads Pulumi's config).
SETTINGS = re.compile(
    r"^components\.(\w+_settings|telemetry\.settings|training\.settings|model|constants|issues|documents|config\.stack|config\.rules)$"
)


def daemons_imported_by_components(edges: dict[str, set[str]]) -> dict[str, list[str]]:
    return {
        m: sorted(n for n in targets if n.startswith("daemons") and not COMPONENTS_MAY_IMPORT.match(n))
        for m, targets in edges.items()
        if m.startswith("components.")
    }


def layer_breaches(edges: dict[str, set[str]]) -> dict[str, list[str]]:
    """Each rule's breaches: components importing daemon internals, settings reaching Pulumi or a daemon, the
    toolkit reaching components."""
    out: dict[str, list[str]] = {}
    for module, targets in daemons_imported_by_components(edges).items():
        if targets:
            out[module] = [f"imports {t}" for t in targets]
    for module in edges:
        closure = reachable(edges, module)
        if SETTINGS.match(module):
            bad = sorted(n for n in closure if n.split(".")[0] in {"pulumi", "pulumi_kubernetes", "daemons"})
            if bad:
                out.setdefault(module, []).append(f"a settings module reaches {', '.join(bad[:3])}")
        if module.startswith("daemons.toolkit"):
            bad = sorted(n for n in closure if n.startswith("components"))
            if bad:
                out.setdefault(module, []).append(f"the toolkit reaches {', '.join(bad[:3])}")
    return out


def test_components_import_from_daemons_only_the_registry_and_specs() -> None:
    assert {m: t for m, t in daemons_imported_by_components(EDGES).items() if t} == {}


def test_the_layers_point_one_way() -> None:
    """Settings import neither daemons nor Pulumi (nor anything that does); the toolkit nothing of components."""
    assert layer_breaches(EDGES) == {}


def test_no_import_loops() -> None:
    assert cycles(EDGES) == []


def test_the_layer_checks_catch_a_breach() -> None:
    """The same rules on a graph with one breach of each kind, and a loop closed by a type-only import."""
    edges = {m: set(t) for m, t in EDGES.items()}
    edges["components.quota_controller_settings"].add("daemons.quota_controller.decide")
    edges["daemons.toolkit.serve"].add("components.issues")
    edges["components.cluster"].add("daemons.quota_controller.controller")
    breaches = layer_breaches(edges)
    assert "a settings module reaches" in " ".join(breaches["components.quota_controller_settings"])
    assert "components.issues" in " ".join(breaches["daemons.toolkit.serve"])
    assert breaches["components.cluster"] == ["imports daemons.quota_controller.controller"]
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from daemons.make_before_break.decide import X\n"
    edges["daemons.make_before_break.cycle"] |= imported_names(source) & set(MODULES)
    assert ["daemons.make_before_break.cycle", "daemons.make_before_break.decide"] in [
        [m for m in c if m in {"daemons.make_before_break.cycle", "daemons.make_before_break.decide"}]
        for c in cycles(edges)
    ]
