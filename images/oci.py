"""OCI image layouts written byte for byte the same from the same inputs (image-spec v1.1).

Every layer is a tar whose entries are sorted by path, owned by numeric ids with empty user and group names, and
dated no later than one timestamp (``SOURCE_DATE_EPOCH``); it is gzip-compressed with no name and a zero mtime.
The config and manifest are JSON with sorted keys. So the manifest digest, the image's identity, changes only when
a file, a mode, an owner, a label or the timestamp does.

Nothing here runs a container engine: :func:`write_layout` writes an OCI image layout directory
(``oci-layout``, ``index.json``, ``blobs/sha256``) and :func:`write_archive` the same as one tar, which
``skopeo copy oci-archive:<file>`` pushes and ``umoci unpack`` reads.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import stat
import tarfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
#: The annotation of an index entry that names the image's tag in a layout.
REF_NAME = "org.opencontainers.image.ref.name"
#: gzip level of every layer: the digest depends on it (and on zlib), so it is fixed here.
GZIP_LEVEL = 6


class OciError(RuntimeError):
    """A layer or layout could not be written; the message names the path and why."""


def canonical_json(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def rfc3339(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Entry:
    """One member of a layer: a directory, a regular file, or a symbolic link."""

    path: str
    kind: str  # "dir", "file" or "symlink"
    mode: int = 0o755
    uid: int = 0
    gid: int = 0
    data: bytes = b""
    #: A file on disk to read the content from instead of ``data`` (large files are not held twice).
    source: Path | None = None
    target: str = ""


@dataclass
class Layer:
    """A layer being assembled: entries keyed by their path inside the image."""

    comment: str
    entries: dict[str, Entry] = field(default_factory=dict)

    def _parents(self, path: str) -> None:
        parent = PurePosixPath(path).parent
        while str(parent) not in (".", "/", ""):
            key = str(parent)
            if key not in self.entries:
                self.entries[key] = Entry(key, "dir", 0o755)
            parent = parent.parent

    def add(self, entry: Entry) -> None:
        path = entry.path.strip("/")
        if not path or ".." in PurePosixPath(path).parts:
            raise OciError(f"layer {self.comment!r}: {entry.path!r} is not a path inside the image")
        self._parents(path)
        self.entries[path] = Entry(
            path, entry.kind, entry.mode, entry.uid, entry.gid, entry.data, entry.source, entry.target
        )

    def directory(self, path: str, mode: int = 0o755, uid: int = 0, gid: int = 0) -> None:
        self.add(Entry(path, "dir", mode, uid, gid))

    def file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        self.add(Entry(path, "file", mode, data=data))

    def symlink(self, path: str, target: str) -> None:
        self.add(Entry(path, "symlink", 0o777, target=target))

    def tree(self, root: Path, prefix: str = "") -> None:
        """Everything under ``root`` (a staging directory), at ``prefix`` in the image; owners become root."""
        if not root.is_dir():
            raise OciError(f"layer {self.comment!r}: {root} is not a directory")
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            base = Path(dirpath)
            for name in [*dirnames, *sorted(filenames)]:
                full = base / name
                rel = (PurePosixPath(prefix) / full.relative_to(root).as_posix()).as_posix()
                st = full.lstat()
                mode = stat.S_IMODE(st.st_mode)
                if stat.S_ISLNK(st.st_mode):
                    self.symlink(rel, os.readlink(full))
                elif stat.S_ISDIR(st.st_mode):
                    self.directory(rel, mode)
                elif stat.S_ISREG(st.st_mode):
                    self.add(Entry(rel, "file", mode, source=full))
                else:
                    raise OciError(f"layer {self.comment!r}: {full} is neither a file, a directory nor a link")

    def tar(self, epoch: int) -> bytes:
        """The layer as an uncompressed tar, entries in path order, dated ``epoch``."""
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for path in sorted(self.entries):
                e = self.entries[path]
                info = tarfile.TarInfo(path)
                info.mode, info.uid, info.gid, info.uname, info.gname, info.mtime = e.mode, e.uid, e.gid, "", "", epoch
                if e.kind == "dir":
                    info.type = tarfile.DIRTYPE
                    tar.addfile(info)
                elif e.kind == "symlink":
                    info.type, info.linkname = tarfile.SYMTYPE, e.target
                    tar.addfile(info)
                else:
                    data = e.source.read_bytes() if e.source is not None else e.data
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        return out.getvalue()


@dataclass(frozen=True)
class Blob:
    media_type: str
    data: bytes

    @property
    def digest(self) -> str:
        return sha256_digest(self.data)

    def descriptor(self, annotations: Mapping[str, str] | None = None) -> dict[str, object]:
        out: dict[str, object] = {"mediaType": self.media_type, "digest": self.digest, "size": len(self.data)}
        if annotations:
            out["annotations"] = dict(annotations)
        return out


def gzip_layer(tar_bytes: bytes, cache: Path | None = None) -> Blob:
    """A layer tar compressed the same way every time (no file name, mtime 0, fixed level). With ``cache``, a
    layer compressed before (same uncompressed digest) is read back instead of compressed again."""
    if cache is None:
        return Blob(MEDIA_LAYER_GZIP, gzip.compress(tar_bytes, compresslevel=GZIP_LEVEL, mtime=0))
    path = cache / f"{hashlib.sha256(tar_bytes).hexdigest()}-{GZIP_LEVEL}.gz"
    if path.is_file():
        return Blob(MEDIA_LAYER_GZIP, path.read_bytes())
    blob = gzip_layer(tar_bytes)
    cache.mkdir(parents=True, exist_ok=True)
    # Each writer its own partial file (see images/steps.py debian_base): the last rename wins with the same bytes.
    tmp = path.with_name(f"{path.name}.{os.getpid()}.partial")
    tmp.write_bytes(blob.data)
    tmp.replace(path)
    return blob


@dataclass(frozen=True)
class ImageConfig:
    """What a runtime reads from the image: the process, its user, and the labels."""

    user: str
    entrypoint: Sequence[str]
    cmd: Sequence[str]
    env: Sequence[str]
    labels: Mapping[str, str]
    working_dir: str = "/"
    exposed_ports: Sequence[int] = ()


@dataclass(frozen=True)
class Image:
    """One built image: its layers (compressed blobs and their uncompressed digests), config and manifest."""

    tag: str
    layers: tuple[Blob, ...]
    config: Blob
    manifest: Blob

    @property
    def digest(self) -> str:
        return self.manifest.digest

    @property
    def size(self) -> int:
        """Bytes a registry stores: the compressed layers, the config and the manifest."""
        return sum(len(b.data) for b in self.layers) + len(self.config.data) + len(self.manifest.data)


def assemble(
    tag: str,
    layer_tars: Iterable[tuple[str, bytes]],
    *,
    config: ImageConfig,
    epoch: int,
    annotations: Mapping[str, str],
    gzip_cache: Path | None = None,
) -> Image:
    """The image from its layers (comment, uncompressed tar) in order, bottom first."""
    created = rfc3339(epoch)
    blobs: list[Blob] = []
    diff_ids: list[str] = []
    history: list[dict[str, object]] = []
    for comment, tar_bytes in layer_tars:
        diff_ids.append(sha256_digest(tar_bytes))
        blobs.append(gzip_layer(tar_bytes, gzip_cache))
        history.append({"created": created, "created_by": comment})
    process: dict[str, object] = {
        "User": config.user,
        "Env": list(config.env),
        "Entrypoint": list(config.entrypoint) or None,
        "Cmd": list(config.cmd),
        "WorkingDir": config.working_dir,
        "Labels": dict(config.labels),
    }
    if config.exposed_ports:
        process["ExposedPorts"] = {f"{p}/tcp": {} for p in config.exposed_ports}
    config_blob = Blob(
        MEDIA_CONFIG,
        canonical_json(
            {
                "created": created,
                "architecture": "amd64",
                "os": "linux",
                "config": {k: v for k, v in process.items() if v is not None},
                "rootfs": {"type": "layers", "diff_ids": diff_ids},
                "history": history,
            }
        ),
    )
    manifest = Blob(
        MEDIA_MANIFEST,
        canonical_json(
            {
                "schemaVersion": 2,
                "mediaType": MEDIA_MANIFEST,
                "config": config_blob.descriptor(),
                "layers": [b.descriptor() for b in blobs],
                "annotations": dict(annotations),
            }
        ),
    )
    return Image(tag, tuple(blobs), config_blob, manifest)


def layout_files(image: Image) -> dict[str, bytes]:
    """The files of an OCI image layout holding ``image`` under its tag, by path."""
    index = {
        "schemaVersion": 2,
        "mediaType": MEDIA_INDEX,
        "manifests": [image.manifest.descriptor({REF_NAME: image.tag})],
    }
    files = {"oci-layout": canonical_json({"imageLayoutVersion": "1.0.0"}), "index.json": canonical_json(index)}
    for blob in (*image.layers, image.config, image.manifest):
        files[f"blobs/sha256/{blob.digest.removeprefix('sha256:')}"] = blob.data
    return files


def write_layout(image: Image, directory: Path) -> None:
    """An OCI image layout directory (``umoci unpack --image <dir>:<tag>`` reads it)."""
    for rel, data in layout_files(image).items():
        path = directory / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def write_archive(image: Image, path: Path, epoch: int) -> None:
    """The layout as one tar (``oci-archive:``), written to a temporary name first so a reader never sees half."""
    files = layout_files(image)
    tmp = path.with_name(path.name + ".partial")
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tmp, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs = sorted({str(PurePosixPath(p).parent) for p in files if "/" in p} | {"blobs"})
        for d in dirs:
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, epoch
            tar.addfile(info)
        for rel in sorted(files):
            info = tarfile.TarInfo(rel)
            info.size, info.mode, info.mtime = len(files[rel]), 0o644, epoch
            tar.addfile(info, io.BytesIO(files[rel]))
    tmp.replace(path)


def read_archive_index(path: Path) -> dict[str, object]:
    """The ``index.json`` of an archive :func:`write_archive` wrote."""
    try:
        with tarfile.open(path) as tar:
            member = tar.extractfile("index.json")
            if member is None:
                raise KeyError("index.json")
            value = json.loads(member.read())
    except (OSError, KeyError, tarfile.TarError, json.JSONDecodeError) as exc:
        raise OciError(f"{path}: not an OCI image archive ({type(exc).__name__}: {exc})") from None
    if not isinstance(value, dict):
        raise OciError(f"{path}: index.json is not an object")
    return value
