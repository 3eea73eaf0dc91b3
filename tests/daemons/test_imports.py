"""Importing any daemon module never imports Pulumi: the daemon image installs only the daemons' dependencies.

Each daemon reads its settings through a model in ``components/`` (``burst_settings.py``,
``taint_controller_settings.py``); those models, and everything they import, must stay free of Pulumi.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
