"""Reading providers' replies: a bounded body, JSON, and typed fields whose every problem names the field.

A provider's reply is input from outside: it may be cut off, not JSON, deeply nested, huge, or carry a field of the
wrong type. Each of those is a `ReplyError` naming the field path (``instances[2].tags.uid``) and what is wrong with
it; the adapters turn it into a ``ProviderError`` that also names the provider and the call. A message shows a
value only when it is short and of a kind that cannot be a credential (a state word, a number); otherwise it says
only what type and size it was.
"""

from __future__ import annotations

import json
import math
from typing import Any, BinaryIO, Protocol

from daemons.burst_provider.providers.base import ProviderError

#: How much of a reply is read before it is refused as too large.
DEFAULT_REPLY_LIMIT = 16 * 1024 * 1024
#: Longest value a message shows (longer ones are described, not shown).
SHOWN = 40


class ReplyError(ValueError):
    """A reply, or one field of it, is not what the provider's API returns."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}" if field else problem)
        self.field = field
        self.problem = problem


class _Readable(Protocol):
    def read(self, amt: int = ..., /) -> bytes: ...


def provider_error(provider: str, call: str, exc: ReplyError) -> ProviderError:
    """``provider <name>: <call>: <field>: <problem>``, the field path starting at ``reply``."""
    return ProviderError(provider, call, str(exc))


def read_capped(stream: BinaryIO | _Readable, limit: int = DEFAULT_REPLY_LIMIT) -> bytes:
    """At most ``limit`` bytes of ``stream``; ReplyError when there is more."""
    data = stream.read(limit + 1)
    if len(data) > limit:
        raise ReplyError("", f"reply is larger than {limit} bytes: refused")
    return data


def decode_json(raw: bytes, what: str = "reply") -> Any:
    """The JSON value of ``raw``; ReplyError when it is not UTF-8 JSON or nests deeper than the parser goes."""
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ReplyError("", f"{what} is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise ReplyError("", f"{what} is not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except RecursionError:
        raise ReplyError("", f"{what} nests too deeply to be read") from None
    except ValueError:  # an integer literal of thousands of digits
        raise ReplyError("", f"{what} holds a number too long to be read") from None


def describe(value: object) -> str:
    """What a value is, for a message: its JSON type, and its size for strings and containers."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return f"a string of {len(value)} characters"
    if isinstance(value, list):
        return f"a list of {len(value)} items"
    if isinstance(value, dict):
        return f"an object with {len(value)} keys"
    return type(value).__name__


def shown(value: str) -> str:
    """A short state-like word as ``'word'``; anything longer is described instead of shown."""
    if len(value) <= SHOWN and value.isprintable():
        return repr(value)
    return describe(value)


def join(field: str, key: str | int) -> str:
    """``field.key`` or ``field[index]``; a key longer than a message shows is cut."""
    if isinstance(key, int):
        return f"{field}[{key}]"
    key = key[:SHOWN] + ("..." if len(key) > SHOWN else "")
    return f"{field}.{key}" if field else key


def obj(value: object, field: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ReplyError(field, f"expected an object, got {describe(value)}")
    return value


def opt_obj(value: object, field: str) -> dict[str, Any]:
    """An object; null or absent reads as an empty one."""
    return {} if value is None else obj(value, field)


def items(value: object, field: str) -> list[Any]:
    if not isinstance(value, list):
        raise ReplyError(field, f"expected a list, got {describe(value)}")
    return value


def opt_items(value: object, field: str) -> list[Any]:
    """A list; null or absent reads as an empty one."""
    return [] if value is None else items(value, field)


def text(value: object, field: str, *, max_len: int = 4096, required: bool = True) -> str:
    """A string of at most ``max_len`` characters (``required``: non-empty)."""
    if not isinstance(value, str):
        raise ReplyError(field, f"expected a string, got {describe(value)}")
    if len(value) > max_len:
        raise ReplyError(field, f"expected at most {max_len} characters, got {len(value)}")
    if required and not value:
        raise ReplyError(field, "expected a non-empty string")
    return value


def opt_text(value: object, field: str, *, max_len: int = 4096) -> str:
    """A string; null or absent reads as ``""``."""
    return "" if value is None else text(value, field, max_len=max_len, required=False)


def integer(value: object, field: str, *, low: int = 0, high: int = 2**63 - 1) -> int:
    """A whole number in [low, high] (a JSON boolean is not a number; ``2.0`` is not a whole number)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ReplyError(field, f"expected a whole number, got {describe(value)}")
    if not low <= value <= high:
        got = str(value) if abs(value) < 10**15 else "a larger one"
        raise ReplyError(field, f"expected a whole number in [{low}, {high}], got {got}")
    return value


def opt_integer(value: object, field: str, *, low: int = 0, high: int = 2**63 - 1) -> int | None:
    return None if value is None else integer(value, field, low=low, high=high)


def number(value: object, field: str, *, low: float = 0.0, high: float = 1e15) -> float:
    """A finite number in [low, high]."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ReplyError(field, f"expected a number, got {describe(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ReplyError(field, "expected a finite number")
    if not low <= value <= high:
        raise ReplyError(field, f"expected a number in [{low:g}, {high:g}]")
    return float(value)


def opt_number(value: object, field: str, *, low: float = 0.0, high: float = 1e15) -> float | None:
    return None if value is None else number(value, field, low=low, high=high)


def string_map(value: object, field: str, *, max_len: int = 65536) -> dict[str, str]:
    """An object of strings (labels, annotations, env); null or absent reads as empty. Values are never shown."""
    out: dict[str, str] = {}
    for key, item in opt_obj(value, field).items():
        out[key] = text(item, join(field, key), max_len=max_len, required=False)
    return out
