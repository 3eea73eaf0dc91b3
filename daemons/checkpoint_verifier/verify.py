"""Whether one checkpoint directory holds a complete checkpoint: the verifier's pure verdict.

Pure: the caller passes what it read (:class:`Listing`: every file's size, the DCP metadata's and the manifest's
bytes, the SHA-256 of each file the manifest names) and the step last verified; :func:`judge` says whether the
checkpoint counts, and when not, every problem found, each of a :class:`Problem` class, naming the file. The layout
is ``contract/checkpoints.py``'s.

A checkpoint counts when all hold:

* its directory's name says a step (``stale-step`` otherwise), newer than the last verified (``stale-step``);
* the file that commits it is there: DCP's ``.metadata`` or the manifest (``partial-directory`` otherwise);
* ``.metadata``, when there, reads as DCP's metadata (``unreadable-metadata``) and every file it names is there
  (``missing-shard``; ``metadata-without-shards`` when none is) and long enough for its furthest chunk
  (``truncated-shard``);
* the manifest, when there, reads (``unreadable-manifest``), says the directory's step, and every file it names is
  there (``missing-shard``) with its size (``truncated-shard``) and SHA-256 (``hash-mismatch``).
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from contract.checkpoints import DCP_METADATA, MANIFEST, step_of
from daemons.checkpoint_verifier.dcp import MetadataError, read_metadata

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class Problem(StrEnum):
    NO_CHECKPOINT = "no-checkpoint"
    STALE_STEP = "stale-step"
    PARTIAL_DIRECTORY = "partial-directory"
    UNREADABLE_METADATA = "unreadable-metadata"
    UNREADABLE_MANIFEST = "unreadable-manifest"
    METADATA_WITHOUT_SHARDS = "metadata-without-shards"
    MISSING_SHARD = "missing-shard"
    TRUNCATED_SHARD = "truncated-shard"
    HASH_MISMATCH = "hash-mismatch"


@dataclass(frozen=True)
class ManifestEntry:
    path: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    step: int
    files: tuple[ManifestEntry, ...]


class ManifestError(ValueError):
    """The manifest cannot be read as ``contract/checkpoints.py`` describes it."""


def read_manifest(data: bytes) -> Manifest:
    """The manifest's step and files; ManifestError naming the first thing wrong."""
    try:
        doc: Any = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ManifestError(f"is not JSON ({e})") from None
    if not isinstance(doc, dict):
        raise ManifestError("is not a JSON object")
    step, files = doc.get("step"), doc.get("files")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ManifestError(f"step is {step!r}, not a step number")
    if not isinstance(files, list) or not files:
        raise ManifestError("files is not a list of files")
    entries = []
    for i, f in enumerate(files):
        where = f"files[{i}]"
        if not isinstance(f, dict):
            raise ManifestError(f"{where} is not an object")
        path, size, digest = f.get("path"), f.get("size"), f.get("sha256")
        if not isinstance(path, str) or not path or posixpath.isabs(path) or posixpath.normpath(path).startswith(".."):
            raise ManifestError(f"{where}.path is {path!r}, not a path inside the checkpoint's directory")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ManifestError(f"{where}.size is {size!r}, not a byte count")
        if not isinstance(digest, str) or not _SHA256.match(digest):
            raise ManifestError(f"{where}.sha256 is not 64 lower-case hex digits")
        entries.append(ManifestEntry(posixpath.normpath(path), size, digest))
    return Manifest(step=step, files=tuple(entries))


@dataclass(frozen=True)
class Listing:
    """One checkpoint directory as read from the volume."""

    #: Its name under the job's checkpoint directory (``step-1200``).
    directory: str
    #: Every regular file under it, by path relative to it, and its size.
    sizes: Mapping[str, int]
    #: ``.metadata``'s bytes; None when there is none.
    metadata: bytes | None = None
    #: The manifest's bytes; None when there is none.
    manifest: bytes | None = None
    #: The SHA-256 of each file the manifest names that is there (the reader hashes only those).
    hashes: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Finding:
    problem: Problem
    detail: str


@dataclass(frozen=True)
class Verdict:
    directory: str
    step: int | None
    findings: tuple[Finding, ...]
    #: Bytes the checkpoint's files hold (what a restore reads).
    size: int
    #: Files checked by hash (the manifest's), and by size alone.
    hashed: int = 0

    @property
    def ok(self) -> bool:
        return not self.findings

    def summary(self) -> str:
        """One line for an Event and an alert: the step and each problem."""
        if self.ok:
            return f"step {self.step} verified: {self.size} bytes" + (
                f", {self.hashed} file(s) hashed" if self.hashed else ""
            )
        problems = "; ".join(f"{f.problem}: {f.detail}" for f in self.findings[:5])
        more = f" (and {len(self.findings) - 5} more)" if len(self.findings) > 5 else ""
        return f"step {self.step if self.step is not None else '?'} of {self.directory} refused: {problems}{more}"


def _dcp_findings(metadata: bytes, sizes: Mapping[str, int]) -> list[Finding]:
    try:
        meta = read_metadata(metadata)
    except MetadataError as e:
        return [Finding(Problem.UNREADABLE_METADATA, f"{DCP_METADATA} {e}")]
    needed = meta.files()
    absent = sorted(p for p in needed if p not in sizes)
    if needed and len(absent) == len(needed):
        return [
            Finding(Problem.METADATA_WITHOUT_SHARDS, f"none of the {len(needed)} file(s) {DCP_METADATA} names is there")
        ]
    found = [Finding(Problem.MISSING_SHARD, f"{p} (named by {DCP_METADATA}) is not there") for p in absent]
    for path, end in sorted(needed.items()):
        if path in sizes and sizes[path] < end:
            found.append(
                Finding(Problem.TRUNCATED_SHARD, f"{path} holds {sizes[path]} bytes; {DCP_METADATA} needs {end}")
            )
    return found


def _manifest_findings(data: bytes, step: int | None, listing: Listing) -> tuple[list[Finding], int]:
    try:
        manifest = read_manifest(data)
    except ManifestError as e:
        return [Finding(Problem.UNREADABLE_MANIFEST, f"{MANIFEST} {e}")], 0
    found = []
    if step is not None and manifest.step != step:
        found.append(Finding(Problem.STALE_STEP, f"{MANIFEST} says step {manifest.step}, the directory {step}"))
    hashed = 0
    for entry in manifest.files:
        size = listing.sizes.get(entry.path)
        if size is None:
            found.append(Finding(Problem.MISSING_SHARD, f"{entry.path} (named by {MANIFEST}) is not there"))
        elif size != entry.size:
            found.append(
                Finding(Problem.TRUNCATED_SHARD, f"{entry.path} holds {size} bytes; {MANIFEST} says {entry.size}")
            )
        elif listing.hashes.get(entry.path) != entry.sha256:
            found.append(Finding(Problem.HASH_MISMATCH, f"{entry.path}'s SHA-256 is not the one {MANIFEST} names"))
        else:
            hashed += 1
    return found, hashed


def judge(listing: Listing, last_verified: int | None) -> Verdict:
    """The verdict on ``listing``, given the step of the job's last verified checkpoint (None: none yet)."""
    step = step_of(listing.directory)
    findings: list[Finding] = []
    if step is None:
        findings.append(Finding(Problem.STALE_STEP, f"{listing.directory!r} names no step"))
    elif last_verified is not None and step <= last_verified:
        findings.append(
            Finding(Problem.STALE_STEP, f"step {step} is not newer than step {last_verified}, verified before")
        )
    if listing.metadata is None and listing.manifest is None:
        findings.append(
            Finding(
                Problem.PARTIAL_DIRECTORY, f"neither {DCP_METADATA} nor {MANIFEST} is there: the save did not finish"
            )
        )
    if listing.metadata is not None:
        findings.extend(_dcp_findings(listing.metadata, listing.sizes))
    hashed = 0
    if listing.manifest is not None:
        more, hashed = _manifest_findings(listing.manifest, step, listing)
        findings.extend(more)
    return Verdict(
        directory=listing.directory,
        step=step,
        findings=tuple(findings),
        size=sum(listing.sizes.values()),
        hashed=hashed,
    )
