"""DCP's ``.metadata`` read without torch: held to real checkpoints torch 2.15.0's ``dcp.save`` wrote
(``tests/fixtures/dcp/``), and refusing a pickle that names anything a DCP metadata does not hold."""

from __future__ import annotations

import io
import os
import pickle
from pathlib import Path
from typing import Any

import pytest

from daemons.checkpoint_verifier.dcp import MetadataError, read_metadata
from sim.checkpoint_faults import CAPTURED


@pytest.mark.parametrize(
    ("step", "items", "files"),
    [
        # two ranks: three weights (one per rank each), the step counter, the data loader's bytes, per rank
        ("step-100", 8, {"__0_0.distcp", "__1_0.distcp"}),
        # one process: two weights, a counter and two plain values (pickled as byte blobs)
        ("step-200", 5, {"__0_0.distcp"}),
        # saved to a pathlib.Path: the metadata's checkpoint_id is a PosixPath
        ("step-300", 5, {"__0_0.distcp"}),
    ],
)
def test_real_metadata_names_every_item_and_the_bytes_of_each_shard(step: str, items: int, files: set[str]) -> None:
    directory = CAPTURED / step
    meta = read_metadata((directory / ".metadata").read_bytes())
    assert meta.items == items
    assert meta.version == "1.0.0"
    assert set(meta.files()) == files
    # DCP writes a rank's chunks back to back: the furthest chunk ends where the file does.
    for name, end in meta.files().items():
        assert end == (directory / name).stat().st_size
    assert all(c.length > 0 for c in meta.chunks)


class _Runs:
    """Pickles as a call of os.mkdir: a reader that ran it would leave the directory behind."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, (str(self.path),))


def test_a_pickle_naming_any_other_callable_is_refused_and_never_run(tmp_path: Path) -> None:
    ran = tmp_path / "ran"
    with pytest.raises(MetadataError, match=r"names posix\.mkdir, which a DCP checkpoint's metadata does not hold"):
        read_metadata(pickle.dumps(_Runs(ran)))
    assert not ran.exists()


def _real(step: str = "step-200") -> bytes:
    return (CAPTURED / step / ".metadata").read_bytes()


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"", "is not a readable pickle"),
        (b"not a pickle at all", "is not a readable pickle"),
        (_real()[: len(_real()) // 2], "is not a readable pickle"),
        (pickle.dumps({"state_dict_metadata": {}}), "holds a dict, not DCP's Metadata"),
        # a shard named outside the checkpoint's directory (the same length, so the pickle's frames still hold)
        (_real().replace(b"__0_0.distcp", b"../0_0.distc"), "outside the checkpoint's directory"),
        (_real().replace(b"__0_0.distcp", b"/etc/passwd_"), "outside the checkpoint's directory"),
    ],
    ids=["empty", "text", "cut-in-half", "a-dict", "parent-path", "absolute-path"],
)
def test_metadata_that_is_not_dcps_is_refused_naming_why(data: bytes, words: str) -> None:
    with pytest.raises(MetadataError, match=words):
        read_metadata(data)


def test_a_persistent_reference_is_refused() -> None:
    class _Persisting(pickle.Pickler):
        def persistent_id(self, obj: Any) -> Any:
            return "storage" if obj == "tensor" else None

    buffer = io.BytesIO()
    _Persisting(buffer).dump(["tensor"])
    with pytest.raises(MetadataError, match="persistent reference"):
        read_metadata(buffer.getvalue())
