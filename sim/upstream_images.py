"""The images of the upstream controllers whose charts the stack installs, built offline for the real node.

Upstream publishes each from its repository's ``Dockerfile`` as one static Go binary in an otherwise empty image
(``FROM scratch`` or distroless ``static:nonroot``). ``tools/build.sh`` builds the same binaries from the same
modules into the tool cache (``CGO_ENABLED=0``, upstream's version flag); this module lays each into an image of
upstream's shape — the binary at upstream's path, upstream's user, entrypoint and command — under upstream's name
at the release ``tools/<tool>/go.mod`` pins, so the chart's pod runs on the real node with nothing pulled, as from
a registry mirror:

- the descheduler (``registry.k8s.io/descheduler/descheduler``): ``/bin/descheduler``, ``USER 1000``, ``FROM
  scratch``;
- Kueue (``registry.k8s.io/kueue/kueue``) and JobSet (``registry.k8s.io/jobset/jobset``): ``/manager``, ``USER
  65532:65532``, ``ENTRYPOINT ["/manager"]``, on distroless ``static:nonroot``.

What distroless adds besides the binary and what is modelled here: ``/tmp`` (mode 1777; the charts mount the
webhook certificate below it) and the ``nonroot`` user's ``/etc/passwd`` entry. Not modelled: distroless' CA
bundle and time zone data, which neither controller reads (they trust the ServiceAccount's CA, and log in UTC).

A stack naming another release than the one built here is refused by ``sim/processes.py`` (the pod could not
start: nothing is pulled).

``python sim/upstream_images.py NAME OUT.oci.tar`` writes one archive and prints its reference.
"""

from __future__ import annotations

import hashlib
import re
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from images import oci
from sim.daemon_runtime import tools_bin

ROOT = Path(__file__).resolve().parent.parent
#: The layer's and config's date: fixed, so the digest depends on the binary alone.
EPOCH = 0
#: distroless' ``nonroot`` user (``static:nonroot``), the user Kueue's and JobSet's images run as.
NONROOT_PASSWD = b"root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
NONROOT_GROUP = b"root:x:0:\nnonroot:x:65532:\n"


class UpstreamImageError(RuntimeError):
    """An image could not be built; the message says which and why."""


@dataclass(frozen=True)
class UpstreamImage:
    """One upstream controller's image, in the shape its ``Dockerfile`` gives it."""

    #: The binary's name in the tool cache and the directory ``tools/<tool>`` that pins its module.
    tool: str
    module: str
    repository: str
    #: Where the binary sits in the image (no leading slash).
    path: str
    user: str
    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...]
    #: distroless ``static:nonroot`` (``/tmp``, ``/etc/passwd``), or ``FROM scratch``.
    distroless: bool

    @property
    def group(self) -> Path:
        return ROOT / "tools" / self.tool

    def pinned_version(self, group: Path | None = None) -> str:
        """The release ``tools/<tool>/go.mod`` requires (``v0.19.2``)."""
        go_mod = (group or self.group) / "go.mod"
        try:
            text = go_mod.read_text(encoding="utf-8")
        except OSError as exc:
            raise UpstreamImageError(f"{go_mod}: {exc.strerror or exc}") from None
        found = re.search(rf"^\s*{re.escape(self.module)}\s+(v\S+)", text, re.MULTILINE)
        if found is None:
            raise UpstreamImageError(f"{go_mod} requires no {self.module}")
        return found.group(1)

    def image_name(self, group: Path | None = None) -> str:
        """The reference the image is imported as: upstream's repository at the pinned release."""
        return f"{self.repository}:{self.pinned_version(group)}"


DESCHEDULER = UpstreamImage(
    tool="descheduler",
    module="sigs.k8s.io/descheduler",
    repository="registry.k8s.io/descheduler/descheduler",
    path="bin/descheduler",
    user="1000",
    entrypoint=(),
    cmd=("/bin/descheduler", "--help"),
    distroless=False,
)
KUEUE = UpstreamImage(
    tool="kueue",
    module="sigs.k8s.io/kueue",
    repository="registry.k8s.io/kueue/kueue",
    path="manager",
    user="65532:65532",
    entrypoint=("/manager",),
    cmd=(),
    distroless=True,
)
JOBSET = UpstreamImage(
    tool="jobset",
    module="sigs.k8s.io/jobset",
    repository="registry.k8s.io/jobset/jobset",
    path="manager",
    user="65532:65532",
    entrypoint=("/manager",),
    cmd=(),
    distroless=True,
)
#: Every upstream image the real node imports, by tool name.
ALL = {spec.tool: spec for spec in (DESCHEDULER, KUEUE, JOBSET)}


def build(spec: UpstreamImage, archive: Path, binary: Path | None = None) -> str:
    """Write ``spec``'s image to ``archive`` (skipped when one of the same binary is there); its name."""
    name = spec.image_name()
    binary = binary or tools_bin() / spec.tool
    if not binary.is_file():
        raise UpstreamImageError(f"{binary} not found: run make tools (it builds {spec.tool} from {spec.module})")
    key = hashlib.sha256(binary.read_bytes() + name.encode()).hexdigest()[:16]
    stamp = archive.with_name(archive.name + ".source")
    if archive.is_file() and stamp.is_file() and stamp.read_text(encoding="utf-8").strip() == key:
        return name
    version = name.rsplit(":", 1)[1]
    layer = oci.Layer(f"{spec.tool} {version}, built by tools/build.sh from {spec.module}@{version} (static)")
    if spec.distroless:
        layer.add(oci.Entry("tmp", "dir", 0o1777))
        layer.add(oci.Entry("home/nonroot", "dir", 0o700, uid=65532, gid=65532))
        layer.add(oci.Entry("etc/passwd", "file", 0o644, data=NONROOT_PASSWD))
        layer.add(oci.Entry("etc/group", "file", 0o644, data=NONROOT_GROUP))
    layer.add(oci.Entry(spec.path, "file", 0o755, source=binary))
    config = oci.ImageConfig(
        user=spec.user,
        entrypoint=spec.entrypoint,
        cmd=spec.cmd,
        env=("PATH=/usr/local/bin:/usr/bin:/bin" if spec.distroless else "PATH=/bin",),
        labels={"org.opencontainers.image.version": version},
    )
    image = oci.assemble(
        version,
        [(layer.comment, layer.tar(EPOCH))],
        config=config,
        epoch=EPOCH,
        annotations={"org.opencontainers.image.source": f"{spec.module}@{version}"},
    )
    archive.parent.mkdir(parents=True, exist_ok=True)
    oci.write_archive(image, archive, EPOCH)
    stamp.write_text(key + "\n", encoding="utf-8")
    return name


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ALL:
        print(f"usage: sim/upstream_images.py {{{','.join(ALL)}}} OUT.oci.tar", file=sys.stderr)
        return 2
    try:
        print(build(ALL[argv[0]], Path(argv[1])))
    except UpstreamImageError as e:
        print(f"sim/upstream_images.py: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
