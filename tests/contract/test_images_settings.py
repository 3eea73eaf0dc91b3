"""ImagesSettings (``gpucluster:images``): each field's validator with a value that passes and one refused with its
reason, the refs with and without a digest, the project's version and where it is read from."""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from contract import images_settings
from contract.images_settings import (
    DAEMONS_IMAGE,
    DEFAULT_DAEMONS_IMAGE,
    DEFAULT_REGISTRY,
    DEFAULT_VIRTUAL_NODE_IMAGE,
    IMAGE_NAMES,
    VIRTUAL_NODE_IMAGE,
    ImagesSettings,
    project_version,
)
from contract.model import check_image

ROOT = Path(__file__).resolve().parents[2]
DAEMONS_DIGEST = "sha256:" + "1" * 64
NODE_DIGEST = "sha256:" + "2" * 64


def refused(data: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as info:
        ImagesSettings.model_validate(data)
    return str(info.value)


def test_the_two_images_make_images_builds() -> None:
    assert IMAGE_NAMES == (DAEMONS_IMAGE, VIRTUAL_NODE_IMAGE) == ("gpucluster-daemons", "gpucluster-virtual-node")


def test_the_defaults_follow_the_project_version() -> None:
    s = ImagesSettings()
    version = project_version()
    assert (s.registry, s.version, s.digests) == (DEFAULT_REGISTRY, version, {})
    assert DEFAULT_REGISTRY == "ghcr.io/example"
    assert f"ghcr.io/example/gpucluster-daemons:{version}" == DEFAULT_DAEMONS_IMAGE
    assert f"ghcr.io/example/gpucluster-virtual-node:{version}" == DEFAULT_VIRTUAL_NODE_IMAGE


@pytest.mark.parametrize(
    "registry",
    ["ghcr.io/example", "registry.internal.example/gpucluster", "localhost:5000", "10.0.0.5:5000/team/ml-images"],
)
def test_a_registry_host_with_an_optional_path_passes(registry: str) -> None:
    ref = ImagesSettings(registry=registry).ref(DAEMONS_IMAGE)
    assert ref == f"{registry}/gpucluster-daemons:{project_version()}"
    assert check_image(ref) == ref  # every ref built from a valid registry is a valid image reference


@pytest.mark.parametrize(
    ("registry", "reason"),
    [
        ("https://registry.internal.example/gpucluster", "has a scheme"),
        ("registry.internal.example/gpucluster/", "ends with '/'"),
        ("registry.internal.example/gpucluster:0.1.0", "carries a tag or digest"),
        ("registry.internal.example/gpucluster@sha256:" + "a" * 64, "carries a tag or digest"),
        ("Registry.Internal.example/GPUCluster", "is not a registry host with an optional path"),
        ("registry internal", "is not a registry host with an optional path"),
        ("", "is not a registry host with an optional path"),
    ],
)
def test_a_registry_that_is_not_a_host_and_path_is_refused(registry: str, reason: str) -> None:
    message = refused({"registry": registry})
    assert "registry" in message
    assert reason in message


@pytest.mark.parametrize("version", ["0.1.0", "1.2.3-rc.1", "v2", "2026.12.01_build7"])
def test_a_version_that_is_an_oci_tag_passes(version: str) -> None:
    assert ImagesSettings(version=version).ref(VIRTUAL_NODE_IMAGE).endswith(f"/gpucluster-virtual-node:{version}")


@pytest.mark.parametrize(
    ("version", "reason"),
    [
        ("0.1.0+local", "is not an image tag"),
        (".hidden", "is not an image tag"),
        ("-rc", "is not an image tag"),
        ("x" * 129, "is not an image tag"),
        ("latest", "the moving tag 'latest' is refused"),
    ],
)
def test_a_version_that_is_no_oci_tag_is_refused(version: str, reason: str) -> None:
    message = refused({"version": version})
    assert "version" in message
    assert reason in message


def test_digests_for_both_images_pass() -> None:
    s = ImagesSettings.model_validate(
        {"digests": {"gpucluster-daemons": DAEMONS_DIGEST, "gpucluster-virtual-node": NODE_DIGEST}}
    )
    assert s.digests == {DAEMONS_IMAGE: DAEMONS_DIGEST, VIRTUAL_NODE_IMAGE: NODE_DIGEST}


def test_an_unknown_image_name_is_refused_naming_the_known_ones() -> None:
    message = refused({"digests": {"gpucluster/daemons": DAEMONS_DIGEST}})
    assert "no image of ours is named 'gpucluster/daemons'" in message
    assert "known: gpucluster-daemons, gpucluster-virtual-node" in message


@pytest.mark.parametrize(
    "digest", ["sha256:" + "1" * 63, "sha256:" + "A" * 64, "sha512:" + "1" * 64, "1" * 64, "sha256:" + "g" * 64]
)
def test_a_digest_that_is_not_sha256_hex_is_refused(digest: str) -> None:
    message = refused({"digests": {DAEMONS_IMAGE: digest}})
    assert "digests.gpucluster-daemons" in message
    assert "is not a digest such as sha256:<64 lower-case hex>" in message


def test_unknown_keys_are_refused() -> None:
    assert "tag" in refused({"tag": "0.1.0"})


def test_ref_without_and_with_a_digest() -> None:
    s = ImagesSettings.model_validate(
        {
            "registry": "registry.internal.example/gpucluster",
            "version": "0.2.0",
            "digests": {DAEMONS_IMAGE: DAEMONS_DIGEST},
        }
    )
    assert s.ref(DAEMONS_IMAGE) == f"registry.internal.example/gpucluster/gpucluster-daemons:0.2.0@{DAEMONS_DIGEST}"
    # Only the pinned image carries a digest.
    assert s.ref(VIRTUAL_NODE_IMAGE) == "registry.internal.example/gpucluster/gpucluster-virtual-node:0.2.0"
    for name in IMAGE_NAMES:
        assert check_image(s.ref(name)) == s.ref(name)


def test_ref_of_an_image_that_is_not_ours_is_refused() -> None:
    with pytest.raises(ValueError, match="known: gpucluster-daemons, gpucluster-virtual-node"):
        ImagesSettings().ref("sd-serve")


def test_project_version_is_the_installed_distributions() -> None:
    assert project_version() == importlib.metadata.version("gpucluster")
    with (ROOT / "pyproject.toml").open("rb") as fh:
        assert project_version() == tomllib.load(fh)["project"]["version"]


def test_project_version_falls_back_to_pyproject_toml(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def not_installed(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "gpucluster"\nversion = "9.8.7"\n', encoding="utf-8")
    monkeypatch.setattr(images_settings, "PYPROJECT", pyproject)
    project_version.cache_clear()
    try:
        assert project_version() == "9.8.7"
        pyproject.write_text('[project]\nname = "gpucluster"\n', encoding="utf-8")
        project_version.cache_clear()
        with pytest.raises(RuntimeError, match=r"is not installed and .* has no project\.version"):
            project_version()
    finally:
        project_version.cache_clear()
