"""The test tree mirrors the code: ``tests/<path>/`` holds the tests of ``<path>/``, so every folder of tests names a
folder of the code (``support/`` and ``fixtures/`` aside, and data folders holding no Python). Within a folder, a
test file is named for what it tests: ``test_<module>.py``, or ``test_<module>_<aspect>.py`` for one side of it.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
#: Folders of tests that stand for no code folder: shared helpers and captured inputs.
OWN = frozenset({"support", "fixtures"})


def unmirrored(tests: Path, root: Path) -> list[str]:
    """Folders under ``tests`` that hold Python but name no folder of the code under ``root``."""
    out = []
    for folder in sorted(p for p in tests.rglob("*") if p.is_dir() and p.name != "__pycache__"):
        rel = folder.relative_to(tests)
        if rel.parts[0] in OWN or not any(folder.glob("*.py")):
            continue
        if not (root / rel).is_dir():
            out.append(f"tests/{rel.as_posix()}: no folder {rel.as_posix()}/ in the code")
    return out


def test_every_test_folder_mirrors_a_code_folder() -> None:
    assert unmirrored(TESTS, ROOT) == []


def test_the_rule_catches_a_folder_the_code_no_longer_has(tmp_path: Path) -> None:
    (tmp_path / "code" / "daemons" / "kept").mkdir(parents=True)
    for folder in ("daemons/kept", "daemons/gone", "support", "fixtures/captured", "daemons/kept/golden"):
        (tmp_path / "tests" / folder).mkdir(parents=True, exist_ok=True)
    for test in ("daemons/kept/test_a.py", "daemons/gone/test_b.py", "support/helpers.py", "fixtures/captured/x.py"):
        (tmp_path / "tests" / test).write_text("")
    (tmp_path / "tests" / "daemons" / "kept" / "golden" / "out.txt").write_text("")  # data, no Python
    assert unmirrored(tmp_path / "tests", tmp_path / "code") == [
        "tests/daemons/gone: no folder daemons/gone/ in the code"
    ]
