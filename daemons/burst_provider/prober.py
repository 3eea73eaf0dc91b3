"""Performs one probe against a rented replica: an HTTP GET or a TCP connect, as the kubelet does them.

HTTP (``pkg/probe/http``, Kubernetes 1.36): a GET with ``User-Agent: kube-probe/1.36`` and ``Accept: */*`` unless
the probe sets them, no compression; success is a status from 200 to 399; a redirect to the same host and port is
followed (up to 10), one elsewhere ends the probe as a success, as the kubelet's "terminated redirects" warning
does; at most 10 KiB of the body is read. HTTPS does not verify the certificate (neither does the kubelet). TCP: the
connection opens within the timeout. Every error (refused, reset, timed out, unreachable) is a failure with its
reason, never an exception.
"""

from __future__ import annotations

import http.client
import socket
import ssl
from urllib.parse import urljoin, urlsplit

from daemons.burst_provider.probes import Probe

USER_AGENT = "kube-probe/1.36"
MAX_BODY = 10 * 1024
MAX_REDIRECTS = 10


def _host_port(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def _get(address: str, port: int, path: str, probe: Probe) -> tuple[int, str, str]:
    """(status, Location header, first bytes of the body) of one GET."""
    conn: http.client.HTTPConnection
    if probe.scheme == "https":
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        conn = http.client.HTTPSConnection(address, port, timeout=probe.timeout, context=ctx)
    else:
        conn = http.client.HTTPConnection(address, port, timeout=probe.timeout)
    try:
        headers = {"User-Agent": USER_AGENT, "Accept": "*/*", "Accept-Encoding": "identity"}
        headers.update(dict(probe.headers))
        conn.request("GET", path, headers=headers)
        res = conn.getresponse()
        body = res.read(MAX_BODY).decode("utf-8", "replace")
        return res.status, res.getheader("Location") or "", body
    finally:
        conn.close()


def http_probe(address: str, port: int, probe: Probe) -> tuple[bool, str]:
    """(passed, what happened) of an HTTP GET probe at ``address:port``."""
    base = f"{probe.scheme}://{_host_port(address, port)}"
    path = probe.path
    try:
        for _ in range(MAX_REDIRECTS + 1):
            status, location, _body = _get(address, port, path, probe)
            if 200 <= status < 300:
                return True, f"HTTP {status}"
            if 300 <= status < 400:
                target = urlsplit(urljoin(base + path, location))
                if not location or (target.hostname, target.port or port) != (address.strip("[]"), port):
                    return True, f"HTTP {status}: probe terminated redirects"
                path = target.path or "/"
                if target.query:
                    path += "?" + target.query
                continue
            return False, f"HTTP probe failed with statuscode: {status}"
        return False, f"stopped after {MAX_REDIRECTS} redirects"
    except (OSError, http.client.HTTPException) as exc:
        return False, _reason(exc, base + probe.path, probe.timeout)


def tcp_probe(address: str, port: int, probe: Probe) -> tuple[bool, str]:
    """(passed, what happened) of a TCP socket probe at ``address:port``."""
    try:
        with socket.create_connection((address, port), timeout=probe.timeout):
            return True, "connected"
    except OSError as exc:
        return False, _reason(exc, f"tcp {_host_port(address, port)}", probe.timeout)


def run_probe(address: str, port: int, probe: Probe) -> tuple[bool, str]:
    """Run ``probe`` against the replica at ``address``, the probe's port being published as ``port`` there."""
    if probe.action == "tcp":
        return tcp_probe(address, port, probe)
    return http_probe(address, port, probe)


def _reason(exc: BaseException, target: str, timeout: float) -> str:
    if isinstance(exc, TimeoutError):
        return f"{target}: no answer within {timeout:g}s"
    if isinstance(exc, ConnectionRefusedError):
        return f"{target}: connection refused"
    if isinstance(exc, ConnectionResetError):
        return f"{target}: connection reset"
    text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return f"{target}: {text}"[:300]
