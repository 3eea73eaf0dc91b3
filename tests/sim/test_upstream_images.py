"""sim/upstream_images.py: the upstream charts' controller images for the real node, each in upstream's shape (one
static binary at upstream's path, upstream's user and entrypoint) under upstream's name at the release the tools
pin, built once per binary."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from contract.descheduler_settings import DESCHEDULER_IMAGE
from contract.jobset_settings import JOBSET_CHART_VERSION, JobSetSettings
from contract.queues_settings import KUEUE_CHART_VERSION, KueueSettings
from sim import upstream_images
from sim.upstream_images import DESCHEDULER, JOBSET, KUEUE, UpstreamImageError, build


def _member(archive: Path, name: str) -> bytes:
    with tarfile.open(archive) as tar:
        member = tar.extractfile(name)
        assert member is not None
        return member.read()


def _image(archive: Path) -> tuple[dict[str, object], tarfile.TarFile]:
    """The image's config and its one layer."""
    index = json.loads(_member(archive, "index.json"))
    manifest = json.loads(_member(archive, "blobs/sha256/" + index["manifests"][0]["digest"].removeprefix("sha256:")))
    config = json.loads(_member(archive, "blobs/sha256/" + manifest["config"]["digest"].removeprefix("sha256:")))
    (layer,) = manifest["layers"]
    blob = _member(archive, "blobs/sha256/" + layer["digest"].removeprefix("sha256:"))
    return config, tarfile.open(fileobj=io.BytesIO(blob))


def test_each_image_is_the_release_the_tools_pin_and_the_stacks_default_names() -> None:
    assert DESCHEDULER.image_name() == "registry.k8s.io/descheduler/descheduler:v0.36.0" == DESCHEDULER_IMAGE
    # Kueue's and JobSet's default images follow their charts' releases, which the tools pin too.
    assert (
        KUEUE.image_name() == f"registry.k8s.io/kueue/kueue:v{KUEUE_CHART_VERSION}" == KueueSettings().controller_image
    )
    assert (
        JOBSET.image_name()
        == f"registry.k8s.io/jobset/jobset:v{JOBSET_CHART_VERSION}"
        == JobSetSettings().controller_image
    )


def test_a_tool_group_requiring_no_such_module_is_refused(tmp_path: Path) -> None:
    (tmp_path / "go.mod").write_text("module x\n\ngo 1.26.0\n")
    with pytest.raises(UpstreamImageError, match=r"requires no sigs\.k8s\.io/kueue"):
        KUEUE.pinned_version(tmp_path)


def test_the_descheduler_goes_to_bin_descheduler_run_as_upstreams_user(tmp_path: Path) -> None:
    binary = tmp_path / "descheduler"
    binary.write_bytes(b"\x7fELF not really")
    archive = tmp_path / "out" / "descheduler.oci.tar"
    assert build(DESCHEDULER, archive, binary) == "registry.k8s.io/descheduler/descheduler:v0.36.0"
    config, layer = _image(archive)
    assert config["config"] == {**config["config"], "User": "1000", "Cmd": ["/bin/descheduler", "--help"]}  # type: ignore[dict-item]
    assert layer.getnames() == ["bin", "bin/descheduler"]
    member = layer.getmember("bin/descheduler")
    assert member.mode & 0o777 == 0o755
    extracted = layer.extractfile(member)
    assert extracted is not None
    assert extracted.read() == b"\x7fELF not really"


@pytest.mark.parametrize("spec", [KUEUE, JOBSET], ids=["kueue", "jobset"])
def test_kueue_and_jobset_are_slash_manager_as_distroless_nonroot(
    tmp_path: Path, spec: upstream_images.UpstreamImage
) -> None:
    binary = tmp_path / spec.tool
    binary.write_bytes(b"manager")
    archive = tmp_path / f"{spec.tool}.oci.tar"
    build(spec, archive, binary)
    config, layer = _image(archive)
    process = config["config"]
    assert isinstance(process, dict)
    assert process["User"] == "65532:65532"
    assert process["Entrypoint"] == ["/manager"]
    assert layer.getmember("manager").mode & 0o777 == 0o755
    # The charts mount the webhook certificate under /tmp on a read-only root: distroless has it, world-writable.
    tmp = layer.getmember("tmp")
    assert tmp.isdir()
    assert tmp.mode & 0o7777 == 0o1777
    passwd = layer.extractfile("etc/passwd")
    assert passwd is not None
    assert b"nonroot:x:65532:65532:" in passwd.read()


def test_the_same_binary_is_not_built_again_and_a_new_one_is(tmp_path: Path) -> None:
    binary = tmp_path / "kueue"
    binary.write_bytes(b"one")
    archive = tmp_path / "kueue.oci.tar"
    build(KUEUE, archive, binary)
    first, contents = archive.stat().st_mtime_ns, archive.read_bytes()
    build(KUEUE, archive, binary)
    assert archive.stat().st_mtime_ns == first, "the same binary was built into an image again"
    binary.write_bytes(b"two")
    build(KUEUE, archive, binary)
    assert archive.read_bytes() != contents, "a new binary left the old image"


def test_without_the_tools_built_it_says_run_make_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(upstream_images, "tools_bin", lambda: tmp_path / "empty")
    with pytest.raises(UpstreamImageError, match="jobset not found: run make tools"):
        build(JOBSET, tmp_path / "jobset.oci.tar")


def test_the_cli_names_what_it_builds_and_refuses_an_unknown_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "descheduler").write_bytes(b"x")
    monkeypatch.setattr(upstream_images, "tools_bin", lambda: tmp_path)
    assert upstream_images.main(["descheduler", str(tmp_path / "d.oci.tar")]) == 0
    assert capsys.readouterr().out == "registry.k8s.io/descheduler/descheduler:v0.36.0\n"
    assert upstream_images.main(["kube-proxy", str(tmp_path / "k.oci.tar")]) == 2
    assert "usage: sim/upstream_images.py {descheduler,kueue,jobset}" in capsys.readouterr().err
