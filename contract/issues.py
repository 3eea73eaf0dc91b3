"""Problems with settings as data: where (key path), what was there, why it is wrong; and how values are shown.

Every settings reader (the stack checker, the daemons' settings files, the telemetry section) turns pydantic's
errors into :class:`ConfigIssue` with :func:`issues_from_validation_error`, the one translation. A message never
echoes an unbounded value (:func:`shown` truncates) nor anything that may be a credential: values under a key
named like one (apiKey, token, password, secret, kubeconfig, ...) and values that look like keys or tokens are
shown as ``<redacted>``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from contract.constants import CREDENTIAL_KEY_PATTERN

REDACTED = "<redacted>"
#: Longest repr a message shows of a value; longer ones are cut and their length given.
MAX_SHOWN = 80
#: Longest key a key path shows as written.
MAX_KEY = 64
#: Most names a message lists; the rest are counted.
MAX_LISTED = 10
#: Problems a refusal lists before it says how many more there are (a hostile document may hold thousands).
MAX_PROBLEMS_SHOWN = 50

_CREDENTIAL_KEY = re.compile(CREDENTIAL_KEY_PATTERN, re.IGNORECASE)
#: Values that are keys or tokens whatever key holds them.
_CREDENTIAL_VALUE = re.compile(
    r"-----BEGIN [A-Z ]+-----"  # PEM keys and certificates
    r"|client-(key|certificate)-data|\btoken:\s*\S"  # kubeconfig contents
    r"|^\s*(rpa_|sk-|sk_live_|ghp_|gho_|github_pat_|glpat-|xox[abpr]-|AKIA[0-9A-Z]{12}|eyJ[A-Za-z0-9_-]{8,}\.)"
)
#: One long unbroken run of key-like characters (base64, hex, url-safe tokens) with letters and digits mixed.
_TOKEN_LIKE = re.compile(r"^[A-Za-z0-9+/=_-]{32,}$")


def is_credential_key(key: str) -> bool:
    """True for a key name that would hold a credential (``apiKey``, ``kubeconfigSecret``, ``password``, ...)."""
    return bool(_CREDENTIAL_KEY.search(key))


def looks_like_credential(value: object) -> bool:
    """True for a string that looks like a key, a token, a certificate or a kubeconfig."""
    if not isinstance(value, str):
        return False
    text = value[:4096]
    if _CREDENTIAL_VALUE.search(text):
        return True
    stripped = text.strip()
    return bool(
        _TOKEN_LIKE.match(stripped) and any(c.isdigit() for c in stripped) and any(c.isalpha() for c in stripped)
    )


def _bounded_repr(value: object) -> str:
    if isinstance(value, dict):
        return f"a map of {len(value)} key(s)"
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value)} item(s)"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        return f"an integer of {len(str(value)) if value.bit_length() < 10_000 else 'thousands of'} digits"
    if isinstance(value, str) and len(value) > MAX_SHOWN:
        return f"{value[: MAX_SHOWN - 20]!r}... ({len(value)} characters)"
    try:
        text = repr(value)
    except ValueError:  # pragma: no cover - repr of builtins only fails on absurd ints, handled above
        return f"a {type(value).__name__}"
    if len(text) > MAX_SHOWN:
        return f"{text[: MAX_SHOWN - 20]}... ({len(text)} characters)"
    return text


def shown(value: object, key: str | None = None) -> str:
    """``value`` as a message may show it: bounded in length, ``<redacted>`` when it may be a credential.

    ``key`` is the key that holds the value, if known: a credential-like key name redacts whatever it holds.
    """
    if (key is not None and is_credential_key(key)) or looks_like_credential(value):
        return REDACTED
    return _bounded_repr(value)


def shown_names(names: Iterable[object]) -> str:
    """A list of names for a message: the first few, then how many more."""
    items = list(names)
    listed = ", ".join(shown(n) for n in items[:MAX_LISTED])
    more = f", ... and {len(items) - MAX_LISTED} more" if len(items) > MAX_LISTED else ""
    return f"[{listed}{more}]"


@dataclass(frozen=True)
class ConfigIssue:
    """One problem in settings: where (a key path such as ``flavors[0].gpusPerNode``), what was there, why."""

    path: str
    value: Any
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


class SettingsError(ValueError):
    """Every problem of one settings source (a file, a stack, a section) at once."""

    def __init__(self, issues: Sequence[ConfigIssue], source: str = "settings") -> None:
        self.issues = list(issues)
        self.source = source
        lines = "\n".join(f"  - {issue}" for issue in self.issues[:MAX_PROBLEMS_SHOWN])
        if len(self.issues) > MAX_PROBLEMS_SHOWN:
            lines += f"\n  ... and {len(self.issues) - MAX_PROBLEMS_SHOWN} more"
        super().__init__(f"{source}: {len(self.issues)} problem(s)\n{lines}")


def key_text(key: str) -> str:
    """A key as a key path shows it: as written when short and plain, else bounded and quoted (or redacted)."""
    if len(key) <= MAX_KEY and key.isprintable() and not looks_like_credential(key):
        return key
    return shown(key)


def join_path(prefix: str, loc: Iterable[int | str]) -> str:
    """``prefix`` + a pydantic location: ``.key`` per key, ``[i]`` per list index; ``(top level)`` when empty."""
    path = prefix
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            name = key_text(part)
            path += f".{name}" if path else name
    return path or "(top level)"


def _is_tag(part: int | str) -> bool:
    """pydantic's internal steps in a location (``function-after[...]``, union members), not keys."""
    return isinstance(part, str) and ("[" in part or part.startswith("function-"))


#: Error types whose message already says what is wrong with the value (validators of ours, model rules).
_OWN_MESSAGE = ("value_error", "assertion_error", "rule")


def _scrub(reason: str, value: object) -> str:
    """``reason`` with every quoted form of ``value`` replaced by ``<redacted>``."""
    if not isinstance(value, str) or not value:
        return reason
    for form in sorted({repr(value), _bounded_repr(value), f"'{value}'", f'"{value}"'}, key=len, reverse=True):
        reason = reason.replace(form, REDACTED)
    return reason


def issues_from_validation_error(
    err: ValidationError,
    prefix: str = "",
    *,
    unknown_key_hint: str = "check the spelling",
) -> list[ConfigIssue]:
    """pydantic's errors as key paths (camelCase, as written in the file) and plain reasons, each once.

    ``prefix`` is the key path of what was validated (``burst``, ``gpucluster:telemetry``; empty for a whole
    file). A value that may be a credential is never kept nor shown; long values are shown cut.
    """
    issues: list[ConfigIssue] = []
    seen: set[tuple[str, str]] = set()
    for e in err.errors(include_url=False):
        loc = [p for p in e["loc"] if not _is_tag(p)]
        keys = [p for p in loc if isinstance(p, str)]
        key = keys[-1] if keys else None
        path = join_path(prefix, loc)
        value = e.get("input") if e["type"] != "missing" else None
        secret = (key is not None and is_credential_key(key)) or looks_like_credential(value)
        reason = str(e["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
        if e["type"] == "missing":
            reason = "required key is missing"
        elif e["type"] == "extra_forbidden":
            # An unknown key may be a misspelt secret: its value is neither kept nor shown.
            reason, value = f"unknown key ({unknown_key_hint})", None
        elif e["type"] not in _OWN_MESSAGE and not isinstance(value, (dict, list)):
            reason = f"{reason} (got {REDACTED if secret else shown(value)})"
        if secret:
            reason, value = _scrub(reason, value), None
        elif isinstance(value, str) and len(value) > MAX_SHOWN:
            reason = reason.replace(repr(value), shown(value))
        if (path, reason) in seen:
            continue
        seen.add((path, reason))
        issues.append(ConfigIssue(path, value, reason))
    return issues
