"""What a save leaves in a checkpoint directory, and what goes wrong with one: each corruption class the verifier
must catch, done to a real checkpoint.

:func:`save_checkpoint` is a job's save on the simulated cluster: a real checkpoint torch 2.15.0's ``dcp.save`` wrote
(two ranks, ``tests/fixtures/dcp/``, captured by the script beside it) copied to ``step-<N>`` under the job's
directory, its manifest written last, the oldest beyond ``keep`` removed (as torchtitan's ``keep_latest_k``).

Each fault changes a complete checkpoint directory (``contract/checkpoints.py``'s layout: DCP's shards and
``.metadata``, and the manifest where there is one) the way a failed or careless save leaves it, and names the
problem class the verifier must report (``daemons/checkpoint_verifier/verify.py``'s ``Problem``). The tests apply them
to a copy of a real checkpoint torch wrote; ``make bench`` to checkpoints of every size it writes.

:data:`SILENT` holds what the check cannot see and a restore drill must: a byte of a tensor's storage flipped in a
checkpoint with no manifest (its sizes are right; only the ZIP record's CRC-32 that ``torch.save`` wrote sees it).
Not modelled: a checkpoint that changes while it is read (the verifier reads a directory the job has finished).
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path

from contract.checkpoints import DCP_METADATA, DCP_SHARD_SUFFIX, MANIFEST, step_of

#: A real checkpoint of two ranks, as torch 2.15.0's ``dcp.save`` wrote it.
CAPTURED = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "dcp" / "torch-2.15.0"
REAL_CHECKPOINT = CAPTURED / "step-100"


def write_manifest(directory: Path, step: int) -> None:
    """What a job's save helper writes after its files: each file's path, size and SHA-256."""
    files = []
    for path in sorted(p for p in directory.iterdir() if p.name != MANIFEST):
        digest = hashlib.sha256()
        with path.open("rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
        files.append({"path": path.name, "size": path.stat().st_size, "sha256": digest.hexdigest()})
    (directory / MANIFEST).write_text(json.dumps({"step": step, "files": files}))


def _shards(directory: Path) -> list[Path]:
    return sorted(directory.glob(f"*{DCP_SHARD_SUFFIX}"))


def missing_shard(directory: Path) -> None:
    """One rank's shard never written (the rank died before its write, the others' saves went on)."""
    _shards(directory)[-1].unlink()


def truncated_shard(directory: Path) -> None:
    """A shard one byte short (a write cut off by a full quota or a killed client)."""
    shard = _shards(directory)[0]
    with shard.open("r+b") as f:
        f.truncate(shard.stat().st_size - 1)


def metadata_without_shards(directory: Path) -> None:
    """The metadata there, no shard (written first, or the shards went to another directory)."""
    for shard in _shards(directory):
        shard.unlink()


def hash_mismatch(directory: Path) -> None:
    """Same sizes, one byte changed after the manifest was written (bit rot, a torn rewrite)."""
    if not (directory / MANIFEST).exists():
        write_manifest(directory, step=_step(directory))
    shard = _shards(directory)[-1]
    with shard.open("r+b") as f:
        f.seek(shard.stat().st_size // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))


def partial_directory(directory: Path) -> None:
    """The save never finished: no metadata, no manifest, shards only."""
    (directory / DCP_METADATA).unlink()
    (directory / MANIFEST).unlink(missing_ok=True)


def unreadable_metadata(directory: Path) -> None:
    """The metadata cut short (its write interrupted, or a rename that lost its tail)."""
    data = (directory / DCP_METADATA).read_bytes()
    (directory / DCP_METADATA).write_bytes(data[: len(data) // 2])


def stale_step(directory: Path) -> None:
    """A manifest left from an older step in a reused directory."""
    write_manifest(directory, step=max(0, _step(directory) - 10))


def bit_rot(directory: Path) -> None:
    """One byte of a tensor's storage in the last shard flipped (the first record found whose archive holds one),
    sizes unchanged, no manifest: the check passes it (DCP writes no hash), a restore reads its record's CRC-32 and
    refuses it."""
    (directory / MANIFEST).unlink(missing_ok=True)
    shard = _shards(directory)[-1]
    data = bytearray(shard.read_bytes())
    start = 0
    while (start := data.find(b"PK\x03\x04", start)) >= 0:
        with zipfile.ZipFile(io.BytesIO(bytes(data[start:]))) as record:
            stored = [i for i in record.infolist() if "/data/" in i.filename and i.file_size]
        if stored:
            header = start + stored[0].header_offset
            name_length, extra_length = struct.unpack("<HH", data[header + 26 : header + 30])
            data[header + 30 + name_length + extra_length] ^= 0xFF
            shard.write_bytes(bytes(data))
            return
        start += 4
    raise ValueError(f"{shard} holds no tensor storage")


def _step(directory: Path) -> int:
    return step_of(directory.name) or 0


#: Each class, as the bench's table names it: the fault and the problem the verifier must report.
CORRUPTIONS: dict[str, tuple[Callable[[Path], None], str]] = {
    "missing shard": (missing_shard, "missing-shard"),
    "truncated shard": (truncated_shard, "truncated-shard"),
    "metadata without shards": (metadata_without_shards, "metadata-without-shards"),
    "hash mismatch": (hash_mismatch, "hash-mismatch"),
    "partial directory": (partial_directory, "partial-directory"),
    "stale step": (stale_step, "stale-step"),
    "unreadable metadata": (unreadable_metadata, "unreadable-metadata"),
}
#: What the check passes and only a restore drill catches, with the drill's problem class (``restore.Problem``).
SILENT: dict[str, tuple[Callable[[Path], None], str]] = {"bit rot without a manifest": (bit_rot, "corrupt-item")}


def save_checkpoint(job_directory: Path, step: int, *, corruption: str | None = None, keep: int = 3) -> Path:
    """Write ``step-<step>`` under ``job_directory`` as a job's save does (shards, metadata, then the manifest), spoilt
    by ``corruption`` (one of :data:`CORRUPTIONS`) if named; remove the oldest beyond ``keep``. Idempotent for one
    step: a directory already there is written again."""
    target = job_directory / f"step-{step}"
    if target.exists():
        shutil.rmtree(target)
    job_directory.mkdir(parents=True, exist_ok=True)
    staging = job_directory / ".saving"
    if staging.exists():
        shutil.rmtree(staging)
    shutil.copytree(REAL_CHECKPOINT, staging)
    staging.rename(target)
    write_manifest(target, step)
    if corruption is not None:
        spoil, _problem = CORRUPTIONS[corruption]
        spoil(target)
    saved = sorted(
        (
            d
            for d in job_directory.iterdir()
            if d.is_dir() and step_of(d.name) is not None and not d.name.startswith(".")
        ),
        key=lambda d: step_of(d.name) or 0,
    )
    for old in saved[:-keep] if keep > 0 else []:
        shutil.rmtree(old)
    return target
