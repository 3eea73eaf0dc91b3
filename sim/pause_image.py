"""The pod sandbox's ``pause`` image of the real node, built offline from the Kubernetes module the kubelet is.

Upstream builds ``registry.k8s.io/pause`` from ``build/pause/linux/pause.c`` of the kubernetes repository with
``$(CC) -Os -Wall -Werror -static -DVERSION=...``; that file ships in the ``k8s.io/kubernetes`` module
``tools/kubelet`` pins, so the image is built from the module cache, never pulled: one static binary ``/pause`` as
the entrypoint, running as 65535 as upstream's does, in an OCI archive written by ``images.oci`` (byte for byte the
same from the same source). The tag is the sandbox image containerd's CRI plugin is configured with
(``sim/node.py``).

``python sim/pause_image.py OUT.oci.tar`` writes the archive and prints its reference.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from images import oci

ROOT = Path(__file__).resolve().parent.parent
KUBELET_GROUP = ROOT / "tools" / "kubelet"
PAUSE_SOURCE = "build/pause/linux/pause.c"
#: The name and tag the CRI plugin runs every sandbox from (upstream's for Kubernetes 1.36).
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
#: Upstream's pause image runs as this user.
PAUSE_USER = "65535:65535"
#: The layer's and config's date: fixed, so the digest depends on the source alone.
EPOCH = 0


class PauseImageError(RuntimeError):
    """The pause image could not be built; the message says which step and why."""


def kubernetes_module_dir() -> Path:
    """The k8s.io/kubernetes module's directory in the module cache (downloaded through the proxy if needed)."""
    env = {**os.environ, "GOFLAGS": "-mod=readonly", "GOTOOLCHAIN": "local"}
    try:
        done = subprocess.run(
            ["go", "mod", "download", "-json", "k8s.io/kubernetes"],
            cwd=KUBELET_GROUP,
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PauseImageError(f"go mod download k8s.io/kubernetes: {exc} (Go >= 1.26 is needed)") from None
    try:
        info = json.loads(done.stdout)
        directory = Path(info["Dir"])
    except (ValueError, KeyError, TypeError):
        raise PauseImageError(
            f"go mod download k8s.io/kubernetes in {KUBELET_GROUP} failed: {done.stderr.strip()[:300]}"
        ) from None
    if not (directory / PAUSE_SOURCE).is_file():
        raise PauseImageError(f"{directory / PAUSE_SOURCE} is missing from the module")
    return directory


def compile_pause(source: Path, out: Path, version: str) -> None:
    argv = ["cc", "-Os", "-Wall", "-Werror", "-static", f"-DVERSION={version}", "-o", str(out), str(source)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PauseImageError(f"{argv[0]}: {exc} (a C compiler and libc's static library are needed)") from None
    if done.returncode != 0:
        raise PauseImageError(f"{' '.join(argv)} failed: {done.stderr.strip()[:500]}")
    subprocess.run(["strip", str(out)], capture_output=True, check=False)


def build(archive: Path) -> str:
    """Write the pause image to ``archive`` (skipped when one from the same source is there); its reference."""
    module = kubernetes_module_dir()
    source = module / PAUSE_SOURCE
    version = module.name.rsplit("@", 1)[-1]
    key = hashlib.sha256(source.read_bytes() + version.encode()).hexdigest()[:16]
    stamp = archive.with_name(archive.name + ".source")
    if archive.is_file() and stamp.is_file() and stamp.read_text(encoding="utf-8").strip() == key:
        return PAUSE_IMAGE
    with tempfile.TemporaryDirectory(prefix="pause-") as tmp:
        binary = Path(tmp) / "pause"
        compile_pause(source, binary, version)
        layer = oci.Layer(f"pause from {source.relative_to(module)} of k8s.io/kubernetes {version}")
        layer.add(oci.Entry("pause", "file", 0o755, source=binary))
        config = oci.ImageConfig(
            user=PAUSE_USER,
            entrypoint=("/pause",),
            cmd=(),
            env=(),
            labels={"org.opencontainers.image.version": version},
        )
        image = oci.assemble(
            PAUSE_IMAGE.rsplit(":", 1)[1],
            [(layer.comment, layer.tar(EPOCH))],
            config=config,
            epoch=EPOCH,
            annotations={"org.opencontainers.image.source": f"k8s.io/kubernetes@{version}/{PAUSE_SOURCE}"},
        )
        oci.write_archive(image, archive, EPOCH)
    stamp.write_text(key + "\n", encoding="utf-8")
    return PAUSE_IMAGE


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: sim/pause_image.py OUT.oci.tar", file=sys.stderr)
        return 2
    try:
        print(build(Path(args[0])))
    except (PauseImageError, oci.OciError, OSError) as exc:
        print(f"pause image: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
