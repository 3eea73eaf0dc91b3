"""PyTorch Distributed Checkpoint's ``.metadata``, read without torch and without running what the file says.

DCP's ``FileSystemWriter`` pickles a ``torch.distributed.checkpoint.metadata.Metadata`` into ``.metadata``: the
state dict's entries (``state_dict_metadata``: each tensor's properties, size and chunks, or a byte blob) and where
each chunk lies (``storage_data``: a ``MetadataIndex`` to a ``filesystem._StorageInfo(relative_path, offset,
length)``). A pickle can name any importable callable, and the checkpoint volume is written by the team's job: so
this reader maps only the classes DCP's metadata is made of to plain stand-ins, and refuses any other name. It
imports nothing of torch (the verifier's image has none).

Held to real files written by torch's own ``dcp.save`` (``tests/fixtures/dcp/``, ``capture.py`` there).
"""

from __future__ import annotations

import io
import pickle
import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

_METADATA = "torch.distributed.checkpoint.metadata"
_FILESYSTEM = "torch.distributed.checkpoint.filesystem"

#: torch's dtypes and layouts, which pickle as ``torch.<name>``: read as their names.
_TORCH_NAMES = frozenset(
    {
        "float64", "float32", "float16", "bfloat16", "complex128", "complex64", "complex32", "uint8", "uint16",
        "uint32", "uint64", "int8", "int16", "int32", "int64", "bool", "float8_e4m3fn", "float8_e4m3fnuz",
        "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn_x2", "qint8", "quint8", "qint32",
        "quint4x2", "quint2x4", "bits8", "bits16", "strided", "sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr",
        "sparse_bsc", "_mkldnn", "jagged",
    }
)  # fmt: skip


class MetadataError(ValueError):
    """The metadata cannot be read, or names something a DCP checkpoint does not hold."""


class _Record:
    """A DCP dataclass as plain data: pickle fills its ``__dict__`` with the dataclass's fields."""

    def field(self, name: str, default: Any = None) -> Any:
        return self.__dict__.get(name, default)


class _TensorProperties(_Record):
    """``TensorProperties`` pickles its fields as a tuple (dtype, layout, requires_grad, memory format, pinned)."""

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple):
            names = ("dtype", "layout", "requires_grad", "memory_format", "pin_memory")
            self.__dict__.update(zip(names, state, strict=False))
        elif isinstance(state, dict):
            self.__dict__.update(state)
        else:
            raise MetadataError(f"TensorProperties with a state of type {type(state).__name__}")


def _plain(value: Any) -> Any:
    """torch.Size, an enum's value, a path: their plain Python value."""
    return value


def _path(*parts: Any) -> str:
    """``pathlib.PosixPath`` (a ``checkpoint_id`` given as a path): its text."""
    return "/".join(str(p) for p in parts)


#: Every name a DCP metadata pickle holds (torch 2.15.0's, tests/fixtures/dcp/), and what it is read as.
_RECORDS: Mapping[tuple[str, str], Callable[..., Any]] = {
    (_METADATA, "Metadata"): type("Metadata", (_Record,), {}),
    (_METADATA, "TensorStorageMetadata"): type("TensorStorageMetadata", (_Record,), {}),
    (_METADATA, "BytesStorageMetadata"): type("BytesStorageMetadata", (_Record,), {}),
    (_METADATA, "ChunkStorageMetadata"): type("ChunkStorageMetadata", (_Record,), {}),
    (_METADATA, "MetadataIndex"): type("MetadataIndex", (_Record,), {}),
    (_METADATA, "StorageMeta"): type("StorageMeta", (_Record,), {}),
    (_METADATA, "TensorProperties"): _TensorProperties,
    (_METADATA, "_MEM_FORMAT_ENCODING"): _plain,
    (_FILESYSTEM, "_StorageInfo"): type("_StorageInfo", (_Record,), {}),
    ("torch", "Size"): tuple,
    # a layout pickles as ``_get_layout("torch.strided")``
    ("torch.serialization", "_get_layout"): _plain,
    ("pathlib", "PosixPath"): _path,
}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        found = _RECORDS.get((module, name))
        if found is not None:
            return found
        if module == "torch" and name in _TORCH_NAMES:
            return name
        raise MetadataError(f"names {module}.{name}, which a DCP checkpoint's metadata does not hold")

    def persistent_load(self, pid: Any) -> Any:
        raise MetadataError("holds a persistent reference (a tensor's storage?), which DCP's metadata does not")


@dataclass(frozen=True)
class Chunk:
    """One entry of ``storage_data``: the bytes of a state dict item (or one chunk of it) in one file."""

    #: The state dict's key (``model.layers.0.attention.wq.weight``).
    fqn: str
    #: The file, relative to the checkpoint's directory.
    path: str
    offset: int
    length: int
    #: A tensor's chunk: its dtype (``float32``) and the sizes the metadata gives it; None for a byte blob.
    dtype: str | None = None
    sizes: tuple[int, ...] | None = None


@dataclass(frozen=True)
class DcpMetadata:
    """What ``.metadata`` says a checkpoint holds."""

    #: The state dict's keys (tensors and byte blobs).
    items: int
    chunks: tuple[Chunk, ...]
    #: DCP's metadata version (None before torch wrote one).
    version: str | None

    def files(self) -> dict[str, int]:
        """Each file the chunks lie in, and the least length it must have (its furthest chunk's end)."""
        ends: dict[str, int] = {}
        for c in self.chunks:
            ends[c.path] = max(ends.get(c.path, 0), c.offset + c.length)
        return ends


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise MetadataError(f"{what} is {value!r}, not a byte count")
    return value


def _relative(path: Any, fqn: str) -> str:
    if not isinstance(path, str) or not path:
        raise MetadataError(f"the chunk of {fqn!r} names no file")
    normal = posixpath.normpath(path)
    if posixpath.isabs(path) or normal.startswith("..") or "\\" in path or "\x00" in path:
        raise MetadataError(f"the chunk of {fqn!r} lies in {path!r}, outside the checkpoint's directory")
    return normal


def _tensor_chunk(item: Any, offsets: Any) -> tuple[str | None, tuple[int, ...] | None]:
    """A tensor item's dtype and the sizes of its chunk at ``offsets`` (the storage index's); (None, None) for a byte
    blob, or when the metadata does not say (the restore then checks the record's own consistency only)."""
    if type(item).__name__ != "TensorStorageMetadata" or not isinstance(item, _Record):
        return None, None
    properties = item.field("properties")
    dtype = properties.field("dtype") if isinstance(properties, _Record) else None
    for chunk in item.field("chunks") or ():
        if isinstance(chunk, _Record) and tuple(chunk.field("offsets") or ()) == tuple(offsets or ()):
            sizes = chunk.field("sizes")
            if isinstance(sizes, tuple) and all(isinstance(n, int) and n >= 0 for n in sizes):
                return (dtype if isinstance(dtype, str) else None), sizes
    return (dtype if isinstance(dtype, str) else None), None


def read_metadata(data: bytes) -> DcpMetadata:
    """The chunks a DCP ``.metadata`` names; MetadataError naming what is wrong when it cannot be read as one."""
    try:
        root = _Unpickler(io.BytesIO(data)).load()
    except MetadataError:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError) as e:
        raise MetadataError(f"is not a readable pickle ({type(e).__name__}: {e})") from None
    except RecursionError:
        raise MetadataError("nests deeper than any DCP metadata") from None
    if type(root).__name__ != "Metadata" or not isinstance(root, _Record):
        raise MetadataError(f"holds a {type(root).__name__}, not DCP's Metadata")
    items = root.field("state_dict_metadata")
    storage = root.field("storage_data")
    if not isinstance(items, dict):
        raise MetadataError("has no state_dict_metadata")
    if not isinstance(storage, dict):
        raise MetadataError("has no storage_data (written by a storage writer other than the file system's?)")
    chunks = []
    for index, info in storage.items():
        fqn = index.field("fqn") if isinstance(index, _Record) else None
        if not isinstance(fqn, str) or not isinstance(info, _Record):
            raise MetadataError("has a storage_data entry that is not a MetadataIndex and its _StorageInfo")
        dtype, sizes = _tensor_chunk(items.get(fqn), index.field("offset"))
        chunks.append(
            Chunk(
                fqn=fqn,
                path=_relative(info.field("relative_path"), fqn),
                offset=_int(info.field("offset"), f"the offset of {fqn!r}"),
                length=_int(info.field("length"), f"the length of {fqn!r}"),
                dtype=dtype,
                sizes=sizes,
            )
        )
    unstored = sorted(set(items) - {c.fqn for c in chunks})
    if unstored:
        raise MetadataError(f"names {len(unstored)} item(s) stored in no file: {', '.join(map(repr, unstored[:3]))}")
    version = root.field("version")
    return DcpMetadata(items=len(items), chunks=tuple(chunks), version=version if isinstance(version, str) else None)
