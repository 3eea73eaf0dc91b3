"""The images the stacks reference, and what goes into each.

Two images, one per language, named by the stack scheme (``contract/images_settings.py``):

``gpucluster-daemons``
    Every Python daemon of the project (the ``gpucluster-*`` console scripts). Layers: a Debian base built by
    mmdebstrap (Essential packages, Python 3.11's interpreter and standard library, CA certificates), the daemons'
    third-party wheels exactly as ``images/daemons.lock`` pins them, and the project's own wheel.
``gpucluster-virtual-node``
    The Go programs, built static (``CGO_ENABLED=0``): the virtual node (the entrypoint) and the metrics adapter
    (``gpucluster-metrics-adapter``, the command its Deployment names). Layers: the accounts, ``/tmp`` and the CA
    bundle of the Debian base, and the binaries. No shell, no package manager, no libc.

Both run as ``contract.constants.NONROOT_UID`` (nobody), the user the components' pod security contexts ask for.
"""

from __future__ import annotations

from dataclasses import dataclass

from contract.images_settings import DAEMONS_IMAGE, VIRTUAL_NODE_IMAGE

DEBIAN_SUITE = "bookworm"
#: The base's package sources: the release, its point-release updates and its security updates.
DEBIAN_SOURCES = (
    "deb http://deb.debian.org/debian bookworm main",
    "deb http://deb.debian.org/debian bookworm-updates main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
)
#: Beyond the Essential set: the interpreter, the standard library (ssl, json, http, asyncio...) and the CA store.
PYTHON_BASE_PACKAGES = ("python3-minimal", "libpython3.11-stdlib", "ca-certificates")
#: What a running daemon never reads: manuals, translations, docs (their copyright files stay).
DPKG_OPTIONS = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
)
#: The date of the files the base's package scripts write. It is part of the base's cache key: change it, or the
#: package lists above, and the base is built again (``--refresh-base`` does so without a change).
BASE_EPOCH = 1764547200  # 2025-12-01T00:00:00Z

#: Where Debian's Python 3.11 looks for packages installed outside the package manager, and the interpreter.
PYTHON_SITE = "usr/local/lib/python3.11/dist-packages"
PYTHON_INTERPRETER = "/usr/bin/python3"
PYTHON_ENV = (
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "PYTHONDONTWRITEBYTECODE=1",
    "PYTHONUNBUFFERED=1",
    "LANG=C.UTF-8",
)

#: The Go module of the virtual node and the metrics adapter, and each main package with where its binary goes.
GO_MODULE_DIR = "virtualnode"
GO_BINARY = "/usr/local/bin/gpucluster-virtual-node"
GO_PROGRAMS = (
    ("./cmd/gpucluster-virtual-node", GO_BINARY),
    ("./cmd/gpucluster-metrics-adapter", "/usr/local/bin/gpucluster-metrics-adapter"),
)


@dataclass(frozen=True)
class ImageDefinition:
    name: str
    kind: str  # "python" or "go"
    description: str
    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...]
    env: tuple[str, ...]
    exposed_ports: tuple[int, ...] = ()


DEFINITIONS: dict[str, ImageDefinition] = {
    DAEMONS_IMAGE: ImageDefinition(
        name=DAEMONS_IMAGE,
        kind="python",
        description="gpucluster's Python daemons: fabric exporter, burst provider and the controllers",
        # The components set each container's command to one of the console scripts.
        entrypoint=(),
        cmd=("gpucluster-fabric-exporter", "--help"),
        env=PYTHON_ENV,
    ),
    VIRTUAL_NODE_IMAGE: ImageDefinition(
        name=VIRTUAL_NODE_IMAGE,
        kind="go",
        description="gpucluster's virtual-kubelet node for rented GPUs",
        entrypoint=(GO_BINARY,),
        cmd=(),
        env=("PATH=/usr/local/bin",),
        exposed_ports=(10298,),
    ),
}
