"""Listen addresses from the command line: ``HOST:PORT``, ``:PORT`` (a default host) and ``[IPv6]:PORT``.

An IPv6 address without brackets is taken only when all of it before the last colon is one IPv6 address: the form
Kubernetes' ``$(POD_IP):PORT`` takes on an IPv6 cluster (our Deployments listen on the pod's own address that way).

Errors are ``ListenError`` (a ``ValueError``) whose message starts with the flag, shows at most the first 80
characters of what was given and says what is expected, so a daemon prints it as is and exits.
"""

from __future__ import annotations

import ipaddress
import re

#: A host name or an IPv4 address (an IPv6 address comes in brackets); nothing a socket would reinterpret.
_HOST = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,252}[A-Za-z0-9])?$")
_IPV6 = re.compile(r"^[0-9A-Fa-f:.]{2,45}(%[A-Za-z0-9_.-]{1,32})?$")
_SHOWN = 80


class ListenError(ValueError):
    """A listen address or port that cannot be used; the message names the flag."""


def _shown(value: str) -> str:
    return repr(value[:_SHOWN] + ("..." if len(value) > _SHOWN else ""))


def _is_ipv6(host: str) -> bool:
    try:
        ipaddress.IPv6Address(host)
    except ValueError:
        return False
    return True


def check_port(port: int, flag: str = "--port") -> int:
    """``port`` when it is a TCP port (0 asks the kernel for a free one); ListenError otherwise."""
    if not 0 <= port <= 65535:
        raise ListenError(f"{flag}: {port} is not a TCP port (0-65535)")
    return port


def parse_listen(value: str, flag: str = "--listen", *, default_host: str | None = None) -> tuple[str, int]:
    """``host:port`` -> (host, port). ``[::1]:port`` gives ``::1``.

    With ``default_host``, ``:port`` listens on that host; without it a host is required.
    """
    expected = "[HOST]:PORT such as :9102, 127.0.0.1:9102 or [::1]:9102" if default_host else "HOST:PORT"
    problem = f"{flag}: {_shown(value)} is not {expected} (port 0-65535)"
    host, sep, port = value.rpartition(":")
    if not sep or not port.isascii() or not port.isdigit() or len(port) > 5 or not 0 <= int(port) <= 65535:
        raise ListenError(problem)
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        if not _IPV6.match(host) or ":" not in host:
            raise ListenError(problem)
    elif not host:
        if default_host is None:
            raise ListenError(problem)
        host = default_host
    elif not _HOST.match(host) and not _is_ipv6(host):
        raise ListenError(problem)
    return host, int(port)
