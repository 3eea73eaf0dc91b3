"""The command line's own text (the kit's behaviour is held for every controller in tests/daemons/toolkit)."""

from __future__ import annotations

from contract.controllers.quarantine import SPEC
from daemons.toolkit import runner


def test_help_names_the_taint_and_the_breaker() -> None:
    text = " ".join(runner.build_parser(SPEC).format_help().split())
    assert "gpucluster.io/quarantine" in text
    assert "maxShare" in text
