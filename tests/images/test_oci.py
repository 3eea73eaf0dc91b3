"""OCI layouts from images/oci.py: the same inputs give the same bytes, and real OCI tools read them."""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from images import oci
from tests.support.require import missing

EPOCH = 1_700_000_000
CONFIG = oci.ImageConfig(
    user="65534:65534",
    entrypoint=("/usr/local/bin/hello",),
    cmd=(),
    env=("PATH=/usr/local/bin",),
    labels={"org.opencontainers.image.version": "1.2.3"},
    exposed_ports=(8080,),
)


def tree(root: Path) -> Path:
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "b.conf").write_text("b\n")
    (root / "etc" / "a.conf").write_text("a\n")
    (root / "bin").mkdir()
    script = root / "bin" / "tool"
    script.write_text("#!/bin/true\n")
    script.chmod(0o755)
    (root / "bin" / "alias").symlink_to("tool")
    return root


def image_from(root: Path, labels: dict[str, str] | None = None, epoch: int = EPOCH) -> oci.Image:
    layer = oci.Layer("tree")
    layer.tree(root)
    layer.directory("tmp", 0o1777)
    config = oci.ImageConfig(**{**CONFIG.__dict__, "labels": labels or dict(CONFIG.labels)})
    return oci.assemble("1.2.3", [(layer.comment, layer.tar(epoch))], config=config, epoch=epoch, annotations={})


def test_layer_entries_are_sorted_dated_and_owned_by_root(tmp_path: Path) -> None:
    root = tree(tmp_path / "t")
    os.utime(root / "etc" / "a.conf", (2_000_000_000, 2_000_000_000))
    layer = oci.Layer("tree")
    layer.tree(root)
    with tarfile.open(fileobj=io.BytesIO(layer.tar(EPOCH))) as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names) == ["bin", "bin/alias", "bin/tool", "etc", "etc/a.conf", "etc/b.conf"]
    assert {m.mtime for m in members} == {EPOCH}
    assert {(m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, "", "")}
    by_name = {m.name: m for m in members}
    assert by_name["bin/tool"].mode == 0o755
    assert by_name["bin/alias"].issym()
    assert by_name["bin/alias"].linkname == "tool"


def test_parents_are_added_and_paths_outside_refused() -> None:
    layer = oci.Layer("x")
    layer.file("usr/local/bin/x", b"x", 0o755)
    assert {"usr", "usr/local", "usr/local/bin", "usr/local/bin/x"} <= set(layer.entries)
    with pytest.raises(oci.OciError, match="not a path inside the image"):
        layer.file("../etc/passwd", b"")


def test_same_inputs_same_digest_and_any_change_shows(tmp_path: Path) -> None:
    first = image_from(tree(tmp_path / "one"))
    second = image_from(tree(tmp_path / "two"))
    assert first.digest == second.digest
    assert first.config.data == second.config.data
    assert image_from(tree(tmp_path / "three"), {"org.opencontainers.image.version": "1.2.4"}).digest != first.digest
    assert image_from(tree(tmp_path / "four"), epoch=EPOCH + 1).digest != first.digest
    changed = tree(tmp_path / "five")
    (changed / "etc" / "a.conf").write_text("A\n")
    assert image_from(changed).digest != first.digest


def test_config_and_manifest_follow_the_image_spec(tmp_path: Path) -> None:
    image = image_from(tree(tmp_path / "t"))
    config = json.loads(image.config.data)
    assert config["config"]["User"] == "65534:65534"
    assert config["config"]["Entrypoint"] == ["/usr/local/bin/hello"]
    assert config["config"]["ExposedPorts"] == {"8080/tcp": {}}
    assert config["created"] == "2023-11-14T22:13:20Z"
    layer = image.layers[0]
    assert config["rootfs"]["diff_ids"] == [oci.sha256_digest(gzip.decompress(layer.data))]
    manifest = json.loads(image.manifest.data)
    assert manifest["config"] == {
        "mediaType": oci.MEDIA_CONFIG,
        "digest": image.config.digest,
        "size": len(image.config.data),
    }
    assert manifest["layers"][0]["mediaType"] == oci.MEDIA_LAYER_GZIP


def test_gzip_cache_returns_the_same_blob(tmp_path: Path) -> None:
    data = b"layer" * 1000
    fresh = oci.gzip_layer(data, tmp_path)
    assert len(list(tmp_path.iterdir())) == 1
    assert oci.gzip_layer(data, tmp_path).data == fresh.data == oci.gzip_layer(data).data


def test_archive_is_deterministic_and_indexed(tmp_path: Path) -> None:
    image = image_from(tree(tmp_path / "t"))
    a, b = tmp_path / "a.oci.tar", tmp_path / "b.oci.tar"
    oci.write_archive(image, a, EPOCH)
    oci.write_archive(image, b, EPOCH)
    assert a.read_bytes() == b.read_bytes()
    index = oci.read_archive_index(a)
    manifests = index["manifests"]
    assert isinstance(manifests, list)
    assert manifests[0]["digest"] == image.digest
    assert manifests[0]["annotations"][oci.REF_NAME] == "1.2.3"
    (tmp_path / "junk.tar").write_bytes(b"junk")
    with pytest.raises(oci.OciError, match="not an OCI image archive"):
        oci.read_archive_index(tmp_path / "junk.tar")


def test_skopeo_and_umoci_read_the_archive(tmp_path: Path) -> None:
    for tool in ("skopeo", "umoci"):
        if shutil.which(tool) is None:
            missing(f"{tool} not installed (make debian-deps)")
    image = image_from(tree(tmp_path / "t"))
    archive = tmp_path / "img.oci.tar"
    oci.write_archive(image, archive, EPOCH)
    inspect = subprocess.run(
        ["skopeo", "inspect", f"oci-archive:{archive}:1.2.3"], capture_output=True, text=True, check=False
    )
    assert inspect.returncode == 0, inspect.stderr
    assert json.loads(inspect.stdout)["Digest"] == image.digest
    layout = tmp_path / "layout"
    oci.write_layout(image, layout)
    bundle = tmp_path / "bundle"
    unpacked = subprocess.run(
        ["umoci", "unpack", "--rootless", "--image", f"{layout}:1.2.3", str(bundle)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert unpacked.returncode == 0, unpacked.stderr
    assert (bundle / "rootfs" / "etc" / "a.conf").read_text() == "a\n"
    runtime = json.loads((bundle / "config.json").read_text())
    assert runtime["process"]["args"] == ["/usr/local/bin/hello"]
