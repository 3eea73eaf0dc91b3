"""A small JSON-over-HTTP client for the provider adapters: timeouts, bounded retries, bounded replies, no secrets.

Every call has a timeout; GET and DELETE are retried on 5xx, 429 and network errors (with exponential backoff, or
after the ``Retry-After`` seconds a 429 names, at most 60). A status error is an `HttpStatusError` (its status and
``Retry-After`` kept), no answer at all an `UnreachableError`, so an adapter can tell "refused" from "not known
whether it was done". A reply is read up to a limit (a larger one is refused), must be UTF-8 JSON when JSON is
wanted, and every error becomes ``ProviderError(provider, call, detail)``. The bearer token never shows: not in a
repr, not in an error, even when a server echoes it back; other credential-looking text in a server's message is
redacted too.
"""

from __future__ import annotations

import http.client
import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from daemons.burst_provider.providers.base import ProviderError
from daemons.burst_provider.replies import DEFAULT_REPLY_LIMIT, ReplyError, decode_json, read_capped

_RETRYABLE_METHODS = frozenset({"GET", "DELETE"})
_DETAIL_LIMIT = 300
#: How much of an error reply is read for its message.
_ERROR_BODY_LIMIT = 64 * 1024
#: ``Bearer <x>``, and ``apiKey=<x>`` / ``"token": "<x>"`` style pairs, in text a server sends back.
_CREDENTIAL_TEXT = re.compile(
    r"(?i)(bearer\s+|(?:api[_-]?key|token|password|secret|authorization)[\"']?\s*[:=]\s*[\"']?)[^\s\"',}]+"
)
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f]+")
#: The longest ``Retry-After`` honoured, in seconds; a larger one is waited for this long.
MAX_RETRY_AFTER = 60.0


class HttpStatusError(ProviderError):
    """The provider answered with an HTTP error status; ``retry_after`` is its ``Retry-After`` in seconds, if any."""

    def __init__(self, provider: str, call: str, detail: str, status: int, retry_after: float | None) -> None:
        super().__init__(provider, call, detail)
        self.status = status
        self.retry_after = retry_after


class UnreachableError(ProviderError):
    """No answer: a network error or a timeout. The provider may still have carried the request out."""


class Redacted:
    """Holds a credential; its repr and str never show it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "<redacted>"

    __str__ = __repr__


def redact(text: str, secret: str | None = None) -> str:
    """``text`` without ``secret``, without credential-looking pairs or control characters, at most 300 chars."""
    if secret:
        text = text.replace(secret, "<redacted>")
    text = _CREDENTIAL_TEXT.sub(lambda m: m.group(1) + "<redacted>", text)
    text = _UNPRINTABLE.sub(" ", text)
    return text[:_DETAIL_LIMIT]


class JsonHttpClient:
    """JSON calls to one provider's base URL (see the module docstring for retries, limits and redaction)."""

    def __init__(
        self,
        provider: str,
        base_url: str,
        *,
        token: str | None = None,
        timeout: float = 10.0,
        retries: int = 2,
        backoff: float = 0.5,
        reply_limit: int = DEFAULT_REPLY_LIMIT,
    ) -> None:
        self.provider = provider
        self.base_url = base_url.rstrip("/")
        self._token = Redacted(token) if token else None
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.reply_limit = reply_limit

    def __repr__(self) -> str:
        return f"JsonHttpClient(provider={self.provider!r}, base_url={self.base_url!r})"

    def _redact(self, detail: str) -> str:
        return redact(detail, self._token.reveal() if self._token else None)

    def _error(self, call: str, detail: str) -> ProviderError:
        return ProviderError(self.provider, call, self._redact(detail))

    def request(
        self,
        call: str,
        method: str,
        path: str,
        *,
        body: object = None,
        query: Mapping[str, str] | None = None,
        missing_ok: bool = False,
        want_text: bool = False,
        retry: bool | None = None,
    ) -> Any:
        """The parsed JSON reply (None for an empty reply, or for 404 when ``missing_ok``); text with ``want_text``.

        ``retry``: whether a 5xx, 429 or network error is retried; by default only for GET and DELETE.
        """
        url = self.base_url + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        retried = method in _RETRYABLE_METHODS if retry is None else retry
        attempts = 1 + (self.retries if retried else 0)
        for attempt in range(attempts):
            last = attempt == attempts - 1
            try:
                status, raw = self._once(method, url, body)
            except urllib.error.HTTPError as exc:
                if exc.code == 404 and missing_ok:
                    return None
                retry_after = _retry_after(exc)
                retryable = exc.code >= 500 or exc.code == 429
                if retryable and not last:
                    self._sleep(attempt, retry_after if exc.code == 429 else None)
                    continue
                detail = self._redact(f"HTTP {exc.code}: {_error_text(exc)}")
                raise HttpStatusError(self.provider, call, detail, exc.code, retry_after) from None
            except ReplyError as exc:
                raise self._error(call, str(exc)) from None
            except (OSError, http.client.HTTPException) as exc:  # URLError, timeouts, resets
                if not last:
                    self._sleep(attempt)
                    continue
                reason = getattr(exc, "reason", exc)
                detail = self._redact(f"unreachable ({method} {self.base_url}): {reason}")
                raise UnreachableError(self.provider, call, detail) from None
            return self._decode(call, status, raw, want_text)
        raise self._error(call, "no attempt made")  # unreachable: attempts >= 1

    def _once(self, method: str, url: str, body: object) -> tuple[int, bytes]:
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self._token is not None:
            headers["Authorization"] = "Bearer " + self._token.reveal()
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:
            return int(resp.status), read_capped(resp, self.reply_limit)

    def _decode(self, call: str, status: int, raw: bytes, want_text: bool) -> Any:
        if want_text:
            return raw.decode("utf-8", errors="replace")
        if status == 204 or not raw.strip():
            return None
        try:
            return decode_json(raw)
        except ReplyError as exc:
            raise self._error(call, f"{exc} (HTTP {status})") from None

    def _sleep(self, attempt: int, retry_after: float | None = None) -> None:
        if retry_after is not None:
            time.sleep(min(retry_after, MAX_RETRY_AFTER))
        elif self.backoff > 0:
            time.sleep(self.backoff * (2**attempt))


def _retry_after(exc: urllib.error.HTTPError) -> float | None:
    """``Retry-After`` as seconds (RFC 9110 delta-seconds); None when absent or not a whole number of seconds."""
    value = (exc.headers.get("Retry-After") if exc.headers is not None else None) or ""
    value = value.strip()
    if value.isascii() and value.isdigit() and len(value) <= 6:
        return float(value)
    return None


def _error_text(exc: urllib.error.HTTPError) -> str:
    """The server's error message: ``{"error": ...}``, ``{"message": ...}`` or an RFC 9457 problem's ``detail`` (with
    its ``errors``) when JSON, else the raw text."""
    try:
        raw = exc.read(_ERROR_BODY_LIMIT)
    except OSError:
        raw = b""
    text = raw.decode("utf-8", errors="replace").strip()
    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError):
        return text or str(exc.reason)
    if isinstance(parsed, dict):
        errors = parsed.get("errors")
        listed = [e for e in errors if isinstance(e, str)][:5] if isinstance(errors, list) else []
        for key in ("error", "message", "detail", "title"):
            if isinstance(parsed.get(key), str):
                return "; ".join([str(parsed[key]), *listed])
    return text
