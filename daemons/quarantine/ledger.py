"""The ledger ConfigMap (``gpucluster-quarantine`` in the controller's namespace) as data, and back.

One data key per node (node names are DNS subdomains, valid ConfigMap keys), its value one JSON object an operator
reads and sends on to the hardware provider::

    gpu-node-7: {"flavor": "h100", "reason": "gpu-temperature", "since": "2025-05-01T10:00:00Z",
                 "detail": "firing: GpuTemperatureHigh (gpu=3, UUID=GPU-...)"}

``released`` or ``deleted`` (RFC 3339) once the node left quarantine or the cluster. The leader writes it by
server-side apply, field manager ``gpucluster-quarantine``, applying the whole data map: a key it no longer applies
is removed. An entry this module cannot read is left out and named, never fatal.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from contract.quarantine_settings import FIELD_MANAGER, LEDGER_NAME
from contract.times import unix_seconds
from daemons.quarantine.decide import LedgerEntry
from daemons.toolkit.events import format_time

__all__ = ["FIELD_MANAGER", "LEDGER_NAME", "apply_body", "entries_from", "to_data"]

#: The label that lists the ledger among the stack's objects.
LEDGER_LABEL = {"app.kubernetes.io/name": "gpucluster-quarantine", "app.kubernetes.io/part-of": "gpucluster"}


def to_data(entries: tuple[LedgerEntry, ...] | list[LedgerEntry]) -> dict[str, str]:
    out: dict[str, str] = {}
    for e in entries:
        value: dict[str, str] = {"flavor": e.flavor, "reason": e.reason, "since": format_time(e.since)}
        if e.released is not None:
            value["released"] = format_time(e.released)
        if e.deleted is not None:
            value["deleted"] = format_time(e.deleted)
        value["detail"] = e.detail
        out[e.node] = json.dumps(value, sort_keys=False, ensure_ascii=False)
    return out


def entries_from(data: Any) -> tuple[list[LedgerEntry], list[str]]:
    """The entries of a ConfigMap's ``data`` and what could not be read (key and why, never the value)."""
    if data is None:
        return [], []
    if not isinstance(data, Mapping):
        return [], ["data is not a map"]
    entries: list[LedgerEntry] = []
    problems: list[str] = []
    for key in sorted(data):
        raw = data[key]
        try:
            value = json.loads(raw) if isinstance(raw, str) else None
        except ValueError:
            value = None
        if not isinstance(value, Mapping):
            problems.append(f"{str(key)[:253]}: not a JSON object")
            continue
        since = unix_seconds(value.get("since") if isinstance(value.get("since"), str) else None)
        if since is None:
            problems.append(f"{str(key)[:253]}: no readable since")
            continue
        texts = {k: value.get(k) for k in ("flavor", "reason", "detail")}
        if not all(isinstance(v, str) for v in texts.values()):
            problems.append(f"{str(key)[:253]}: flavor, reason and detail must be strings")
            continue
        ends = {k: value.get(k) for k in ("released", "deleted")}
        parsed = {k: unix_seconds(v) if isinstance(v, str) else None for k, v in ends.items()}
        if any(v is not None and parsed[k] is None for k, v in ends.items()):
            problems.append(f"{str(key)[:253]}: released or deleted is not a timestamp")
            continue
        entries.append(
            LedgerEntry(
                node=str(key),
                flavor=str(texts["flavor"]),
                reason=str(texts["reason"]),
                detail=str(texts["detail"]),
                since=since,
                released=parsed["released"],
                deleted=parsed["deleted"],
            )
        )
    return entries, problems


def apply_body(namespace: str, entries: tuple[LedgerEntry, ...] | list[LedgerEntry]) -> dict[str, Any]:
    """The apply configuration of the whole ledger (an empty ledger applies an empty map, removing every key)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": LEDGER_NAME, "namespace": namespace, "labels": dict(LEDGER_LABEL)},
        "data": to_data(entries),
    }
