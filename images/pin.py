"""Write built images' digests into a stack file's ``gpucluster:images.digests``, keeping every comment.

Only the ``digests:`` lines of the ``gpucluster:images`` section change (the section is added at the end of
``config:`` when the stack has none). The new file must parse and validate as a stack before it replaces the old
one, so a failed pin leaves the stack as it was.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import yaml

from components.config import StackConfigError, load_stack_file
from contract.images_settings import IMAGE_NAMES, check_digest, check_image_name

SECTION = "gpucluster:images"


class PinError(RuntimeError):
    """The stack could not be pinned; the message names the file and why. The file is unchanged."""


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _meaningful(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#")


def _block_end(lines: list[str], start: int, indent: int) -> int:
    """The index after the last line of the block opened at ``start`` (lines indented deeper than ``indent``);
    comments and blank lines at its end belong to what follows."""
    end = start + 1
    last = start
    while end < len(lines):
        if _meaningful(lines[end]):
            if _indent(lines[end]) <= indent:
                break
            last = end
        end += 1
    return last + 1


def pinned_text(text: str, digests: Mapping[str, str], source: str = "stack") -> str:
    """``text`` with the section's ``digests:`` set to ``digests`` (name -> sha256:...)."""
    for name, digest in digests.items():
        try:
            check_image_name(name)
            check_digest(digest)
        except ValueError as exc:
            raise PinError(f"{source}: {exc}") from None
    lines = text.splitlines()
    try:
        top = next(i for i, line in enumerate(lines) if re.match(r"^config:\s*(#.*)?$", line))
    except StopIteration:
        raise PinError(f"{source}: no top-level `config:` map") from None
    entry = [f"      {n}: {digests[n]}" for n in IMAGE_NAMES if n in digests]
    section = next((i for i in range(top + 1, len(lines)) if re.match(rf"^  {SECTION}:\s*(#.*)?$", lines[i])), None)
    if section is None:
        end = _block_end(lines, top, 0)
        new = [f"  {SECTION}:", "    digests:", *entry]
        lines[end:end] = new
    else:
        end = _block_end(lines, section, 2)
        sub = next((i for i in range(section + 1, end) if re.match(r"^    digests:\s*(#.*)?$", lines[i])), None)
        if sub is None:
            lines[end:end] = ["    digests:", *entry]
        else:
            sub_end = _block_end(lines, sub, 4)
            lines[sub : max(sub_end, sub + 1)] = ["    digests:", *entry]
    return "\n".join(lines) + "\n"


def pin_stack(path: Path, digests: Mapping[str, str]) -> str:
    """Pin ``path``; returns the new text. Raises :class:`PinError` (the file untouched) when the result does not
    read back with exactly these digests or does not validate as a stack."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PinError(f"{path}: {exc.strerror or exc}") from None
    new = pinned_text(text, digests, str(path))
    try:
        parsed = yaml.safe_load(new)
        got = dict((parsed.get("config") or {}).get(SECTION, {}).get("digests") or {})
    except (yaml.YAMLError, AttributeError) as exc:
        raise PinError(f"{path}: the pinned file would not read back ({type(exc).__name__}); nothing written") from None
    if any(got.get(n) != d for n, d in digests.items()):
        raise PinError(f"{path}: the pinned file reads back {got}, not the digests given; nothing written")
    tmp = path.with_name(path.name + ".pinning")
    tmp.write_text(new, encoding="utf-8")
    try:
        load_stack_file(tmp)
    except StackConfigError as err:
        tmp.unlink()
        raise PinError(f"{path}: pinned, the stack would not validate; nothing written:\n{err}") from None
    tmp.replace(path)
    return new
