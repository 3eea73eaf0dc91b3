"""The command line's own text (the kit's behaviour is held for every controller in tests/daemons/toolkit)."""

from __future__ import annotations

from contract.controllers.interruptions import SPEC
from daemons.toolkit import runner


def test_help_names_the_restart_bound_annotation() -> None:
    assert "max-restarts-per-hour" in runner.build_parser(SPEC).format_help()
