"""Logging for every daemon: one JSON object per line on stderr (or plain text), and a once-per-cause logger.

``setup_logging(level)`` is what the daemons call: ``{"ts": ..., "level": ..., "logger": ..., "msg": ...,
<extra fields>}`` per line. ``setup_logging(level, style="plain")`` writes ``<time> <LEVEL> <logger> <message>``
lines instead (the fake cloud, which people read in a terminal).
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from typing import Any, Literal

_RESERVED = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}

LEVELS = ("debug", "info", "warning", "error")
PLAIN_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


class JsonFormatter(logging.Formatter):
    """``{"ts": ..., "level": ..., "logger": ..., "msg": ..., <extra fields>}``."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _RESERVED and not key.startswith("_"):
                entry[key] = value
        if record.exc_info and record.exc_info[0] is not None:
            entry["exc_type"] = record.exc_info[0].__name__
            entry["exc"] = str(record.exc_info[1])
        return json.dumps(entry, default=str, sort_keys=False)


def setup_logging(level: str, style: Literal["json", "plain"] = "json") -> None:
    """Send every logger's records at ``level`` and above to stderr, as JSON lines or plain text."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if style == "json" else logging.Formatter(PLAIN_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


class OnceLogger:
    """Logs each distinct (key) error once for the life of the process, so a broken file does not flood logs.

    At most ``limit`` distinct keys are remembered; past that one line says so and further new keys are not
    logged (a tree with thousands of broken files must not grow memory or the log without bound).
    """

    def __init__(self, logger: logging.Logger, limit: int = 1000) -> None:
        self._logger = logger
        self._limit = limit
        self._seen: set[tuple[str, ...]] = set()
        self._overflowed = False
        self._lock = threading.Lock()

    def error(self, key: tuple[str, ...], msg: str, **fields: Any) -> bool:
        with self._lock:
            if key in self._seen:
                return False
            if len(self._seen) >= self._limit:
                first_overflow = not self._overflowed
                self._overflowed = True
            else:
                self._seen.add(key)
                first_overflow = None
        if first_overflow is None:
            self._logger.error(msg, extra=fields)
            return True
        if first_overflow:
            self._logger.error(
                f"more than {self._limit} distinct problems; further new ones are counted but not logged",
                extra={"limit": self._limit},
            )
        return False

    def seen(self) -> int:
        with self._lock:
            return len(self._seen)
