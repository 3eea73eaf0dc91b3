"""Read one checkpoint directory from the (read-only) volume into a :class:`~.verify.Listing`.

Only regular files count: a symbolic link is neither followed nor listed (the volume is the team's, and a link could
name any file the verifier's pod can see), so a shard that is a link is a missing shard. The metadata and the
manifest are read whole up to ``contract.checkpoints.MAX_INDEX_BYTES``; the files the manifest names are hashed in
1 MiB reads, and only those, ``workers`` files at a time (hashlib lets go of the interpreter lock while it hashes,
so each worker keeps a core busy).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from contract.checkpoints import DCP_METADATA, MANIFEST, MAX_INDEX_BYTES
from daemons.checkpoint_verifier.verify import Listing

_READ = 1 << 20


def _sizes(root: Path) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for here, dirs, files in os.walk(root, followlinks=False):
        base = Path(here)
        for name in files:
            info = os.lstat(base / name)
            if stat.S_ISREG(info.st_mode):
                sizes[(base / name).relative_to(root).as_posix()] = info.st_size
        dirs.sort()
    return sizes


def _index(path: Path, size: int | None) -> bytes | None:
    """A metadata or manifest file's bytes; None when absent. Too large a file reads as its first bytes only, which
    the parsers refuse."""
    if size is None:
        return None
    with path.open("rb") as f:
        return f.read(MAX_INDEX_BYTES)


def sha256_of(path: Path, progress: Callable[[int], None] | None = None) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_READ):
            digest.update(chunk)
            if progress is not None:
                progress(len(chunk))
    return digest.hexdigest()


def manifest_paths(data: bytes | None) -> list[str]:
    """The paths a manifest names, as far as it reads (the verdict judges the rest)."""
    if data is None:
        return []
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return []
    files = doc.get("files") if isinstance(doc, dict) else None
    return [f["path"] for f in files or [] if isinstance(f, dict) and isinstance(f.get("path"), str)]


def read_listing(root: Path, progress: Callable[[int], None] | None = None, workers: int = 1) -> Listing:
    """The listing of the checkpoint directory ``root``; ``progress`` is told of every read of a hashed file."""
    if workers < 1:
        raise ValueError(f"workers is {workers}: at least 1")
    sizes = _sizes(root)
    metadata = _index(root / DCP_METADATA, sizes.get(DCP_METADATA))
    manifest = _index(root / MANIFEST, sizes.get(MANIFEST))
    named = sorted({os.path.normpath(p) for p in manifest_paths(manifest)} & set(sizes))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        digests = list(pool.map(lambda p: sha256_of(root / p, progress), named))
    return Listing(
        directory=root.name,
        sizes=sizes,
        metadata=metadata,
        manifest=manifest,
        hashes=dict(zip(named, digests, strict=True)),
    )
