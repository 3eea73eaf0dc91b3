"""The command line's own text (the kit's behaviour is held for every controller in tests/daemons/toolkit)."""

from __future__ import annotations

from contract.controllers.make_before_break import SPEC
from daemons.toolkit import runner


def test_help_says_what_it_is() -> None:
    assert "AdmissionCheck controller" in " ".join(runner.build_parser(SPEC).format_help().split())
