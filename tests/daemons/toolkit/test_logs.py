"""Log lines: JSON fields, plain text, and the once-per-cause logger with its bound."""

from __future__ import annotations

import json
import logging
import sys

import pytest

from daemons.toolkit.logs import JsonFormatter, OnceLogger, setup_logging


def test_json_line_carries_the_extra_fields_and_the_exception_type() -> None:
    record = logging.LogRecord("d", logging.ERROR, "f", 1, "cannot listen", (), None)
    record.port = 9102
    try:
        raise OSError("in use")
    except OSError:
        record.exc_info = sys.exc_info()
    entry = json.loads(JsonFormatter().format(record))
    assert {k: entry[k] for k in ("level", "logger", "msg", "port", "exc_type", "exc")} == {
        "level": "error",
        "logger": "d",
        "msg": "cannot listen",
        "port": 9102,
        "exc_type": "OSError",
        "exc": "in use",
    }
    assert entry["ts"].endswith("Z")


@pytest.mark.parametrize(("style", "json_lines"), [("json", True), ("plain", False)])
def test_setup_logging_styles(style: str, json_lines: bool, capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        setup_logging("info", style=style)  # type: ignore[arg-type]
        logging.getLogger("t").info("hello")
        logging.getLogger("t").debug("hidden")
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1
    if json_lines:
        assert json.loads(lines[0])["msg"] == "hello"
    else:
        assert lines[0].endswith(" INFO t hello")


def test_once_logger_logs_each_key_once_and_stops_at_its_limit(caplog: pytest.LogCaptureFixture) -> None:
    once = OnceLogger(logging.getLogger("once"), limit=2)
    with caplog.at_level(logging.ERROR, logger="once"):
        assert once.error(("a",), "a broke")
        assert not once.error(("a",), "a broke again")
        assert once.error(("b",), "b broke")
        assert not once.error(("c",), "c broke")  # past the limit: one line says so
        assert not once.error(("d",), "d broke")
    messages = [r.getMessage() for r in caplog.records]
    assert messages[:2] == ["a broke", "b broke"]
    assert messages[2:] == ["more than 2 distinct problems; further new ones are counted but not logged"]
    assert once.seen() == 2
