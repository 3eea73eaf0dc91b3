"""The descheduler's image for the real node, built offline from the descheduler module the tools pin.

Upstream builds ``registry.k8s.io/descheduler/descheduler`` from its repository's ``Dockerfile``: ``make build`` (a
static Go binary, its version set in ``sigs.k8s.io/descheduler/pkg/version``) copied to ``/bin/descheduler`` in an
image ``FROM scratch``, ``USER 1000``, ``CMD ["/bin/descheduler", "--help"]``. ``tools/build.sh`` builds that binary
from the same module into the tool cache (``CGO_ENABLED=0``, the same version flag); this module lays it into an
image of the same shape, under upstream's name at the release ``tools/descheduler`` pins, so the chart's pod runs on
the real node with nothing pulled, as from a registry mirror. A stack naming another release of it is refused by
``sim/processes.py`` (the pod could not start here).

``python sim/descheduler_image.py OUT.oci.tar`` writes the archive and prints its reference.
"""

from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from images import oci
from sim.daemon_runtime import tools_bin

ROOT = Path(__file__).resolve().parent.parent
TOOL_GROUP = ROOT / "tools" / "descheduler"
MODULE = "sigs.k8s.io/descheduler"
REPOSITORY = "registry.k8s.io/descheduler/descheduler"
#: Upstream's image runs as this user (its Dockerfile's ``USER 1000``).
USER = "1000"
#: The layer's and config's date: fixed, so the digest depends on the binary alone.
EPOCH = 0


class DeschedulerImageError(RuntimeError):
    """The image could not be built; the message says which step and why."""


def pinned_version(group: Path = TOOL_GROUP) -> str:
    """The descheduler release ``tools/descheduler/go.mod`` requires (``v0.36.0``)."""
    try:
        text = (group / "go.mod").read_text(encoding="utf-8")
    except OSError as exc:
        raise DeschedulerImageError(f"{group / 'go.mod'}: {exc}") from None
    found = re.search(rf"^\s*{re.escape(MODULE)}\s+(v\S+)", text, re.MULTILINE)
    if found is None:
        raise DeschedulerImageError(f"{group / 'go.mod'} requires no {MODULE}")
    return found.group(1)


def image_name(group: Path = TOOL_GROUP) -> str:
    """The reference the image is imported as: upstream's repository at the pinned release."""
    return f"{REPOSITORY}:{pinned_version(group)}"


def build(archive: Path, binary: Path | None = None) -> str:
    """Write the image to ``archive`` (skipped when one of the same binary is there); its name."""
    name = image_name()
    binary = binary or tools_bin() / "descheduler"
    if not binary.is_file():
        raise DeschedulerImageError(f"{binary} not found: run make tools (it builds the descheduler from {MODULE})")
    key = hashlib.sha256(binary.read_bytes() + name.encode()).hexdigest()[:16]
    stamp = archive.with_name(archive.name + ".source")
    if archive.is_file() and stamp.is_file() and stamp.read_text(encoding="utf-8").strip() == key:
        return name
    version = name.rsplit(":", 1)[1]
    layer = oci.Layer(f"descheduler {version}, built by tools/build.sh from {MODULE}@{version} (static)")
    layer.add(oci.Entry("bin/descheduler", "file", 0o755, source=binary))
    config = oci.ImageConfig(
        user=USER,
        entrypoint=(),
        cmd=("/bin/descheduler", "--help"),
        env=("PATH=/bin",),
        labels={"org.opencontainers.image.version": version},
    )
    image = oci.assemble(
        version,
        [(layer.comment, layer.tar(EPOCH))],
        config=config,
        epoch=EPOCH,
        annotations={"org.opencontainers.image.source": f"{MODULE}@{version}"},
    )
    archive.parent.mkdir(parents=True, exist_ok=True)
    oci.write_archive(image, archive, EPOCH)
    stamp.write_text(key + "\n", encoding="utf-8")
    return name


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: sim/descheduler_image.py OUT.oci.tar")
    try:
        print(build(Path(sys.argv[1])))
    except DeschedulerImageError as e:
        sys.exit(f"sim/descheduler_image.py: error: {e}")
