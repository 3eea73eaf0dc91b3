"""One value of a stack's validated config, for the sim's shell scripts.

``python sim/stack_value.py STACK_FILE NAME`` prints the value, NAME one of:

- ``descheduler-namespace``: where the descheduler chart is installed (sim/descheduler.sh reads its policy there).

A stack file that is not valid is reported with every problem and its key path (exit status 2).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

#: What a script may ask for, and where it lives in the stack's config.
VALUES: dict[str, Callable[[Any], object]] = {
    "descheduler-namespace": lambda cfg: cfg.descheduler.namespace,
}


class StackValueError(ValueError):
    """The stack file cannot give the value; the message names the file and what is wrong."""


def value(stack_file: Path, name: str) -> str:
    sys.path.insert(0, str(ROOT))
    try:
        from components.config import StackConfigError, load_stack_file  # noqa: PLC0415 (needs ROOT on the path)
    except ImportError as e:
        raise StackValueError(f"{sys.executable} cannot import {e.name}: run make venv") from None
    try:
        cfg = load_stack_file(stack_file)
    except StackConfigError as e:
        raise StackValueError(str(e)) from None
    except OSError as e:
        raise StackValueError(f"{stack_file}: {e.strerror}") from None
    return str(VALUES[name](cfg))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sim/stack_value.py", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("stack", type=Path, help="stack file")
    parser.add_argument("name", choices=sorted(VALUES), help="the value to print")
    args = parser.parse_args(argv)
    try:
        print(value(args.stack, args.name))
    except StackValueError as e:
        print(f"sim/stack_value.py: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
