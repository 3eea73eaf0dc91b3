"""``python -m components.config check FILE...`` (console script ``gpucluster-config``): validate stack files
without the engine, for pre-commit and CI. Exit 0 when every file is valid, 1 when any has a problem."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

from components.config.loader import load_stack_file
from components.config.stack import StackConfig, StackConfigError
from contract.registry import MAKE_BEFORE_BREAK


def _cmd_check(paths: Sequence[str], out: Callable[[str], None]) -> int:
    failed = 0
    for p in paths:
        try:
            cfg = load_stack_file(p)
        except StackConfigError as err:
            failed += 1
            out(str(err))
            continue
        out(
            f"{p}: ok ({cfg.environment}: {len(cfg.flavors)} flavor(s), {cfg.total_gpus} GPUs, "
            f"{len(cfg.queues)} ClusterQueue(s), {len(cfg.teams)} team(s){_burst_summary(cfg)}"
            f"{_make_before_break_summary(cfg)})"
        )
    return 1 if failed else 0


def _burst_summary(cfg: StackConfig) -> str:
    if cfg.burst is None:
        return ", no bursting"
    if not cfg.burst.enabled:
        return ", bursting configured but off"
    return f", bursts to {cfg.burst.capacity} GPUs through {len(cfg.burst.settings.providers)} provider(s)"


def _make_before_break_summary(cfg: StackConfig) -> str:
    mbb = cfg.controller(MAKE_BEFORE_BREAK)
    return f", make-before-break on (maxHold {mbb.max_hold})" if mbb.enabled else ", make-before-break off"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m components.config", description="Validate gpucluster stack files without the engine."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="validate stack files; exit 1 if any has a problem")
    check.add_argument("files", nargs="+", metavar="stacks/Pulumi.<stack>.yaml")
    args = parser.parse_args(argv)
    if args.command == "check":
        return _cmd_check(args.files, print)
    return 2  # pragma: no cover - argparse enforces the choices
