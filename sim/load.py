"""A constant request rate through the simulated cluster's Service, and what every request met: vegeta does both.

vegeta (``github.com/tsenart/vegeta/v12``, built by ``make tools``) sends ``rate`` GETs a second to one URL for as
long as it runs (``vegeta attack -duration=0``), each with its own timeout, over kept-alive connections as a real
client would (Go's HTTP client, which also retries an idempotent request whose reused connection the server had
closed). SIGINT ends the attack; ``vegeta encode --to csv`` then gives one row per request, the format of
``lib/results.go``'s ``NewCSVEncoder``: timestamp (Unix nanoseconds), HTTP status (0 without an answer), latency
(nanoseconds), bytes out, bytes in, error, body (base64), attack name, sequence, method, URL, headers (base64).

A request failed when it got no answer or a status other than 2xx. The figures are the ones the flip table prints:
requests sent and failed, the 50th and 99th latency percentiles of every request, and the seconds with any failure.
"""

from __future__ import annotations

import csv
import io
import math
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sim.stats import percentile

#: Fields of one row of ``vegeta encode --to csv`` (v12).
CSV_FIELDS = 12
#: A request that gets no answer within this long fails (vegeta's -timeout).
REQUEST_TIMEOUT_SECONDS = 10


class LoadError(RuntimeError):
    """vegeta could not be run, or its output could not be read; the message says which and where."""


@dataclass(frozen=True)
class Request:
    """One request: when it was sent (Unix seconds), its status (0: no answer), its latency, its error."""

    sent: float
    code: int
    latency: float
    error: str

    @property
    def failed(self) -> bool:
        return not 200 <= self.code < 300


def parse_results(text: str) -> list[Request]:
    """The requests of ``vegeta encode --to csv`` output; LoadError naming the line and field that is wrong."""
    out = []
    for n, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        if not row:
            continue
        if len(row) != CSV_FIELDS:
            raise LoadError(f"vegeta results line {n}: {len(row)} fields, expected {CSV_FIELDS}")
        try:
            sent, code, latency = int(row[0]), int(row[1]), int(row[2])
        except ValueError:
            raise LoadError(f"vegeta results line {n}: timestamp, code and latency must be whole numbers") from None
        if sent <= 0 or not 0 <= code <= 999 or latency < 0:
            raise LoadError(
                f"vegeta results line {n}: timestamp {sent}, code {code} or latency {latency} is impossible"
            )
        out.append(Request(sent / 1e9, code, latency / 1e9, row[5]))
    return out


@dataclass(frozen=True)
class RequestFigures:
    sent: int
    failed: int
    p50_ms: float
    p99_ms: float
    seconds_with_errors: int
    #: Why requests failed, most frequent first: ("503", 12), ("connection reset by peer", 3), ...
    causes: tuple[tuple[str, int], ...] = ()

    def rows(self) -> list[tuple[str, str]]:
        return [
            ("requests sent (constant rate, whole cycle)", str(self.sent)),
            ("requests failed", str(self.failed)),
            ("request latency p50 / p99", f"{self.p50_ms:.0f} / {self.p99_ms:.0f} ms"),
            ("seconds with any failed request", str(self.seconds_with_errors)),
        ]


def _cause(r: Request) -> str:
    if r.code:
        return str(r.code)
    text = r.error.rsplit(": ", 1)[-1] if r.error else "no answer"
    return text[:80]


def request_figures(requests: Sequence[Request]) -> RequestFigures:
    failed = [r for r in requests if r.failed]
    latencies = [r.latency * 1000 for r in requests]
    causes: dict[str, int] = {}
    for r in failed:
        causes[_cause(r)] = causes.get(_cause(r), 0) + 1
    return RequestFigures(
        sent=len(requests),
        failed=len(failed),
        p50_ms=percentile(latencies, 0.5),
        p99_ms=percentile(latencies, 0.99),
        seconds_with_errors=len({math.floor(r.sent) for r in failed}),
        causes=tuple(sorted(causes.items(), key=lambda kv: (-kv[1], kv[0]))),
    )


@dataclass(frozen=True)
class Second:
    """One second of the attack, for the chart: requests sent, failed, the p99 latency of those sent."""

    t: float  # seconds since the timeline's start
    sent: int
    failed: int
    p99_ms: float


def per_second(requests: Sequence[Request], start: float) -> list[Second]:
    """Requests bucketed by the second they were sent in, relative to ``start`` (Unix seconds)."""
    buckets: dict[int, list[Request]] = {}
    for r in requests:
        buckets.setdefault(math.floor(r.sent - start), []).append(r)
    return [
        Second(float(t), len(rs), sum(r.failed for r in rs), percentile([r.latency * 1000 for r in rs], 0.99))
        for t, rs in sorted(buckets.items())
    ]


class Load:
    """``vegeta attack`` at ``rate`` requests a second against ``url`` until :meth:`stop`; results in ``out``."""

    def __init__(self, vegeta: str, url: str, rate: int, out: Path) -> None:
        self.vegeta, self.url, self.rate, self.out = vegeta, url, rate, out
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        targets = self.out / "targets.txt"
        targets.write_text(f"GET {self.url}\n")
        cmd = [
            self.vegeta,
            "attack",
            f"-rate={self.rate}/1s",
            "-duration=0",
            f"-timeout={REQUEST_TIMEOUT_SECONDS}s",
            f"-targets={targets}",
            f"-output={self.out / 'results.bin'}",
        ]
        try:
            self.proc = subprocess.Popen(cmd, stderr=(self.out / "attack.log").open("wb"))
        except OSError as exc:
            raise LoadError(f"cannot run {self.vegeta}: {exc.strerror} (make tools builds it)") from None

    def stop(self) -> list[Request]:
        """End the attack and read back every request it sent."""
        if self.proc is None:
            raise LoadError("the load was never started")
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=REQUEST_TIMEOUT_SECONDS + 5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise LoadError("vegeta attack did not stop on SIGINT") from None
        encoded = subprocess.run(
            [self.vegeta, "encode", "--to", "csv", str(self.out / "results.bin")],
            capture_output=True,
            timeout=60,
            check=False,
        )
        if encoded.returncode != 0:
            raise LoadError(f"vegeta encode failed: {encoded.stderr.decode(errors='replace')[-300:]}")
        text = encoded.stdout.decode()
        (self.out / "results.csv").write_text(text)
        return parse_results(text)
