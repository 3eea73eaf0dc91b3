"""A scratch Pulumi project for one stack, so the engine can run the stack's program without touching its files.

``python sim/scratch_project.py --work DIR --stack-file FILE --stack NAME --render-dir OUT`` writes

- ``DIR/Pulumi.yaml``: the repository's project file with ``main`` = the repository (the same program),
  ``runtime.options.virtualenv`` = the repository's ``.venv`` and ``stackConfigDir: stacks``;
- ``DIR/stacks/Pulumi.<NAME>.yaml``: a copy of FILE with ``kubernetes:renderYamlToDirectory: OUT`` added, so the
  default Kubernetes provider writes manifests to OUT instead of contacting a cluster.

``make policy`` (policies/preview-stacks.sh) previews such a project with the policy pack and ``make render``
(sim/render.sh) updates one; sim/lib.sh's ``scratch_engine`` gives it a throwaway state backend. A stack file
that is not a YAML mapping with a ``config`` mapping is reported with the file and what is wrong (exit status 2).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
RENDER_KEY = "kubernetes:renderYamlToDirectory"


class ScratchProjectError(ValueError):
    """A file the scratch project is built from cannot be used; the message names it and says why."""


def _mapping(path: Path, what: str) -> dict[str, Any]:
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as e:
        raise ScratchProjectError(f"{path}: cannot read the {what}: {e.strerror}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise ScratchProjectError(f"{path}: the {what} is not YAML{where}") from None
    if not isinstance(doc, dict):
        raise ScratchProjectError(f"{path}: the {what} is not a mapping")
    return doc


def project(root: Path = ROOT) -> dict[str, Any]:
    """The repository's Pulumi.yaml, made to run the repository's program with its venv from elsewhere."""
    doc = _mapping(root / "Pulumi.yaml", "project file")
    doc["main"] = str(root)
    doc["stackConfigDir"] = "stacks"
    doc["runtime"] = {"name": "python", "options": {"virtualenv": str(root / ".venv")}}
    return doc


def stack(stack_file: Path, render_dir: Path) -> dict[str, Any]:
    """The stack file with the Kubernetes provider told to render into ``render_dir``."""
    doc = _mapping(stack_file, "stack file")
    config = doc.get("config")
    if not isinstance(config, dict):
        raise ScratchProjectError(f"{stack_file}: the stack file has no config mapping")
    config[RENDER_KEY] = str(render_dir)
    return doc


def write(work: Path, stack_file: Path, name: str, render_dir: Path, root: Path = ROOT) -> Path:
    """Write the scratch project into ``work``; its stack file's path."""
    project_doc, stack_doc = project(root), stack(stack_file, render_dir)
    (work / "stacks").mkdir(parents=True, exist_ok=True)
    (work / "Pulumi.yaml").write_text(yaml.safe_dump(project_doc, sort_keys=False))
    out = work / "stacks" / f"Pulumi.{name}.yaml"
    out.write_text(yaml.safe_dump(stack_doc, sort_keys=False))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sim/scratch_project.py", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True, help="the scratch project's directory")
    parser.add_argument("--stack-file", type=Path, required=True, help="the stack file to copy")
    parser.add_argument("--stack", required=True, help="the stack's name in the scratch project")
    parser.add_argument("--render-dir", type=Path, required=True, help="where the provider writes manifests")
    args = parser.parse_args(argv)
    if not args.stack or "/" in args.stack or args.stack.startswith("."):
        print(f"sim/scratch_project.py: --stack {args.stack!r} is not a stack name", file=sys.stderr)
        return 2
    try:
        write(args.work, args.stack_file, args.stack, args.render_dir)
    except ScratchProjectError as e:
        print(f"sim/scratch_project.py: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
