"""A small client for Prometheus' instant-query API (``GET /api/v1/query``) that classifies every failure.

The controller must tell "the answer is N" from "there is no answer": every way a query can fail raises
:class:`QueryError` with a ``reason`` that becomes the ``reason`` label of ``query_errors_total``.
Standard library only, so the daemon image needs no HTTP package.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, Protocol

#: Every reason QueryError carries (the label values of query_errors_total).
REASONS = ("unreachable", "timeout", "http", "bad-json", "api-error", "empty", "not-scalar", "multiple")


class QueryError(Exception):
    """A query without a usable answer; ``reason`` is one of REASONS."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Sample:
    labels: dict[str, str]
    value: float
    timestamp: float


@dataclass(frozen=True)
class QueryResult:
    result_type: str
    samples: tuple[Sample, ...]

    def single_value(self) -> float:
        """The one sample's value; QueryError('empty'|'multiple'|'not-scalar') otherwise."""
        if not self.samples:
            raise QueryError("empty", "the query returned no sample")
        if len(self.samples) > 1:
            raise QueryError("multiple", f"the query returned {len(self.samples)} samples; it must return one")
        value = self.samples[0].value
        if math.isnan(value) or math.isinf(value):
            raise QueryError("not-scalar", f"the query returned {value}")
        return value

    def by_label(self, label: str) -> dict[str, float]:
        """The samples keyed by ``label`` (``""`` for a sample without it), possibly none; QueryError('multiple')
        when two samples share a key, ('not-scalar') for a NaN or infinite value."""
        rows: dict[str, float] = {}
        for sample in self.samples:
            key = sample.labels.get(label, "")
            if key in rows:
                shown = f"{label}={key!r}" if key else f"no {label}"
                raise QueryError("multiple", f"the query returned two samples with {shown}; it must return one each")
            if math.isnan(sample.value) or math.isinf(sample.value):
                raise QueryError("not-scalar", f"the query returned {sample.value} for {label}={key!r}")
            rows[key] = sample.value
        return rows


class Querier(Protocol):
    def query(self, promql: str) -> QueryResult: ...


def _parse_value(raw: Any) -> tuple[float, float]:
    if not (isinstance(raw, list) and len(raw) == 2):
        raise QueryError("bad-json", f'a sample value is not [timestamp, "value"]: {raw!r}')
    try:
        return float(raw[0]), float(raw[1])
    except (TypeError, ValueError):
        raise QueryError("bad-json", f"a sample value is not numeric: {raw!r}") from None


def parse_response(body: bytes) -> QueryResult:
    """Decode the API's JSON envelope (``{"status": "success", "data": {"resultType", "result"}}``)."""
    try:
        doc = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise QueryError("bad-json", f"the response is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise QueryError("bad-json", "the response is not a JSON object")
    if doc.get("status") != "success":
        raise QueryError("api-error", f"{doc.get('errorType', 'error')}: {doc.get('error', 'no error text')}")
    data = doc.get("data")
    if not isinstance(data, dict) or not isinstance(data.get("resultType"), str):
        raise QueryError("bad-json", "the response has no data.resultType")
    rtype = data["resultType"]
    result = data.get("result")
    if rtype in ("scalar", "string"):
        ts, value = _parse_value(result)
        return QueryResult(rtype, (Sample({}, value, ts),))
    if rtype != "vector":
        raise QueryError("not-scalar", f"the query returned a {rtype}, not an instant vector")
    if not isinstance(result, list):
        raise QueryError("bad-json", "data.result is not a list")
    samples = []
    for item in result:
        if not isinstance(item, dict):
            raise QueryError("bad-json", "a result entry is not an object")
        metric = item.get("metric", {})
        if not isinstance(metric, dict):
            raise QueryError("bad-json", "a result entry's metric is not an object")
        ts, value = _parse_value(item.get("value"))
        samples.append(Sample({str(k): str(v) for k, v in metric.items()}, value, ts))
    return QueryResult(rtype, tuple(samples))


class PrometheusClient:
    """Instant queries against one Prometheus (or anything serving its HTTP API, e.g. Thanos, Mimir)."""

    def __init__(self, base_url: str, timeout_s: float) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s

    def query(self, promql: str) -> QueryResult:
        # Plain seconds: Prometheus reads a bare float, but refuses a fractional duration such as "6.67s".
        params = urllib.parse.urlencode({"query": promql, "timeout": f"{self.timeout_s:.3f}"})
        url = f"{self.base_url}/api/v1/query?{params}"
        request = urllib.request.Request(url, headers={"Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                body = response.read()
        except urllib.error.HTTPError as exc:
            # Prometheus answers 400/422/503 with its JSON envelope; keep its error text when there is one.
            detail = exc.read()[:500]
            try:
                parse_response(detail)
            except QueryError as inner:
                if inner.reason == "api-error":
                    raise QueryError("http", f"HTTP {exc.code}: {inner}") from None
            raise QueryError("http", f"HTTP {exc.code} from {self.base_url}") from None
        except TimeoutError:
            raise QueryError("timeout", f"no answer from {self.base_url} within {self.timeout_s:g}s") from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError):
                raise QueryError("timeout", f"no answer from {self.base_url} within {self.timeout_s:g}s") from None
            raise QueryError("unreachable", f"{self.base_url}: {exc.reason}") from None
        except OSError as exc:
            raise QueryError("unreachable", f"{self.base_url}: {exc}") from None
        return parse_response(body)
