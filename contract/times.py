"""Times as the Kubernetes API and the providers write them: RFC 3339, read into Unix seconds.

Every object of the API server stamps its times in RFC 3339 with ``Z`` (``metav1.Time``); providers answer with an
offset or ``Z``. A time without a zone names no instant: it reads as unknown, never as this machine's local time.
"""

from __future__ import annotations

import datetime as dt


def unix_seconds(text: object) -> float | None:
    """Unix seconds of an RFC 3339 timestamp with a time zone; None when absent, not a string, unreadable, or without
    a zone."""
    if not isinstance(text, str) or not text.strip():
        return None
    try:
        value = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return None if value.tzinfo is None else value.timestamp()


def rfc3339(ts: float | None) -> str:
    """Unix seconds as the API server writes a time (``metav1.Time``: whole seconds, ``Z``); "" for None."""
    if ts is None:
        return ""
    return dt.datetime.fromtimestamp(int(ts), tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
