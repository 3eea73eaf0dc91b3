"""Reading settings documents: hostile files are refused with a short reason, in bounded time; good ones load."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from contract.documents import (
    MAX_DEPTH,
    MAX_DOCUMENT_BYTES,
    MAX_VALUES,
    DocumentError,
    decode_json,
    decode_yaml,
    read_document,
    read_text,
)

#: Every hostile document is refused well within this (the limits keep the work small).
BOUND_SECONDS = 5.0


def _laughs(levels: int = 9, width: int = 10) -> str:
    lines = ["a0: &a0 [" + ", ".join(["lol"] * width) + "]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def _refused(decode: object, text: str) -> str:
    assert callable(decode)
    started = time.monotonic()
    with pytest.raises(DocumentError) as err:
        decode(text)
    assert time.monotonic() - started < BOUND_SECONDS
    return err.value.reason


# --- not text ------------------------------------------------------------------------------------------------


def test_text_files_are_read(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("a: café\n", encoding="utf-8")
    assert read_text(path) == "a: café\n"
    assert read_document(path, "yaml") == {"a": "café"}


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"config:\n  x: 1\0\n", "is binary (a NUL byte at offset 14), not text"),
        ("config: caf\xe9\n".encode("latin-1"), "is not UTF-8 text (byte 0xe9 at offset 11)"),
        (b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR", "is binary"),
    ],
)
def test_what_is_not_text_is_refused(tmp_path: Path, data: bytes, reason: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_bytes(data)
    with pytest.raises(DocumentError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        read_text(path)


def test_size_is_capped(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_bytes(b"#" * MAX_DOCUMENT_BYTES)
    assert len(read_text(path)) == MAX_DOCUMENT_BYTES
    path.write_bytes(b"#" * (MAX_DOCUMENT_BYTES + 1))
    with pytest.raises(DocumentError, match="is larger than 1024 KiB"):
        read_text(path)


def test_not_a_regular_file_or_missing(tmp_path: Path) -> None:
    with pytest.raises(DocumentError, match="is not a regular file"):
        read_text(tmp_path)
    with pytest.raises(DocumentError, match="cannot read: No such file or directory"):
        read_text(tmp_path / "absent.yaml")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(DocumentError, match="is not a regular file"):  # never blocks waiting for a writer
        read_text(fifo)


# --- YAML ----------------------------------------------------------------------------------------------------


def test_plain_yaml_and_merge_keys_load() -> None:
    doc = decode_yaml("base: &b {k: 1, j: 2}\nother:\n  <<: *b\n  k: 3\nlist: [1, 2]\n")
    assert doc == {"base": {"k": 1, "j": 2}, "other": {"k": 3, "j": 2}, "list": [1, 2]}


def test_a_key_twice_is_refused_with_where() -> None:
    reason = _refused(decode_yaml, "config:\n  gpucluster:environment: prod\n  gpucluster:environment: dev\n")
    assert reason == "line 3, column 3: invalid YAML: found the key 'gpucluster:environment' twice"


@pytest.mark.parametrize("depth", [MAX_DEPTH - 1, 10])
def test_nesting_within_the_limit_loads(depth: int) -> None:
    assert decode_yaml("x: " + "[" * depth + "]" * depth + "\n") is not None


@pytest.mark.parametrize(
    "text",
    ["x: " + "[" * 100_000 + "]" * 100_000, "x: " + "{a: " * 5000 + "1" + "}" * 5000, "x: " + "[" * 65 + "]" * 65],
)
def test_deep_nesting_is_refused(text: str) -> None:
    assert f"nests deeper than {MAX_DEPTH} levels" in _refused(decode_yaml, text)


def test_alias_expansion_is_refused() -> None:
    assert decode_yaml(_laughs(levels=3))["a2"][0][0][0] == "lol"  # 1 + 10 + 100 + 1000 values: fine
    assert (
        _refused(decode_yaml, _laughs())
        == f"expands to more than {MAX_VALUES} values (YAML aliases used over and over?)"
    )


def test_a_recursive_alias_is_refused() -> None:
    assert "nests deeper than" in _refused(decode_yaml, "x: &x [*x, *x]\n")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("config:\n  a: [\n", "invalid YAML: "),
        ("a: !!python/object/apply:os.system ['true']\n", "invalid YAML: "),
        ("a: " + "9" * 6000 + "\n", "invalid YAML: a number with more digits than can be read (4300)"),
        ("a: *nowhere\n", "invalid YAML: found undefined alias"),
    ],
)
def test_invalid_yaml_is_refused_without_a_traceback(text: str, reason: str) -> None:
    assert reason in _refused(decode_yaml, text)


def test_a_reason_never_quotes_the_document() -> None:
    secret = "rpa_SECRET0123456789"
    reason = _refused(decode_yaml, f"apiKey: {secret}\n\tbad: [\n")
    assert secret not in reason


# --- JSON ----------------------------------------------------------------------------------------------------


def test_json_loads() -> None:
    assert decode_json('{"a": [1, 2.5, "x", true, null]}') == {"a": [1, 2.5, "x", True, None]}


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"highMark": 4, "highMark": 40}', "invalid JSON: the key 'highMark' is given twice in one object"),
        ('{"ratio": NaN}', "invalid JSON: NaN is not a number settings take"),
        ('{"ratio": -Infinity}', "invalid JSON: -Infinity is not a number settings take"),
        ("{nope", "line 1, column 2: invalid JSON: Expecting property name enclosed in double quotes"),
        ("[" * 100_000 + "]" * 100_000, f"nests deeper than {MAX_DEPTH} levels"),
        ("[" * 65 + "]" * 65, f"nests deeper than {MAX_DEPTH} levels"),
        ('{"a": ' + "9" * 6000 + "}", "invalid JSON: a number with more digits than can be read (4300)"),
    ],
)
def test_hostile_json_is_refused(text: str, reason: str) -> None:
    assert _refused(decode_json, text) == reason
