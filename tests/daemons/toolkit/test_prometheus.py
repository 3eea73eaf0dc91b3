"""The Prometheus client against a tiny HTTP server: every failure gets its own reason."""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from daemons.toolkit.prometheus import PrometheusClient, QueryError, QueryResult, parse_response

Responder = Callable[[str], tuple[int, bytes]]


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        """The timeout test's client hangs up before the late answer: not worth a traceback."""


@pytest.fixture
def prom() -> Iterator[tuple[str, list[Responder], list[str]]]:
    """(base URL, [responder], seen queries); set responder[0] to choose the answer."""
    responders: list[Responder] = [lambda q: (200, b"{}")]
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            parsed = urllib.parse.urlparse(self.path)
            assert parsed.path == "/api/v1/query"
            params = urllib.parse.parse_qs(parsed.query)
            query = params["query"][0]
            seen.append(query)
            seen.append("timeout=" + params["timeout"][0])
            code, body = responders[0](query)
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = _Server(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", responders, seen
    server.shutdown()
    server.server_close()


def vector(*values: float) -> bytes:
    result = [{"metric": {"i": str(i)}, "value": [1700000000.5, str(v)]} for i, v in enumerate(values)]
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()


def reason_of(fn: Callable[[], object]) -> str:
    with pytest.raises(QueryError) as info:
        fn()
    return info.value.reason


def test_a_one_sample_vector_is_its_value(prom: tuple[str, list[Responder], list[str]]) -> None:
    url, responders, seen = prom
    responders[0] = lambda q: (200, vector(6))
    result = PrometheusClient(url + "/", 20 / 3).query('sum(up{job="x"})')
    assert isinstance(result, QueryResult)
    assert result.single_value() == 6.0
    assert result.samples[0].labels == {"i": "0"}
    assert seen == ['sum(up{job="x"})', "timeout=6.667"]  # bare seconds: Prometheus refuses "6.667s"


def test_an_empty_result_is_an_error_not_zero(prom: tuple[str, list[Responder], list[str]]) -> None:
    url, responders, _ = prom
    responders[0] = lambda q: (200, vector())
    result = PrometheusClient(url, 2).query("x")
    assert result.samples == ()
    assert reason_of(result.single_value) == "empty"


def test_several_samples_are_refused(prom: tuple[str, list[Responder], list[str]]) -> None:
    url, responders, _ = prom
    responders[0] = lambda q: (200, vector(1, 2))
    assert reason_of(PrometheusClient(url, 2).query("x").single_value) == "multiple"


def test_http_500_is_an_http_error(prom: tuple[str, list[Responder], list[str]]) -> None:
    url, responders, _ = prom
    responders[0] = lambda q: (500, b"internal error")
    assert reason_of(lambda: PrometheusClient(url, 2).query("x")) == "http"


def test_http_400_keeps_the_prometheus_error_text(prom: tuple[str, list[Responder], list[str]]) -> None:
    url, responders, _ = prom
    body = json.dumps({"status": "error", "errorType": "bad_data", "error": "parse error at char 3"}).encode()
    responders[0] = lambda q: (400, body)
    with pytest.raises(QueryError, match="parse error at char 3") as info:
        PrometheusClient(url, 2).query("su(")
    assert info.value.reason == "http"


def test_bad_json_is_classified(prom: tuple[str, list[Responder], list[str]]) -> None:
    url, responders, _ = prom
    responders[0] = lambda q: (200, b"<html>not json")
    assert reason_of(lambda: PrometheusClient(url, 2).query("x")) == "bad-json"


def test_a_slow_server_is_a_timeout(prom: tuple[str, list[Responder], list[str]]) -> None:
    url, responders, _ = prom

    def slow(q: str) -> tuple[int, bytes]:
        time.sleep(1.0)
        return 200, vector(1)

    responders[0] = slow
    assert reason_of(lambda: PrometheusClient(url, 0.2).query("x")) == "timeout"


def test_nobody_listening_is_unreachable() -> None:
    server = _Server(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = server.server_address[1]
    server.server_close()
    assert reason_of(lambda: PrometheusClient(f"http://127.0.0.1:{port}", 1).query("x")) == "unreachable"


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"[]", "bad-json"),
        (json.dumps({"status": "error", "errorType": "timeout", "error": "query timed out"}).encode(), "api-error"),
        (json.dumps({"status": "success", "data": {}}).encode(), "bad-json"),
        (json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}}).encode(), "not-scalar"),
        (
            json.dumps({"status": "success", "data": {"resultType": "vector", "result": [{"value": [1]}]}}).encode(),
            "bad-json",
        ),
        (
            json.dumps(
                {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1, "abc"]}]}}
            ).encode(),
            "bad-json",
        ),
    ],
)
def test_malformed_envelopes(body: bytes, reason: str) -> None:
    assert reason_of(lambda: parse_response(body)) == reason


def test_scalar_results_and_nan() -> None:
    scalar = json.dumps({"status": "success", "data": {"resultType": "scalar", "result": [1, "3"]}}).encode()
    assert parse_response(scalar).single_value() == 3.0
    nan = json.dumps(
        {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1, "NaN"]}]}}
    ).encode()
    assert reason_of(parse_response(nan).single_value) == "not-scalar"
