"""Reading a settings document (a stack file, a daemon's settings file) so that hostile input is refused cleanly.

A document is refused with a short reason (:class:`DocumentError`), in bounded time and memory, when it is:

* not a regular file, or larger than :data:`MAX_DOCUMENT_BYTES`;
* not text: a NUL byte, or bytes that are not UTF-8;
* not valid YAML / JSON, or YAML with the same key twice in one map (PyYAML would keep the last silently), or JSON
  with a key twice or ``NaN``/``Infinity``;
* pathological: nested deeper than :data:`MAX_DEPTH`, or expanding (through YAML aliases, the "billion laughs")
  to more than :data:`MAX_VALUES` values.

The reasons never quote the document's contents beyond a bounded key name, so a secret in a broken file does not
end up in a log.
"""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import yaml
from yaml.constructor import ConstructorError

from contract.issues import ConfigIssue, SettingsError, shown

#: Largest document read; our stack files are a few KiB, the daemons' settings files smaller still.
MAX_DOCUMENT_BYTES = 1024 * 1024
#: Deepest nesting of maps and lists (a stack file nests about 6 levels; Helm values a few more).
MAX_DEPTH = 64
#: Most values a document may hold once YAML aliases are expanded (a production stack holds a few hundred).
MAX_VALUES = 100_000
_MAX_PROBLEM = 200

Format = Literal["yaml", "json"]


class DocumentError(ValueError):
    """The document cannot be taken as settings; ``reason`` says why in a few words."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


def read_text(path: Path, max_bytes: int = MAX_DOCUMENT_BYTES) -> str:
    """The UTF-8 text of a regular file of at most ``max_bytes`` bytes."""
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise DocumentError("is not a regular file")
        with path.open("rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as exc:
        raise DocumentError(f"cannot read: {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        raise DocumentError(f"is larger than {max_bytes // 1024} KiB: not a settings file")
    nul = data.find(b"\0")
    if nul >= 0:
        raise DocumentError(f"is binary (a NUL byte at offset {nul}), not text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DocumentError(f"is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one map."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # `<<: *defaults`: keys given here override the merged ones, as YAML means
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                except TypeError:
                    continue  # an unhashable key: the base constructor refuses it with its own message
                if duplicate:
                    raise ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"found the key {shown(key)} twice",
                        key_node.start_mark,
                    )
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _yaml_reason(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    problem = str(getattr(exc, "problem", None) or type(exc).__name__)
    if len(problem) > _MAX_PROBLEM:
        problem = problem[:_MAX_PROBLEM] + "..."
    return f"{where}invalid YAML: {problem}"


def _yaml_depth(text: str) -> None:
    """Refuse nesting beyond MAX_DEPTH from the event stream (iterative: safe however deep the text nests)."""
    depth = 0
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                mark = event.start_mark
                where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
                raise DocumentError(f"{where}nests deeper than {MAX_DEPTH} levels")
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


def decode_yaml(text: str) -> Any:
    """One YAML document, every value constructed by the safe loader."""
    try:
        _yaml_depth(text)
        doc = yaml.load(text, Loader=_Loader)  # _Loader is a SafeLoader: no arbitrary objects
    except DocumentError:
        raise
    except yaml.YAMLError as exc:
        raise DocumentError(_yaml_reason(exc)) from None
    except (ValueError, RecursionError) as exc:
        raise DocumentError(f"invalid YAML: {_unreadable(exc)}") from None
    check_size(doc)
    return doc


def _unreadable(exc: Exception) -> str:
    """Why a value could not be constructed, without quoting it."""
    if "digits" in str(exc):
        return "a number with more digits than can be read (4300)"
    return "a value that cannot be read"


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DocumentError(f"invalid JSON: the key {shown(key)} is given twice in one object")
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise DocumentError(f"invalid JSON: {name} is not a number settings take")


def decode_json(text: str) -> Any:
    """One JSON document; a key twice in an object, NaN and Infinity are refused."""
    try:
        doc = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise DocumentError(f"line {exc.lineno}, column {exc.colno}: invalid JSON: {exc.msg}") from None
    except RecursionError:
        raise DocumentError(f"nests deeper than {MAX_DEPTH} levels") from None
    except DocumentError:
        raise
    except ValueError as exc:
        raise DocumentError(f"invalid JSON: {_unreadable(exc)}") from None
    check_size(doc)
    return doc


def check_size(doc: Any) -> None:
    """Refuse a decoded document deeper than MAX_DEPTH or holding more than MAX_VALUES values (aliases count
    each time they are used: a document that is small on disk may be huge in memory)."""
    budget = MAX_VALUES - 1
    # One iterator per open container: memory stays bounded by the depth, whatever the width.
    stack: list[Iterator[Any]] = [_children(doc)] if isinstance(doc, (dict, list)) else []
    while stack:
        child = next(stack[-1], _DONE)
        if child is _DONE:
            stack.pop()
            continue
        budget -= 1
        if budget < 0:
            raise DocumentError(f"expands to more than {MAX_VALUES} values (YAML aliases used over and over?)")
        if isinstance(child, (dict, list)):
            if len(stack) >= MAX_DEPTH:
                raise DocumentError(f"nests deeper than {MAX_DEPTH} levels")
            stack.append(_children(child))


_DONE = object()


def _children(container: dict[Any, Any] | list[Any]) -> Iterator[Any]:
    return iter(container.values() if isinstance(container, dict) else container)


def read_document(path: Path, fmt: Format, max_bytes: int = MAX_DOCUMENT_BYTES) -> Any:
    """The decoded contents of a YAML or JSON file, or DocumentError with a short reason."""
    text = read_text(path, max_bytes)
    return decode_json(text) if fmt == "json" else decode_yaml(text)


def read_settings_file(path: str | Path, fmt: Format | None = None) -> Any:
    """A daemon's settings file decoded (``fmt``, else JSON for ``.json`` and YAML for anything else); a hostile or
    unreadable file raises :class:`~contract.issues.SettingsError` naming the file and the reason."""
    p = Path(path)
    try:
        return read_document(p, fmt or ("json" if p.suffix == ".json" else "yaml"))
    except DocumentError as exc:
        raise SettingsError([ConfigIssue(str(p), None, exc.reason)], str(p)) from None
