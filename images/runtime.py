"""Run a command inside a built image's own root filesystem, as a kubelet's runtime would: ``umoci unpack``
turns the archive into a runtime bundle (the image's user, environment, working directory and entry point in its
``config.json``), and ``runc`` runs it.

What a pod adds is added here too: the root filesystem read-only with an empty ``/tmp`` (the components set
``readOnlyRootFilesystem`` and mount an emptyDir there), read-only bind mounts for what a pod mounts (settings,
a host path), and the host's network, so a test on this machine reaches what the process serves.

Needs root, runc and umoci (``tools/install-debian-deps.sh``). crun 1.8 (Debian bookworm) refuses a hybrid cgroup
hierarchy such as this machine's; runc runs there.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from images.oci import OciError, read_archive_index


class ContainerError(RuntimeError):
    """The image could not be unpacked or run; the message says which tool failed and why."""


@dataclass(frozen=True)
class Bundle:
    """An unpacked image: its root filesystem and the runtime config umoci derived from the image config."""

    directory: Path
    config: Mapping[str, Any]

    @property
    def rootfs(self) -> Path:
        return self.directory / "rootfs"

    @property
    def process(self) -> Mapping[str, Any]:
        value = self.config.get("process")
        return value if isinstance(value, Mapping) else {}

    @property
    def image_args(self) -> list[str]:
        """Entry point and command as the image gives them."""
        return [str(a) for a in self.process.get("args") or []]


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise ContainerError(f"{name} is not installed (make debian-deps installs it)")
    return path


def unpack(archive: Path, into: Path) -> Bundle:
    """The archive's image as a runtime bundle at ``into`` (made anew)."""
    index = read_archive_index(archive)
    manifests = index.get("manifests")
    if not isinstance(manifests, list) or not manifests:
        raise OciError(f"{archive}: index.json lists no image")
    tag = manifests[0].get("annotations", {}).get("org.opencontainers.image.ref.name")
    if not tag:
        raise OciError(f"{archive}: the image in index.json has no tag")
    if into.exists():
        shutil.rmtree(into)
    layout = into.with_name(into.name + "-layout")
    if layout.exists():
        shutil.rmtree(layout)
    layout.mkdir(parents=True)
    with tarfile.open(archive) as tar:
        tar.extractall(layout, filter="data")
    proc = subprocess.run(
        [_tool("umoci"), "unpack", "--image", f"{layout}:{tag}", str(into)], capture_output=True, text=True, check=False
    )
    shutil.rmtree(layout)
    if proc.returncode != 0:
        raise ContainerError(f"umoci unpack {archive.name}: {proc.stderr.strip()[-600:]}")
    return Bundle(into, json.loads((into / "config.json").read_text(encoding="utf-8")))


def _container_config(
    bundle: Bundle, args: Sequence[str], env: Mapping[str, str], binds: Mapping[str, Path]
) -> dict[str, Any]:
    config: dict[str, Any] = json.loads(json.dumps(bundle.config))
    config["root"] = {"path": str(bundle.rootfs.resolve()), "readonly": True}
    process = config["process"]
    process["args"] = list(args)
    process["terminal"] = False
    process["env"] = [*process.get("env", []), *(f"{k}={v}" for k, v in env.items())]
    # The host's network: the process serves on this machine's loopback, as with hostNetwork.
    config["linux"]["namespaces"] = [n for n in config["linux"]["namespaces"] if n.get("type") != "network"]
    config["mounts"] = [
        *(m for m in config.get("mounts", []) if m.get("destination") != "/tmp"),
        {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "size=64m"]},
        *(
            {"destination": dest, "type": "bind", "source": str(src.resolve()), "options": ["rbind", "ro"]}
            for dest, src in binds.items()
        ),
    ]
    return config


class Container:
    """One process in the image; :meth:`run` waits for it, :meth:`start` leaves it running until :meth:`stop`."""

    def __init__(
        self,
        bundle: Bundle,
        args: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        binds: Mapping[str, Path] | None = None,
    ) -> None:
        self.bundle = bundle
        self.id = f"gpucluster-{uuid.uuid4().hex[:12]}"
        self.directory = bundle.directory.parent / f"{bundle.directory.name}-{self.id}"
        self.directory.mkdir()
        config = _container_config(bundle, args, env or {}, binds or {})
        (self.directory / "config.json").write_text(json.dumps(config), encoding="utf-8")
        self._proc: subprocess.Popen[str] | None = None

    def _argv(self) -> list[str]:
        return [_tool("runc"), "run", "--bundle", str(self.directory), self.id]

    def run(self, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(self._argv(), capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            self._kill()
            raise ContainerError(f"{self.id} ({' '.join(self.bundle.image_args[:1])}) ran past {timeout} s") from None
        finally:
            self._cleanup()

    def start(self) -> None:
        self._proc = subprocess.Popen(self._argv(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def stop(self) -> str:
        """Stop the process (SIGTERM, then SIGKILL after 10 s) and return what it printed."""
        out = ""
        if self._proc is not None:
            subprocess.run([_tool("runc"), "kill", self.id, "TERM"], capture_output=True, check=False)
            try:
                out, _ = self._proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                self._kill()
                out, _ = self._proc.communicate(timeout=10)
        self._cleanup()
        return out

    def _kill(self) -> None:
        subprocess.run([_tool("runc"), "kill", self.id, "KILL"], capture_output=True, check=False)

    def _cleanup(self) -> None:
        subprocess.run([_tool("runc"), "delete", "--force", self.id], capture_output=True, check=False)
        shutil.rmtree(self.directory, ignore_errors=True)
