"""The command line every daemon starts from: each flag's default in ``--help``, and ``--log-level``."""

from __future__ import annotations

import pytest

from daemons.toolkit.cli import add_log_level, daemon_parser
from daemons.toolkit.logs import LEVELS


def test_help_names_the_command_and_each_flags_default() -> None:
    parser = daemon_parser("gpucluster-test", "Test daemon.")
    parser.add_argument("--port", type=int, default=9402, help="TCP port")
    text = parser.format_help()
    assert text.startswith("usage: gpucluster-test ")
    assert "Test daemon." in text
    assert "TCP port (default: 9402)" in text


def test_log_level_is_info_unless_given_and_one_of_the_levels(capsys: pytest.CaptureFixture[str]) -> None:
    parser = daemon_parser("gpucluster-test", "Test daemon.")
    assert add_log_level(parser) is parser
    assert parser.parse_args([]).log_level == "info"
    assert parser.parse_args(["--log-level", "debug"]).log_level == "debug"
    with pytest.raises(SystemExit) as info:
        parser.parse_args(["--log-level", "verbose"])
    assert info.value.code == 2
    said = capsys.readouterr().err
    assert all(level in said for level in LEVELS)
