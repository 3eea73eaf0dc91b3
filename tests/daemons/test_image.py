"""daemons/image.py: what the daemon image (make images) pins and checks, read from the project itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from contract.registry import CONTROLLERS
from daemons.image import DAEMON_MODULES, RUNTIME_DEPENDENCIES, ImageError, check_imports, main, pinned_requirements

ROOT = Path(__file__).resolve().parents[2]


def test_requirements_are_the_pins_of_pyproject(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["requirements", str(ROOT / "pyproject.toml")]) == 0
    lines = capsys.readouterr().out.split()
    assert [line.split("==")[0] for line in lines] == list(RUNTIME_DEPENDENCIES)
    assert all("==" in line for line in lines)
    assert "pulumi" not in " ".join(lines)


def test_an_unpinned_runtime_dependency_is_refused(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\ndependencies = ["pydantic>=2", "PyYAML==6.0.4"]\n')
    with pytest.raises(ImageError, match="pins no version of pydantic"):
        pinned_requirements(pyproject, ("pydantic", "PyYAML"))
    pyproject.write_text("not toml [")
    assert main(["requirements", str(pyproject)]) == 1


def test_every_daemon_module_imports() -> None:
    check_imports()
    # every controller of the registry, and the two daemons that are not controllers
    for module in [spec.module for spec in CONTROLLERS] + ["daemons.burst_provider", "daemons.fabric_exporter"]:
        assert f"{module}.__main__" in DAEMON_MODULES


def test_a_module_that_does_not_import_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ImageError, match=r"^daemons\.no_such_module does not import: ModuleNotFoundError"):
        check_imports(["yaml", "daemons.no_such_module"])
