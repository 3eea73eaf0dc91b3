"""sim/descheduler_image.py: the descheduler chart's image for the real node, in upstream's shape (one static binary
at /bin/descheduler, user 1000) under upstream's name at the release the tools pin, built once per binary."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from components.descheduler_settings import DESCHEDULER_IMAGE
from sim import descheduler_image
from sim.descheduler_image import DeschedulerImageError, build, image_name, pinned_version


def _blob(archive: Path, digest: str) -> bytes:
    with tarfile.open(archive) as tar:
        member = tar.extractfile(f"blobs/sha256/{digest.removeprefix('sha256:')}")
        assert member is not None
        return member.read()


def test_the_image_is_the_release_the_tools_pin_and_the_stacks_default_names() -> None:
    assert pinned_version() == "v0.36.0"
    assert image_name() == "registry.k8s.io/descheduler/descheduler:v0.36.0" == DESCHEDULER_IMAGE


def test_a_tool_group_requiring_no_descheduler_is_refused(tmp_path: Path) -> None:
    (tmp_path / "go.mod").write_text("module x\n\ngo 1.26.0\n")
    with pytest.raises(DeschedulerImageError, match=r"requires no sigs\.k8s\.io/descheduler"):
        pinned_version(tmp_path)


def test_the_binary_goes_to_bin_descheduler_run_as_upstreams_user(tmp_path: Path) -> None:
    binary = tmp_path / "descheduler"
    binary.write_bytes(b"\x7fELF not really")
    archive = tmp_path / "out" / "descheduler.oci.tar"
    assert build(archive, binary) == "registry.k8s.io/descheduler/descheduler:v0.36.0"
    index = json.loads(_blob_index(archive))
    manifest = json.loads(_blob(archive, index["manifests"][0]["digest"]))
    config = json.loads(_blob(archive, manifest["config"]["digest"]))
    assert config["config"]["User"] == "1000"
    assert config["config"]["Cmd"] == ["/bin/descheduler", "--help"]
    (layer,) = manifest["layers"]
    with tarfile.open(fileobj=io.BytesIO(_blob(archive, layer["digest"]))) as tar:
        member = tar.getmember("bin/descheduler")
        assert member.mode & 0o777 == 0o755
        extracted = tar.extractfile(member)
        assert extracted is not None
        assert extracted.read() == b"\x7fELF not really"


def test_the_same_binary_is_not_built_again_and_a_new_one_is(tmp_path: Path) -> None:
    binary = tmp_path / "descheduler"
    binary.write_bytes(b"one")
    archive = tmp_path / "descheduler.oci.tar"
    build(archive, binary)
    first, contents = archive.stat().st_mtime_ns, archive.read_bytes()
    build(archive, binary)
    assert archive.stat().st_mtime_ns == first, "the same binary was built into an image again"
    binary.write_bytes(b"two")
    build(archive, binary)
    assert archive.read_bytes() != contents, "a new binary left the old image"


def test_without_the_tools_built_it_says_run_make_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(descheduler_image, "tools_bin", lambda: tmp_path / "empty")
    with pytest.raises(DeschedulerImageError, match="descheduler not found: run make tools"):
        build(tmp_path / "descheduler.oci.tar")


def _blob_index(archive: Path) -> bytes:
    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        assert member is not None
        return member.read()
