"""Reading API JSON: a field of the expected type, or a :class:`TranslationError` naming the object and the field.

An object that cannot be read is named by kind and ``namespace/name`` and the field path, never by the value it
holds. Timestamps are RFC 3339 on the API and Unix seconds here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contract.times import unix_seconds

#: The part of a list that names an object: ``kind namespace/name`` and a field path.
_MAX_SHOWN = 200


class TranslationError(ValueError):
    """An API object this controller cannot read: which object, which field, what is wrong (never the value)."""


def shown(text: str) -> str:
    return text if len(text) <= _MAX_SHOWN else text[:_MAX_SHOWN] + "…"


def ref_of(obj: Mapping[str, Any], kind: str) -> str:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return f"{kind} (no metadata)"
    name = meta.get("name")
    ns = meta.get("namespace")
    text = f"{ns}/{name}" if isinstance(ns, str) and ns else f"{name}"
    return f"{kind} {shown(text)}"


def value_at(obj: Any, path: str, kind: type | tuple[type, ...], where: str, default: Any = None) -> Any:
    """The value at dotted ``path``; ``default`` when absent (or null); TranslationError when of another type."""
    value = obj
    for part in path.split("."):
        if not isinstance(value, Mapping):
            raise TranslationError(f"{where}: {path} is not an object")
        value = value.get(part)
        if value is None:
            return default
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise TranslationError(f"{where}: {path} has the wrong type (bool)")
    if not isinstance(value, kind):
        raise TranslationError(f"{where}: {path} has the wrong type ({type(value).__name__})")
    return value


def str_map(obj: Any, path: str, where: str) -> dict[str, str]:
    value = value_at(obj, path, Mapping, where, {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise TranslationError(f"{where}: {path} is not a map of strings")
    return dict(value)


def parse_time(text: Any, where: str) -> float:
    """An RFC 3339 timestamp as Unix seconds; TranslationError when it is none, or names no instant (no zone)."""
    value = unix_seconds(text)
    if value is None:
        raise TranslationError(f"{where}: not an RFC 3339 timestamp with a time zone")
    return value


def conditions_of(obj: Mapping[str, Any], where: str) -> dict[str, Mapping[str, Any]]:
    out: dict[str, Mapping[str, Any]] = {}
    for i, cond in enumerate(value_at(obj, "status.conditions", list, where, [])):
        if not isinstance(cond, Mapping) or not isinstance(cond.get("type"), str):
            raise TranslationError(f"{where}: status.conditions[{i}] has no type")
        out[cond["type"]] = cond
    return out


def taints_of(obj: Mapping[str, Any], where: str) -> list[Mapping[str, Any]]:
    taints = value_at(obj, "spec.taints", list, where, [])
    for i, taint in enumerate(taints):
        if not isinstance(taint, Mapping) or not isinstance(taint.get("key"), str):
            raise TranslationError(f"{where}: spec.taints[{i}] has no key")
    return list(taints)
