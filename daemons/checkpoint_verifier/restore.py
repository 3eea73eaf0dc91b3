"""A restore drill's load: read a DCP checkpoint the way a restart reads it, every byte of every item, without torch.

DCP's ``FileSystemWriter`` writes each item of the state dict as one ``torch.save`` record at the offset
``.metadata`` gives it: a ZIP archive (stored, not compressed) holding ``data.pkl`` and, for a tensor, its storage
``data/<key>``. A restart's ``dcp.load`` opens each record and rebuilds each tensor from its pickle and storage.
This module does the same reading without torch and without running anything a pickle names:

- every record the metadata names is opened as a ZIP archive inside its file, and every entry is read to its end,
  so ZIP's CRC-32 of every byte is checked (a flipped bit in a shard, which the size-only check cannot see, fails
  here as it fails ``dcp.load``);
- a tensor's ``data.pkl`` is read through an allow-list of the names ``torch.save`` writes for a tensor
  (``_rebuild_tensor_v2``/``_v3``, the storage types, ``OrderedDict``); its storage must hold exactly the bytes its
  pickle says (elements times the dtype's size), its view must lie inside the storage, and its dtype and sizes must be
  those ``.metadata`` gives the chunk;
- a byte blob's ``data.pkl`` (an object the job saved: an optimizer's hyper-parameters, a data loader's position) is
  walked opcode by opcode (``pickletools.genops``), never loaded: it must be one whole pickle.

What it does not do: build tensors, check that values are finite, or read formats other than DCP's file system
layout with ``torch.save`` records (the default ``SerializationFormat.TORCH_SAVE``; a safetensors-serialized DCP
checkpoint is refused as unreadable). The bench (``benchmarks/bench_checkpoint_verify.py``) holds it against torch's
own ``dcp.load`` on the same corrupt checkpoints. Memory stays bounded: files are streamed a block at a time. A
:class:`Reads` with a rate reads no faster than that on average, so a drill leaves the filesystem's bandwidth to the
training that writes to it.
"""

from __future__ import annotations

import io
import math
import pickle
import pickletools
import posixpath
import time
import zipfile
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from contract.checkpoints import DCP_METADATA, step_of
from daemons.checkpoint_verifier.dcp import Chunk, MetadataError, read_metadata

#: Bytes read from a record at a time.
BLOCK = 1 << 20
#: The largest ``data.pkl`` of one record read into memory (a tensor's is a few hundred bytes).
MAX_PICKLE = 64 << 20

#: The legacy storage types ``torch.save`` names for a tensor's storage, and their element's size in bytes.
_STORAGES = {
    "DoubleStorage": ("float64", 8), "FloatStorage": ("float32", 4), "HalfStorage": ("float16", 2),
    "LongStorage": ("int64", 8), "IntStorage": ("int32", 4), "ShortStorage": ("int16", 2),
    "CharStorage": ("int8", 1), "ByteStorage": ("uint8", 1), "BoolStorage": ("bool", 1),
    "BFloat16Storage": ("bfloat16", 2), "ComplexDoubleStorage": ("complex128", 16),
    "ComplexFloatStorage": ("complex64", 8), "QInt8Storage": ("qint8", 1), "QInt32Storage": ("qint32", 4),
    "QUInt8Storage": ("quint8", 1), "QUInt4x2Storage": ("quint4x2", 1), "QUInt2x4Storage": ("quint2x4", 1),
}  # fmt: skip
#: Each dtype's element size: the storages' and those ``_rebuild_tensor_v3`` names over an untyped storage.
_ITEMSIZE = {
    **dict(_STORAGES.values()),
    "uint16": 2, "uint32": 4, "uint64": 8, "complex32": 4, "float8_e4m3fn": 1, "float8_e4m3fnuz": 1,
    "float8_e5m2": 1, "float8_e5m2fnuz": 1, "float8_e8m0fnu": 1, "float4_e2m1fn_x2": 1, "bits8": 1, "bits16": 2,
}  # fmt: skip


class Problem(StrEnum):
    UNREADABLE_METADATA = "unreadable-metadata"
    MISSING_SHARD = "missing-shard"
    TRUNCATED_SHARD = "truncated-shard"
    #: A record is not a whole ``torch.save`` archive: a broken ZIP, a CRC-32 that does not match, a pickle cut short.
    CORRUPT_ITEM = "corrupt-item"
    #: A tensor's record is whole but not what the metadata says (dtype, sizes) or its storage is the wrong length.
    WRONG_TENSOR = "wrong-tensor"


@dataclass(frozen=True)
class Finding:
    problem: Problem
    detail: str


@dataclass(frozen=True)
class Restored:
    """What one drill's load read."""

    directory: str
    step: int | None
    #: Records (state dict items or chunks of them) read whole, out of how many the metadata names.
    read: int
    records: int
    #: Bytes read from the checkpoint's files (the metadata and every record).
    bytes_read: int
    findings: tuple[Finding, ...]

    @property
    def ok(self) -> bool:
        return not self.findings

    def summary(self) -> str:
        if self.ok:
            return f"{self.directory}: restored {self.read} records, {self.bytes_read} bytes"
        first = "; ".join(f"{f.problem}: {f.detail}" for f in self.findings[:3])
        more = f" (and {len(self.findings) - 3} more)" if len(self.findings) > 3 else ""
        return f"{self.directory}: {len(self.findings)} problem(s): {first}{more}"


@dataclass
class Reads:
    """The bytes a restore read, and, with ``bytes_per_second``, a limit on how fast: after each read it sleeps until
    the average rate since the first read is at most the limit (the clock and the sleep are passed in for tests)."""

    bytes_per_second: float | None = None
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    total: int = 0
    #: Seconds slept to keep to the limit.
    slept: float = 0.0
    _started: float | None = field(default=None, repr=False)

    def took(self, n: int) -> None:
        now = self.clock()
        if self._started is None:
            self._started = now
        self.total += n
        if self.bytes_per_second is None:
            return
        ahead = self.total / self.bytes_per_second - (now - self._started)
        if ahead > 0:
            self.sleep(ahead)
            self.slept += ahead


class _Window(io.RawIOBase):
    """``length`` bytes of ``file`` from ``start``, as a file of their own (what ``zipfile`` opens)."""

    def __init__(self, file: io.BufferedIOBase, start: int, length: int, reads: Reads) -> None:
        self.file, self.start, self.length, self.pos, self.reads = file, start, length, 0, reads

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.length}[whence]
        self.pos = max(0, min(self.length, base + offset))
        return self.pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        want = min(len(view), self.length - self.pos)
        if want <= 0:
            return 0
        self.file.seek(self.start + self.pos)
        got = self.file.readinto(view[:want]) or 0
        self.pos += got
        self.reads.took(got)
        return got


class _RecordError(ValueError):
    def __init__(self, problem: Problem, detail: str) -> None:
        super().__init__(detail)
        self.problem = problem


@dataclass(frozen=True)
class _Storage:
    key: str
    dtype: str | None
    itemsize: int
    #: Elements (a legacy typed storage) or bytes (an untyped storage).
    numel: int


@dataclass(frozen=True)
class _Tensor:
    storage: _Storage
    offset: int
    size: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: str


def _rebuild_v2(storage: Any, offset: Any, size: Any, stride: Any, *_rest: Any) -> _Tensor:
    if not isinstance(storage, _Storage) or storage.dtype is None:
        raise _RecordError(Problem.WRONG_TENSOR, "a tensor over a storage of no dtype")
    return _Tensor(storage, offset, tuple(size), tuple(stride), storage.dtype)


def _rebuild_v3(storage: Any, offset: Any, size: Any, stride: Any, _grad: Any, _hooks: Any, dtype: Any,
                *_rest: Any) -> _Tensor:  # fmt: skip
    if not isinstance(storage, _Storage) or not isinstance(dtype, str):
        raise _RecordError(Problem.WRONG_TENSOR, "a tensor with no storage or no dtype")
    return _Tensor(storage, offset, tuple(size), tuple(stride), dtype)


_StorageType = tuple[str | None, int]


class _TensorUnpickler(pickle.Unpickler):
    """Only what ``torch.save`` of one tensor names; anything else is refused, never imported."""

    _NAMES: dict[tuple[str, str], Callable[..., Any]] = {
        ("torch._utils", "_rebuild_tensor_v2"): _rebuild_v2,
        ("torch._utils", "_rebuild_tensor_v3"): _rebuild_v3,
        ("collections", "OrderedDict"): OrderedDict,
    }

    def find_class(self, module: str, name: str) -> Any:
        found = self._NAMES.get((module, name))
        if found is not None:
            return found
        if module == "torch" and name in _STORAGES:
            return _STORAGES[name]
        if module == "torch.storage" and name == "UntypedStorage":
            return (None, 1)
        if module == "torch" and name in _ITEMSIZE:
            return name
        raise _RecordError(Problem.WRONG_TENSOR, f"its pickle names {module}.{name}, which no saved tensor holds")

    def persistent_load(self, pid: Any) -> Any:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise _RecordError(Problem.WRONG_TENSOR, "its pickle holds a reference that is no tensor storage")
        kind, key, numel = pid[1], pid[2], pid[4]
        if not isinstance(kind, tuple) or not isinstance(key, str) or not isinstance(numel, int) or numel < 0:
            raise _RecordError(Problem.WRONG_TENSOR, "its pickle names a storage it does not describe")
        dtype, itemsize = kind
        return _Storage(key, dtype, itemsize, numel)


def _read_entry(archive: zipfile.ZipFile, info: zipfile.ZipInfo, keep: bool) -> bytes:
    """Read one entry to its end (ZIP checks its CRC-32 there); its bytes when ``keep``."""
    kept = bytearray()
    with archive.open(info) as entry:
        while block := entry.read(BLOCK):
            if keep:
                kept += block
    return bytes(kept)


def _tensor_problem(tensor: _Tensor, chunk: Chunk, stored: dict[str, int]) -> str | None:
    storage = tensor.storage
    itemsize = _ITEMSIZE.get(tensor.dtype)
    if itemsize is None:
        return f"its dtype {tensor.dtype} is not one this reader knows"
    want_bytes = storage.numel * storage.itemsize
    if stored.get(storage.key) != want_bytes:
        return f"its storage {storage.key} holds {stored.get(storage.key, 0)} bytes, not {want_bytes}"
    elements = want_bytes // itemsize
    if any(n < 0 for n in tensor.size) or len(tensor.stride) != len(tensor.size) or tensor.offset < 0:
        return f"its view {tensor.size} with strides {tensor.stride} is not a tensor's"
    if math.prod(tensor.size) > 0:
        last = tensor.offset + sum((n - 1) * s for n, s in zip(tensor.size, tensor.stride, strict=True))
        if last >= elements:
            return f"its view {tensor.size} at {tensor.offset} reaches past its storage's {elements} elements"
    if chunk.dtype is not None and chunk.dtype != tensor.dtype:
        return f"it holds {tensor.dtype}, the metadata says {chunk.dtype}"
    if chunk.sizes is not None and tuple(chunk.sizes) != tensor.size:
        return f"it holds a {list(tensor.size)} tensor, the metadata says {list(chunk.sizes)}"
    return None


def _read_record(file: io.BufferedIOBase, chunk: Chunk, reads: Reads) -> None:
    """Read one record whole; _RecordError naming what is wrong."""
    try:
        with zipfile.ZipFile(_Window(file, chunk.offset, chunk.length, reads)) as archive:
            entries = archive.infolist()
            prefix = entries[0].filename.split("/", 1)[0] + "/" if entries else ""
            pickles = [i for i in entries if i.filename == f"{prefix}data.pkl"]
            if not pickles or pickles[0].file_size > MAX_PICKLE:
                raise _RecordError(Problem.CORRUPT_ITEM, "it holds no data.pkl")
            stored: dict[str, int] = {}
            data = b""
            for info in entries:
                if not info.filename.startswith(prefix):
                    raise _RecordError(Problem.CORRUPT_ITEM, f"it holds {info.filename!r} outside its archive")
                body = _read_entry(archive, info, keep=info is pickles[0] or info.filename == f"{prefix}byteorder")
                name = info.filename.removeprefix(prefix)
                if name.startswith("data/"):
                    stored[name.removeprefix("data/")] = info.file_size
                elif name == "data.pkl":
                    data = body
                elif name == "byteorder" and body not in (b"little", b""):
                    raise _RecordError(Problem.WRONG_TENSOR, f"it was saved {body[:8]!r}-endian")
    except zipfile.BadZipFile as e:
        raise _RecordError(Problem.CORRUPT_ITEM, f"it is not a whole torch.save archive ({e})") from None
    except (zipfile.LargeZipFile, NotImplementedError, EOFError) as e:
        raise _RecordError(Problem.CORRUPT_ITEM, f"it cannot be read ({type(e).__name__}: {e})") from None
    if chunk.dtype is None:
        try:
            ops = list(pickletools.genops(data))
        except (ValueError, EOFError) as e:
            raise _RecordError(Problem.CORRUPT_ITEM, f"its object's pickle is cut or garbled ({e})") from None
        if not ops or ops[-1][0].name != "STOP":
            raise _RecordError(Problem.CORRUPT_ITEM, "its object's pickle does not end")
        return
    try:
        tensor = _TensorUnpickler(io.BytesIO(data)).load()
    except _RecordError:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError, AttributeError) as e:
        raise _RecordError(Problem.CORRUPT_ITEM, f"its tensor's pickle does not read ({type(e).__name__})") from None
    if not isinstance(tensor, _Tensor):
        raise _RecordError(Problem.WRONG_TENSOR, f"it holds a {type(tensor).__name__}, not a tensor")
    problem = _tensor_problem(tensor, chunk, stored)
    if problem is not None:
        raise _RecordError(Problem.WRONG_TENSOR, problem)


def _records(directory: Path, chunks: tuple[Chunk, ...], reads: Reads) -> Iterator[Finding | None]:
    """Each record read: None when it read whole, else what is wrong (file by file, in the order of their bytes)."""
    by_file: dict[str, list[Chunk]] = {}
    for c in chunks:
        by_file.setdefault(c.path, []).append(c)
    for path in sorted(by_file):
        try:
            file = (directory / path).open("rb")
        except FileNotFoundError:
            for c in by_file[path]:
                yield Finding(Problem.MISSING_SHARD, f"{path} (holding {c.fqn!r}) is not there")
            continue
        with file:
            size = (directory / path).stat().st_size
            for c in sorted(by_file[path], key=lambda c: c.offset):
                if c.offset + c.length > size:
                    yield Finding(
                        Problem.TRUNCATED_SHARD, f"{path} is {size} bytes, {c.fqn!r} ends at {c.offset + c.length}"
                    )
                    continue
                try:
                    _read_record(file, c, reads)
                except _RecordError as e:
                    yield Finding(e.problem, f"{c.fqn!r} in {path} at {c.offset}: {e}")
                else:
                    yield None


def restore(directory: Path, reads: Reads | None = None) -> Restored:
    """Read the checkpoint in ``directory`` as a restart would, counting (and, with a rate, pacing) its reads in
    ``reads``; OSError when the directory cannot be read at all."""
    reads = reads if reads is not None else Reads()
    name = posixpath.basename(str(directory).rstrip("/"))
    step = step_of(name)
    try:
        raw = (directory / DCP_METADATA).read_bytes()
    except FileNotFoundError:
        finding = Finding(Problem.UNREADABLE_METADATA, f"{DCP_METADATA} is not there")
        return Restored(str(directory), step, 0, 0, 0, (finding,))
    try:
        metadata = read_metadata(raw)
    except MetadataError as e:
        finding = Finding(Problem.UNREADABLE_METADATA, f"{DCP_METADATA} {e}")
        return Restored(str(directory), step, 0, 0, len(raw), (finding,))
    reads.took(len(raw))
    findings: list[Finding] = []
    read = 0
    for outcome in _records(directory, metadata.chunks, reads):
        if outcome is None:
            read += 1
        else:
            findings.append(outcome)
    return Restored(str(directory), step, read, len(metadata.chunks), reads.total, tuple(findings))
