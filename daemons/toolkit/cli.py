"""The command line every daemon of ours shares: a parser whose ``--help`` shows each flag's default, and
``--log-level`` (what :func:`~daemons.toolkit.logs.setup_logging` takes), which each daemon adds after its own flags.
"""

from __future__ import annotations

import argparse

from daemons.toolkit.logs import LEVELS


def daemon_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """A parser for the command ``prog``; ``--help`` shows each flag's default."""
    return argparse.ArgumentParser(
        prog=prog, description=description, formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )


def add_log_level(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``--log-level`` (default ``info``): the minimum level of the JSON log lines on stderr. Returns ``parser``."""
    parser.add_argument(
        "--log-level", default="info", choices=LEVELS, help="minimum level of the JSON log lines written to stderr"
    )
    return parser
