"""The environment a container of a rendered pod template gets, as the kubelet would give it: pure functions.

Models what a training pod of ours uses:

* ``value``, with ``$(NAME)`` replaced by a variable defined earlier in the list (or by the Job controller), and
  ``$$(NAME)`` left as the literal ``$(NAME)``; a reference to an undefined name stays as written, as the kubelet
  leaves it;
* ``valueFrom.fieldRef`` on ``metadata.name``, ``metadata.namespace``, ``metadata.labels['k']`` and
  ``metadata.annotations['k']`` (a missing label or annotation is the empty string);
* what the Job controller adds to every container of an Indexed Job's pod: ``JOB_COMPLETION_INDEX``.

Does not model ``secretKeyRef``, ``configMapKeyRef``, ``resourceFieldRef``, ``envFrom`` or the image's own
environment: a container that uses one is refused (:class:`PodEnvError`), never given a guess.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

_FIELD = re.compile(r"^metadata\.(labels|annotations)\['([^']+)'\]$")
_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
COMPLETION_INDEX_ENV = "JOB_COMPLETION_INDEX"


class PodEnvError(ValueError):
    """A variable this model cannot resolve; the message names it."""


@dataclass(frozen=True)
class PodMeta:
    """The metadata of one pod that the downward API reads."""

    name: str
    namespace: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)


def _expand(value: str, defined: Mapping[str, str]) -> str:
    def one(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return defined.get(name, m.group(0))

    return _REF.sub(one, value)


def _field(path: str, pod: PodMeta, var: str) -> str:
    if path == "metadata.name":
        return pod.name
    if path == "metadata.namespace":
        return pod.namespace
    m = _FIELD.match(path)
    if m is None:
        raise PodEnvError(f"env {var}: fieldRef {path!r} is not modelled")
    source = pod.labels if m.group(1) == "labels" else pod.annotations
    return source.get(m.group(2), "")


def container_env(
    env: Sequence[Mapping[str, Any]], pod: PodMeta, completion_index: int | None = None
) -> dict[str, str]:
    """``env`` of a container spec resolved for ``pod``; with ``completion_index``, as an Indexed Job's pod."""
    resolved: dict[str, str] = {}
    for i, item in enumerate(env):
        name = item.get("name")
        if not isinstance(name, str) or not name:
            raise PodEnvError(f"env[{i}]: no name")
        if "value" in item:
            resolved[name] = _expand(str(item["value"]), resolved)
            continue
        source = item.get("valueFrom") or {}
        ref = source.get("fieldRef") if isinstance(source, Mapping) else None
        if not isinstance(ref, Mapping) or set(source) != {"fieldRef"}:
            kinds = ", ".join(sorted(source)) if isinstance(source, Mapping) else type(source).__name__
            raise PodEnvError(f"env {name}: valueFrom {kinds or 'empty'} is not modelled")
        resolved[name] = _field(str(ref.get("fieldPath", "")), pod, name)
    if completion_index is not None:
        # The Job controller appends it to each container that does not define it (a fieldRef on the index).
        resolved.setdefault(COMPLETION_INDEX_ENV, str(completion_index))
    return resolved
