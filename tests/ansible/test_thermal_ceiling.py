"""The GPU thermal ceiling has one home, ``contract.constants.GPU_TEMP_CEILING_C``; the Ansible role repeats it.

Ansible cannot import a Python constant, so ``ansible/roles/gpu_thermal_acceptance`` carries the ceiling as literals:
the default of ``gpu_thermal_acceptance_thermal_limit_c`` (``defaults/main.yml`` and its comment), the option's
default and description in ``meta/argument_specs.yml``, and the preflight assert's comparison and ``fail_msg`` in
``tasks/main.yml``. The assert keeps a literal on purpose: a role variable could be raised with ``-e``, a ceiling
may only be lowered. ``ceiling_mismatches`` reads each location (YAML through ``yaml.safe_load``; only the comment
and the numbers inside Jinja or prose strings need a pattern) and names every one that differs from the constant or
can no longer be found, so a rewritten location fails instead of going unchecked.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from contract.constants import GPU_TEMP_CEILING_C

ROLE = Path(__file__).resolve().parents[2] / "ansible" / "roles" / "gpu_thermal_acceptance"
LIMIT_VAR = "gpu_thermal_acceptance_thermal_limit_c"
ASSERT_MODULES = {"assert", "ansible.builtin.assert", "ansible.legacy.assert"}

_NUMBER = r"(\d+(?:\.\d+)?)"
#: The preflight assert's ceiling check, e.g. ``gpu_thermal_acceptance_thermal_limit_c | float <= 78``.
_ASSERT_THAT = re.compile(rf"^\s*{LIMIT_VAR}\s*\|\s*float\s*<=\s*{_NUMBER}\s*$")
#: The assert's message about it: ``thermal_limit_c={{ gpu_thermal_acceptance_thermal_limit_c }} (must be at most 78)``.
_ASSERT_MSG = re.compile(rf"\{{\{{\s*{LIMIT_VAR}\s*\}}\}}\s*\(must be at most {_NUMBER}\)")
#: The argument_specs description: ``... Values above 78 are refused.``
_SPEC_DESCRIPTION = re.compile(rf"\babove {_NUMBER} are refused\b")
#: The comment above the default in defaults/main.yml (comments are not YAML data): ``refuses a value above 78``.
_DEFAULTS_COMMENT = re.compile(rf"#.*\brefuses a value above {_NUMBER}\b")


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        return float(value)
    except ValueError:
        return None


def _tasks(tasks: Any) -> Iterator[dict[str, Any]]:
    """Every task of a task list, blocks included."""
    for task in tasks if isinstance(tasks, list) else []:
        if not isinstance(task, dict):
            continue
        yield task
        for section in ("block", "rescue", "always"):
            yield from _tasks(task.get(section))


def _found(role: Path) -> Iterator[tuple[str, str, Any]]:
    """Each location that carries the ceiling: (file relative to the role, what in it, the value read or None)."""
    defaults_path = role / "defaults" / "main.yml"
    defaults = _load(defaults_path)
    value = defaults.get(LIMIT_VAR) if isinstance(defaults, dict) else None
    yield "defaults/main.yml", LIMIT_VAR, value
    comments = _DEFAULTS_COMMENT.findall(defaults_path.read_text(encoding="utf-8"))
    yield "defaults/main.yml", f"comment above {LIMIT_VAR}", comments[0] if len(comments) == 1 else None

    specs = _load(role / "meta" / "argument_specs.yml")
    try:
        option = specs["argument_specs"]["main"]["options"][LIMIT_VAR]
    except (KeyError, TypeError):
        option = None
    if not isinstance(option, dict):
        option = {}
    yield "meta/argument_specs.yml", f"argument_specs.main.options.{LIMIT_VAR}.default", option.get("default")
    description = option.get("description", "")
    text = " ".join(description) if isinstance(description, list) else str(description)
    numbers = _SPEC_DESCRIPTION.findall(text)
    yield (
        "meta/argument_specs.yml",
        f"argument_specs.main.options.{LIMIT_VAR}.description",
        numbers[0] if len(numbers) == 1 else None,
    )

    thats: list[str] = []
    messages: list[str] = []
    for task in _tasks(_load(role / "tasks" / "main.yml")):
        args = next((task[m] for m in ASSERT_MODULES if m in task), None)
        if not isinstance(args, dict):
            continue
        that = args.get("that")
        conditions = that if isinstance(that, list) else [that]
        thats += [m.group(1) for c in conditions if isinstance(c, str) and (m := _ASSERT_THAT.match(c))]
        messages += _ASSERT_MSG.findall(str(args.get("fail_msg", "")))
    yield "tasks/main.yml", f"assert that: {LIMIT_VAR} | float <= N", thats[0] if len(thats) == 1 else None
    yield "tasks/main.yml", "assert fail_msg: (must be at most N)", messages[0] if len(messages) == 1 else None


def ceiling_mismatches(role: Path, ceiling: float) -> list[str]:
    """One line per location of ``role`` whose ceiling differs from ``ceiling`` or is missing; empty if all agree."""
    problems = []
    for file, key, value in _found(role):
        number = _number(value)
        if number is None:
            problems.append(f"{file}: {key}: not found exactly once (expected the ceiling {ceiling:g})")
        elif number != ceiling:
            problems.append(f"{file}: {key} is {number:g}, but GPU_TEMP_CEILING_C is {ceiling:g}")
    return problems


def test_role_carries_the_python_ceiling() -> None:
    assert ceiling_mismatches(ROLE, GPU_TEMP_CEILING_C) == []


def test_a_changed_python_ceiling_flags_every_location() -> None:
    """The check follows the constant: changing only the Python side fails at each of the role's six places."""
    problems = ceiling_mismatches(ROLE, GPU_TEMP_CEILING_C - 3)
    assert len(problems) == 6, problems
    assert all(f"but GPU_TEMP_CEILING_C is {GPU_TEMP_CEILING_C - 3:g}" in p for p in problems), problems


_C = f"{GPU_TEMP_CEILING_C:g}"
_RAISED = f"{GPU_TEMP_CEILING_C + 1:g}"


@pytest.mark.parametrize(
    ("file", "old", "new", "key"),
    [
        ("defaults/main.yml", f"{LIMIT_VAR}: {_C}\n", f"{LIMIT_VAR}: {_RAISED}\n", LIMIT_VAR),
        (
            "defaults/main.yml",
            f"refuses a value above {_C}.",
            f"refuses a value above {_RAISED}.",
            f"comment above {LIMIT_VAR}",
        ),
        (
            "meta/argument_specs.yml",
            f"default: {_C}\n        description: Highest",
            f"default: {_RAISED}\n        description: Highest",
            f"argument_specs.main.options.{LIMIT_VAR}.default",
        ),
        (
            "meta/argument_specs.yml",
            f"Values above {_C} are refused",
            f"Values above {_RAISED} are refused",
            f"argument_specs.main.options.{LIMIT_VAR}.description",
        ),
        (
            "tasks/main.yml",
            f"{LIMIT_VAR} | float <= {_C}\n",
            f"{LIMIT_VAR} | float <= {_RAISED}\n",
            f"assert that: {LIMIT_VAR} | float <= N",
        ),
        (
            "tasks/main.yml",
            f"(must be at most {_C})",
            f"(must be at most {_RAISED})",
            "assert fail_msg: (must be at most N)",
        ),
    ],
    ids=["default", "default-comment", "spec-default", "spec-description", "assert-that", "assert-fail-msg"],
)
def test_a_differing_role_value_is_reported_by_file_and_key(
    tmp_path: Path, file: str, old: str, new: str, key: str
) -> None:
    role = tmp_path / ROLE.name
    shutil.copytree(ROLE, role, ignore=shutil.ignore_patterns("molecule", "__pycache__"))
    path = role / file
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{file} no longer reads {old!r}: update this test's edit"
    path.write_text(text.replace(old, new), encoding="utf-8")

    assert ceiling_mismatches(role, GPU_TEMP_CEILING_C) == [
        f"{file}: {key} is {_RAISED}, but GPU_TEMP_CEILING_C is {_C}"
    ]


def test_a_location_that_disappears_is_reported(tmp_path: Path) -> None:
    """Rewriting the assert so the pattern no longer finds it fails too, rather than silently checking nothing."""
    role = tmp_path / ROLE.name
    shutil.copytree(ROLE, role, ignore=shutil.ignore_patterns("molecule", "__pycache__"))
    tasks = role / "tasks" / "main.yml"
    tasks.write_text(tasks.read_text(encoding="utf-8").replace(f"| float <= {_C}\n", f"| float < {_RAISED}\n"))

    assert ceiling_mismatches(role, GPU_TEMP_CEILING_C) == [
        f"tasks/main.yml: assert that: {LIMIT_VAR} | float <= N: not found exactly once (expected the ceiling {_C})"
    ]
