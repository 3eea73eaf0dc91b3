"""Reading where Kueue's topology-aware scheduling put a gang: ``status.admission.podSetAssignments[].
topologyAssignment`` of a Workload.

The API server stores Workloads as ``kueue.x-k8s.io/v1beta2``, whose assignment is compressed into ``slices``
(``apis/kueue/v1beta2/workload_types.go``): each slice holds ``domainCount`` domains, per level either one
``universal`` value or ``individual`` values written as ``prefix + root + suffix``, and per domain a pod count
(``universal`` or ``individual``). Kueue 0.17 wrote one slice with the longest common prefix and suffix; 0.19 turns
its ``TASAssignmentsEncodingByHostnamePrefix`` gate on by default, and upstream says the encoding may change, so every
variant is read: several slices, empty roots, absent prefix or suffix. The
v1beta1 form (``domains: [{values, count}]``, served through the conversion webhook) is read too.

When the topology's last level is ``kubernetes.io/hostname``, Kueue records that level only: each domain is one
node. Pure; a malformed assignment raises :class:`AssignmentError` naming where.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contract.constants import HOSTNAME_LABEL as HOSTNAME_LEVEL


class AssignmentError(ValueError):
    """A topology assignment that cannot be read; the message names the field."""


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise AssignmentError(f"{where}: expected a list, got {type(value).__name__}")
    return value


def _count(value: Any, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise AssignmentError(f"{where}: expected a pod count (a whole number, 0 or more), got {value!r}")
    return value


def _level_values(value: Any, domains: int, where: str) -> list[str]:
    if not isinstance(value, Mapping):
        raise AssignmentError(f"{where}: expected universal or individual values")
    if "universal" in value:
        if not isinstance(value["universal"], str):
            raise AssignmentError(f"{where}.universal: expected a string")
        return [value["universal"]] * domains
    individual = value.get("individual")
    if not isinstance(individual, Mapping):
        raise AssignmentError(f"{where}: has neither universal nor individual values")
    prefix = individual.get("prefix") or ""
    suffix = individual.get("suffix") or ""
    roots = _list(individual.get("roots"), f"{where}.individual.roots")
    if not isinstance(prefix, str) or not isinstance(suffix, str) or not all(isinstance(r, str) for r in roots):
        raise AssignmentError(f"{where}.individual: prefix, suffix and roots must be strings")
    if len(roots) != domains:
        raise AssignmentError(f"{where}.individual.roots: {len(roots)} roots for {domains} domains")
    return [prefix + root + suffix for root in roots]


def decode(assignment: Any, where: str = "topologyAssignment") -> list[tuple[dict[str, str], int]]:
    """Each domain of the assignment as (level label -> value, pods), in the order Kueue wrote them."""
    if not isinstance(assignment, Mapping):
        raise AssignmentError(f"{where}: expected a map")
    levels = _list(assignment.get("levels"), f"{where}.levels")
    if not levels or not all(isinstance(level, str) and level for level in levels):
        raise AssignmentError(f"{where}.levels: expected one or more label keys")
    out: list[tuple[dict[str, str], int]] = []
    if "domains" in assignment:  # v1beta1
        for i, d in enumerate(_list(assignment["domains"], f"{where}.domains")):
            at = f"{where}.domains[{i}]"
            values = _list(d.get("values") if isinstance(d, Mapping) else None, f"{at}.values")
            if len(values) != len(levels) or not all(isinstance(v, str) for v in values):
                raise AssignmentError(f"{at}.values: expected {len(levels)} strings, one per level")
            out.append((dict(zip(levels, values, strict=True)), _count(d.get("count"), f"{at}.count")))
        return out
    for s, piece in enumerate(_list(assignment.get("slices"), f"{where}.slices")):
        at = f"{where}.slices[{s}]"
        if not isinstance(piece, Mapping):
            raise AssignmentError(f"{at}: expected a map")
        domains = piece.get("domainCount")
        if not isinstance(domains, int) or isinstance(domains, bool) or domains < 1:
            raise AssignmentError(f"{at}.domainCount: expected a whole number of 1 or more, got {domains!r}")
        per_level = _list(piece.get("valuesPerLevel"), f"{at}.valuesPerLevel")
        if len(per_level) != len(levels):
            raise AssignmentError(f"{at}.valuesPerLevel: {len(per_level)} entries for {len(levels)} levels")
        columns = [_level_values(v, domains, f"{at}.valuesPerLevel[{j}]") for j, v in enumerate(per_level)]
        counts = piece.get("podCounts")
        if not isinstance(counts, Mapping):
            raise AssignmentError(f"{at}.podCounts: expected universal or individual counts")
        if "universal" in counts:
            pods = [_count(counts["universal"], f"{at}.podCounts.universal")] * domains
        else:
            raw = _list(counts.get("individual"), f"{at}.podCounts.individual")
            if len(raw) != domains:
                raise AssignmentError(f"{at}.podCounts.individual: {len(raw)} counts for {domains} domains")
            pods = [_count(c, f"{at}.podCounts.individual[{k}]") for k, c in enumerate(raw)]
        for k in range(domains):
            out.append(({level: columns[j][k] for j, level in enumerate(levels)}, pods[k]))
    return out


def pods_per_node(assignment: Any, where: str = "topologyAssignment") -> dict[str, int]:
    """Node name -> pods Kueue put there; the topology's last level must be ``kubernetes.io/hostname``."""
    out: dict[str, int] = {}
    for values, pods in decode(assignment, where):
        node = values.get(HOSTNAME_LEVEL)
        if node is None:
            raise AssignmentError(
                f"{where}.levels: no {HOSTNAME_LEVEL} level, so the assignment names no nodes (the topology must "
                "end with it)"
            )
        out[node] = out.get(node, 0) + pods
    return out
