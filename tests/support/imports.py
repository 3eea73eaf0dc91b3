"""The project's import graph, read from the source with ``ast`` (nothing is imported): for the layering tests.

Every ``import`` and ``from ... import`` of every module under the project's packages counts, those under
``if TYPE_CHECKING:`` and inside functions too: a type-only import still ties two modules together.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("contract", "components", "policies", "daemons", "sim", "images")


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules(root: Path = ROOT, packages: Iterable[str] = PACKAGES) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            if "fixtures" not in path.parts:
                found[module_name(path, root)] = path
    return found


def imported_names(source: str) -> set[str]:
    """Every module name an import statement names (``from a import b`` names ``a`` and ``a.b``)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def graph(modules: Mapping[str, Path]) -> dict[str, set[str]]:
    """Module -> the project modules it imports, and the outside modules it imports (as written)."""
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        wanted = imported_names(path.read_text(encoding="utf-8"))
        # ``from a import b`` where ``a.b`` is no module names an attribute of ``a``: only ``a`` counts.
        edges[name] = {n for n in wanted if n in modules or n.split(".")[0] not in PACKAGES} - {name}
    return edges


def reachable(edges: Mapping[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in edges.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def cycles(edges: Mapping[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in edges:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found
