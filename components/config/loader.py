"""Loading a stack's settings: from a stack file (offline, :func:`load_stack_file`) or from the engine at
``pulumi up`` (:func:`from_pulumi_config`), Pulumi.yaml's defaults applied; both end in
:func:`parse_stack_config`, which returns a :class:`StackConfig` or raises :class:`StackConfigError` with every
problem at once.

A stack file is read like any settings document (contract/documents.py): a file that is not text, YAML that
nests too deep, expands through aliases or repeats a key, is refused with the file and a short reason.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import pulumi
from pulumi.runtime import config as runtime_config

from components.config.rules import rule_issues
from components.config.stack import StackConfig, StackConfigError, parse_sections
from contract.constants import PROJECT
from contract.documents import DocumentError, read_document
from contract.issues import ConfigIssue, key_text

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def parse_stack_config(
    raw: Mapping[str, Any], source: str = "stack config", secret_keys: Collection[str] | None = None
) -> StackConfig:
    """Validate the ``gpucluster:*`` settings (keys without the project prefix) and build the model.

    Keys that are not sections must be the provider secrets the burst section names, and secret: ``{secure:}``
    in a stack file, or listed in ``secret_keys`` (full ``gpucluster:<name>`` keys, as the engine reports them).
    Raises :class:`StackConfigError` with every problem found; never returns a partly valid config.
    """
    sections, issues = parse_sections(raw, secret_keys)
    issues.extend(rule_issues(sections))
    if issues:
        raise StackConfigError(issues, source)
    return sections.to_config()


def project_defaults(project_file: Path = PROJECT_ROOT / "Pulumi.yaml") -> dict[str, Any]:
    """Defaults declared in Pulumi.yaml's ``config:`` schema, as the engine applies them."""
    try:
        doc = read_document(project_file, "yaml")
    except DocumentError:
        return {}
    config = doc.get("config") if isinstance(doc, dict) else None
    out: dict[str, Any] = {}
    for key, spec in (config if isinstance(config, dict) else {}).items():
        if isinstance(key, str) and isinstance(spec, dict) and "default" in spec:
            out[key.removeprefix(f"{PROJECT}:")] = spec["default"]
    return out


def read_stack_file(path: Path) -> dict[str, Any]:
    """The ``gpucluster:*`` settings of a stack file, project defaults applied, prefix stripped."""
    try:
        doc = read_document(path, "yaml")
    except DocumentError as exc:
        raise StackConfigError([ConfigIssue(str(path), None, exc.reason)], str(path)) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("config"), dict):
        raise StackConfigError([ConfigIssue("config", None, "the stack file has no `config:` map")], str(path))
    raw: dict[str, Any] = project_defaults()
    foreign: list[ConfigIssue] = []
    for key, value in doc["config"].items():
        if not isinstance(key, str) or ":" not in key:
            # Not echoed: a key without a namespace may be a secret pasted in the wrong place.
            name = key_text(str(key))
            foreign.append(ConfigIssue(name, None, f"config keys are namespaced: write {PROJECT}:{name}"))
        elif key.startswith(f"{PROJECT}:"):
            raw[key.removeprefix(f"{PROJECT}:")] = value
        # other namespaces (kubernetes:context, pulumi:...) belong to providers and the engine
    if foreign:
        raise StackConfigError(foreign, str(path))
    return raw


def load_stack_file(path: Path | str) -> StackConfig:
    path = Path(path)
    return parse_stack_config(read_stack_file(path), str(path))


def from_pulumi_config() -> StackConfig:
    """Read the settings the engine passed to this program run and validate them."""
    raw: dict[str, Any] = project_defaults()
    for full_key, value in runtime_config.get_config_env().items():
        if not full_key.startswith(f"{PROJECT}:"):
            continue
        raw[full_key.removeprefix(f"{PROJECT}:")] = _decode(value)
    return parse_stack_config(raw, f"stack {pulumi.get_stack()}", runtime_config.get_config_secret_keys_env())


def _decode(value: Any) -> Any:
    """The engine passes structured values as JSON text, scalars as plain text."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        return value
