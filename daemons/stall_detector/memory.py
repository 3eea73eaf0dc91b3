"""When each node was named a suspect, kept across the detector's restarts and failovers (the suspects ConfigMap),
so the repeat rule counts offences across the gang's restarts. Pure: text in, text out.

A node is named at most once per gang attempt (one stall, or one run that straggles, is one offence however many
cycles see it). Entries older than the repeat window are dropped on every write; a text that cannot be read is
started afresh (forgetting offences never quarantines anyone).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from daemons.stall_detector.suspects import Naming

#: Most offences remembered per node, and most nodes: the ConfigMap stays far below its 1 MiB.
MAX_PER_NODE = 32
MAX_NODES = 4096


@dataclass(frozen=True)
class Offence:
    at: float
    #: ``<namespace>/<jobset>#<attempt>``: one offence per node per attempt.
    attempt: str
    reasons: tuple[str, ...]


def parse(text: str) -> dict[str, list[Offence]]:
    try:
        doc = json.loads(text) if text else {}
    except ValueError:
        return {}
    out: dict[str, list[Offence]] = {}
    if not isinstance(doc, Mapping):
        return out
    for node, rows in list(doc.items())[:MAX_NODES]:
        if not isinstance(rows, list):
            continue
        kept = []
        for row in rows[-MAX_PER_NODE:]:
            if isinstance(row, list) and len(row) == 3 and isinstance(row[0], int | float) and isinstance(row[1], str):
                reasons = row[2] if isinstance(row[2], list) else []
                kept.append(Offence(float(row[0]), row[1], tuple(str(r) for r in reasons)))
        if kept:
            out[str(node)] = kept
    return out


def render(named: Mapping[str, list[Offence]]) -> str:
    return json.dumps(
        {n: [[round(o.at, 3), o.attempt, list(o.reasons)] for o in rows[-MAX_PER_NODE:]] for n, rows in named.items()},
        separators=(",", ":"),
        sort_keys=True,
    )


def add(
    named: Mapping[str, list[Offence]], node: str, offence: Offence, now: float, window_s: float
) -> dict[str, list[Offence]] | None:
    """``named`` with the offence added and old ones dropped; None when this attempt already named the node."""
    rows = named.get(node, [])
    if any(o.attempt == offence.attempt for o in rows):
        return None
    out = {n: [o for o in r if now - o.at < window_s] for n, r in named.items()}
    out[node] = [*out.get(node, []), offence][-MAX_PER_NODE:]
    return {n: r for n, r in out.items() if r}


def namings(named: Mapping[str, list[Offence]]) -> dict[str, list[Naming]]:
    """Each node's offences as the repeat rule counts them (the team is the attempt's namespace)."""
    return {n: [Naming(o.at, o.attempt.split("/", 1)[0], o.reasons) for o in rows] for n, rows in named.items()}
