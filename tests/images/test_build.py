"""What a build checks before it starts, and what it writes on each image."""

from __future__ import annotations

from pathlib import Path

import pytest

from contract.images_settings import IMAGE_NAMES, project_version
from images.build import LOCK, ROOT, check_lock, labels, provenance
from images.definitions import DEFINITIONS
from images.steps import BuildError, locked_versions

PYPROJECT = ROOT / "pyproject.toml"


def test_the_committed_lock_matches_pyproject() -> None:
    check_lock(LOCK, PYPROJECT)
    assert "kubernetes" in locked_versions(LOCK)


def test_a_lock_behind_pyproject_is_refused(tmp_path: Path) -> None:
    stale = tmp_path / "daemons.lock"
    text = LOCK.read_text(encoding="utf-8")
    version = locked_versions(LOCK)["pydantic"]
    stale.write_text(text.replace(f"pydantic=={version} ", "pydantic==0.0.1 "), encoding="utf-8")
    with pytest.raises(BuildError, match=r"pins pydantic==0\.0\.1 where pyproject.toml pins .*python -m images lock"):
        check_lock(stale, PYPROJECT)
    with pytest.raises(BuildError, match="is missing"):
        check_lock(tmp_path / "absent.lock", PYPROJECT)


def test_every_image_of_the_scheme_has_a_definition() -> None:
    assert tuple(DEFINITIONS) == IMAGE_NAMES


def test_labels_carry_source_version_revision() -> None:
    prov = provenance(source="https://example.test/repo", epoch=1_700_000_000)
    assert prov.version == project_version()
    assert len(prov.revision) == 40
    got = labels(DEFINITIONS[IMAGE_NAMES[0]], prov)
    assert got["org.opencontainers.image.source"] == "https://example.test/repo"
    assert got["org.opencontainers.image.version"] == project_version()
    assert got["org.opencontainers.image.revision"] == prov.revision
    assert got["org.opencontainers.image.created"] == "2023-11-14T22:13:20Z"


def test_the_default_source_is_pyprojects() -> None:
    assert provenance().source == "https://github.com/example/gpucluster"
