"""Kubernetes Events (core/v1) as our controllers write them: what ``kubectl describe`` shows an operator."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from typing import Any

#: Longest message the API server keeps readable in ``kubectl describe``.
MAX_MESSAGE = 1024


def format_time(seconds: float) -> str:
    """RFC 3339, UTC, whole seconds."""
    return dt.datetime.fromtimestamp(math.floor(seconds), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def event_body(
    involved: Mapping[str, Any],
    namespace: str,
    *,
    event_type: str,
    reason: str,
    message: str,
    now: float,
    component: str,
    identity: str,
) -> dict[str, Any]:
    """An Event about ``involved`` (apiVersion, kind, name, and uid / namespace where known) in ``namespace``."""
    stamp = format_time(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{involved['name']}.", "namespace": namespace},
        "involvedObject": dict(involved),
        "type": event_type,
        "reason": reason,
        "message": message[:MAX_MESSAGE],
        "source": {"component": component},
        "reportingComponent": component,
        "reportingInstance": identity[:128],
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
