"""Build every image the stacks reference into OCI image archives, without a container engine.

``python -m images build`` (``make images``) writes, under ``--out`` (default ``.state/images``):

- ``<name>.oci.tar``: the image as an OCI image layout in one tar (``skopeo copy oci-archive:...`` pushes it);
- ``digests.json``: name -> reference, digest, size and layer sizes, which ``python -m images pin`` writes into a
  stack and the entry-point test reads.

The same source tree, lock file and Debian base give the same digests: the timestamp of every file is the commit's
(``SOURCE_DATE_EPOCH``, by default ``git log -1 --format=%ct``), and the labels carry the commit.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from contract.constants import NONROOT_UID
from contract.images_settings import ImagesSettings, project_version
from daemons.image import pinned_requirements
from images import oci
from images.definitions import (
    BASE_EPOCH,
    DEFINITIONS,
    GO_MODULE_DIR,
    GO_PROGRAMS,
    PYTHON_BASE_PACKAGES,
    ImageDefinition,
)
from images.steps import (
    BuildError,
    base_packages,
    debian_base,
    download_locked,
    go_binary,
    install_wheels,
    locked_versions,
    project_wheel,
    read_from_base,
)

ROOT = Path(__file__).resolve().parent.parent
LOCK = Path(__file__).resolve().parent / "daemons.lock"
DEFAULT_CACHE = Path.home() / ".cache" / "gpucluster" / "images"
DEFAULT_OUT = ROOT / ".state" / "images"
DIGESTS_FILE = "digests.json"
#: Bumped when the way the third-party layer is made changes (its cache key).
DEPS_LAYER_FORMAT = b"deps-layer-1"


@dataclass(frozen=True)
class Provenance:
    """What the labels say about where an image came from."""

    version: str
    revision: str
    source: str
    epoch: int
    dirty: bool = False


@dataclass
class Built:
    definition: ImageDefinition
    reference: str
    image: oci.Image
    archive: Path
    seconds: float
    steps: dict[str, float] = field(default_factory=dict)
    #: ``name=version`` of every Debian package in the image (none in the Go image).
    packages: list[str] = field(default_factory=list)

    def record(self) -> dict[str, object]:
        return {
            "reference": self.reference,
            "digest": self.image.digest,
            "size": self.image.size,
            "layers": [{"digest": b.digest, "size": len(b.data)} for b in self.image.layers],
            "archive": self.archive.name,
            "seconds": round(self.seconds, 1),
            "steps": {k: round(v, 1) for k, v in self.steps.items()},
            "debianPackages": self.packages,
        }


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def provenance(source: str | None = None, epoch: int | None = None) -> Provenance:
    """The project's version, the commit and its time, and the source URL (pyproject's ``project.urls.Source``)."""
    revision = _git("rev-parse", "HEAD") or "unknown"
    commit_time = _git("log", "-1", "--format=%ct")
    if epoch is None:
        epoch = int(commit_time) if commit_time.isdigit() else 0
    if source is None:
        urls = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"].get("urls", {})
        source = str(urls.get("Source", "unknown"))
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
    return Provenance(project_version(), revision, source, epoch, dirty)


def labels(definition: ImageDefinition, prov: Provenance) -> dict[str, str]:
    """The OCI image-spec's pre-defined annotation keys, as image labels (and manifest annotations)."""
    return {
        "org.opencontainers.image.title": definition.name,
        "org.opencontainers.image.description": definition.description,
        "org.opencontainers.image.version": prov.version,
        "org.opencontainers.image.revision": prov.revision,
        "org.opencontainers.image.source": prov.source,
        "org.opencontainers.image.created": oci.rfc3339(prov.epoch),
    }


def check_lock(lock: Path = LOCK, pyproject: Path = ROOT / "pyproject.toml") -> None:
    """The lock pins exactly the versions pyproject.toml pins for the daemons (else: ``python -m images lock``)."""
    if not lock.is_file():
        raise BuildError(f"{lock} is missing: python -m images lock writes it")
    locked = locked_versions(lock)
    for req in pinned_requirements(pyproject):
        name, _, version = req.partition("==")
        key = name.lower().replace("_", "-")
        if locked.get(key) != version:
            raise BuildError(
                f"{lock.name} pins {key}=={locked.get(key, '(nothing)')} where pyproject.toml pins {version}: "
                "run `python -m images lock`"
            )


def _deps_layer(cache: Path, work: Path, tick: Callable[[str], None]) -> tuple[str, bytes]:
    """The third-party wheels as a layer, dated like the base and cached by the lock's content: a release that
    changes no pin shares this layer (and the base) with the one before, so a node pulls only the project's."""
    check_lock()
    key = hashlib.sha256(b"\n".join([LOCK.read_bytes(), str(BASE_EPOCH).encode(), DEPS_LAYER_FORMAT])).hexdigest()[:16]
    cached = cache / "layers" / f"deps-{key}.tar"
    comment = f"third-party wheels ({len(locked_versions(LOCK))}, images/daemons.lock)"
    if cached.is_file():
        tick("third-party wheels, cached")
        return comment, cached.read_bytes()
    wheels = download_locked(LOCK, cache / "wheels")
    tick("wheels")
    deps = work / "deps"
    install_wheels(wheels, deps)
    layer = oci.Layer(comment)
    layer.tree(deps)
    # The components' exec probes run `python -c ...`; Debian names the interpreter python3 only.
    layer.symlink("usr/local/bin/python", "/usr/bin/python3")
    data = layer.tar(BASE_EPOCH)
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_name(f"{cached.name}.{os.getpid()}.partial")
    tmp.write_bytes(data)
    tmp.replace(cached)
    tick("install wheels")
    return comment, data


def _python_layers(
    cache: Path, work: Path, base: Path, epoch: int, tick: Callable[[str], None]
) -> list[tuple[str, bytes]]:
    deps = _deps_layer(cache, work, tick)
    app = work / "app"
    install_wheels([project_wheel(ROOT, work / "wheel")], app)
    app_layer = oci.Layer("gpucluster wheel")
    app_layer.tree(app)
    tick("project wheel")
    return [("debian bookworm base (mmdebstrap)", base.read_bytes()), deps, (app_layer.comment, app_layer.tar(epoch))]


def _go_layers(work: Path, base: Path, prov: Provenance, tick: Callable[[str], None]) -> list[tuple[str, bytes]]:
    static = oci.Layer("accounts, /tmp and CA certificates (from the Debian base)")
    static.file(
        "etc/passwd", b"root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"
    )
    static.file("etc/group", b"root:x:0:\nnogroup:x:65534:\n")
    static.file("etc/ssl/certs/ca-certificates.crt", read_from_base(base, "etc/ssl/certs/ca-certificates.crt"))
    static.directory("tmp", 0o1777)
    app = oci.Layer("gpucluster-virtual-node and gpucluster-metrics-adapter (go build, static)")
    for package, path in GO_PROGRAMS:
        binary = go_binary(ROOT / GO_MODULE_DIR, package, work / "bin" / Path(path).name, prov.version)
        tick(f"go build {Path(path).name}")
        app.add(oci.Entry(path, "file", 0o755, source=binary))
    return [(static.comment, static.tar(prov.epoch)), (app.comment, app.tar(prov.epoch))]


def build_image(
    definition: ImageDefinition,
    scheme: ImagesSettings,
    prov: Provenance,
    *,
    out: Path,
    cache: Path,
    refresh_base: bool = False,
    say: Callable[[str], None] = print,
) -> Built:
    """One image, written to ``out/<name>.oci.tar``."""
    started = last = time.monotonic()
    steps: dict[str, float] = {}

    def tick(step: str) -> None:
        nonlocal last
        now = time.monotonic()
        steps[step], last = now - last, now
        say(f"  {definition.name}: {step} ({steps[step]:.1f} s)")

    base, built_now = debian_base(PYTHON_BASE_PACKAGES, cache / "base", refresh=refresh_base)
    tick("debian base, built now" if built_now else "debian base, cached")
    work = out / "work" / definition.name
    if definition.kind == "python":
        layers = _python_layers(cache, work, base, prov.epoch, tick)
    else:
        layers = _go_layers(work, base, prov, tick)
    config = oci.ImageConfig(
        user=f"{NONROOT_UID}:{NONROOT_UID}",
        entrypoint=definition.entrypoint,
        cmd=definition.cmd,
        env=definition.env,
        labels=labels(definition, prov),
        exposed_ports=definition.exposed_ports,
    )
    tag = scheme.version
    image = oci.assemble(
        tag, layers, config=config, epoch=prov.epoch, annotations=labels(definition, prov), gzip_cache=cache / "gzip"
    )
    archive = out / f"{definition.name}.oci.tar"
    oci.write_archive(image, archive, prov.epoch)
    tick("layers and archive")
    reference = f"{scheme.registry}/{definition.name}:{tag}@{image.digest}"
    packages = base_packages(base) if definition.kind == "python" else []
    return Built(definition, reference, image, archive, time.monotonic() - started, steps, packages)


def build_all(
    names: Sequence[str] | None = None,
    *,
    scheme: ImagesSettings | None = None,
    out: Path = DEFAULT_OUT,
    cache: Path = DEFAULT_CACHE,
    source: str | None = None,
    refresh_base: bool = False,
    say: Callable[[str], None] = print,
) -> list[Built]:
    """Every image (or those named), then ``digests.json`` beside them."""
    scheme = scheme or ImagesSettings()
    wanted = list(names or DEFINITIONS)
    unknown = [n for n in wanted if n not in DEFINITIONS]
    if unknown:
        raise BuildError(f"no image named {', '.join(unknown)} (known: {', '.join(DEFINITIONS)})")
    prov = provenance(source)
    if prov.dirty:
        say(f"note: the tree has uncommitted changes; the images are labelled {prov.revision[:12]} all the same")
    built = []
    for name in wanted:
        say(f"{name}: building")
        built.append(
            build_image(DEFINITIONS[name], scheme, prov, out=out, cache=cache, refresh_base=refresh_base, say=say)
        )
    path = out / DIGESTS_FILE
    previous = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    previous.update({b.definition.name: b.record() for b in built})
    path.write_text(json.dumps(previous, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return built


def read_digests(out: Path = DEFAULT_OUT) -> dict[str, dict[str, object]]:
    path = out / DIGESTS_FILE
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BuildError(f"{path} is missing: make images builds the images and writes it") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise BuildError(f"{path}: {type(exc).__name__}: {exc}") from None
    if not isinstance(value, dict):
        raise BuildError(f"{path}: expected an object of image name -> record")
    return value
