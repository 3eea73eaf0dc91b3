"""Structured (one JSON object per line) logging, and a filter that logs a recurring error only once."""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from typing import Any

_RESERVED = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}


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


def setup_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


class OnceLogger:
    """Logs each distinct (key) error once for the life of the process, so a broken file does not flood logs."""

    def __init__(self, logger: logging.Logger) -> None:
        self._logger = logger
        self._seen: set[tuple[str, ...]] = set()
        self._lock = threading.Lock()

    def error(self, key: tuple[str, ...], msg: str, **fields: Any) -> bool:
        with self._lock:
            if key in self._seen:
                return False
            self._seen.add(key)
        self._logger.error(msg, extra=fields)
        return True

    def seen(self) -> int:
        with self._lock:
            return len(self._seen)
