"""Whether an address a provider reports for a rented replica may receive traffic and probes, and which IP to use.

A provider account is outside the cluster's trust: whoever holds it can make an instance report any address.
Production traffic (the EndpointSlice) and the provider's probes must never be aimed at loopback, the cloud's
metadata address or the cluster's own network that way. So the address is judged as a client would connect to it:

- an IP address (IPv4 dotted-quad, IPv6) is judged as it is: inside the provider's ``addressRanges``, or, with none
  configured, a public (global) address; an IPv6 address that carries an IPv4 one (IPv4-mapped, 6to4, NAT64's
  ``64:ff9b::/96``) must pass as that IPv4 address too;
- any other numeric form a resolver reads as an IPv4 address (``127.1``, ``2130706433``, ``0177.0.0.1``,
  ``0x7f.0.0.1``: ``inet_aton``'s short, decimal, octal and hexadecimal forms) is refused: it would reach an
  address the check never saw;
- a host name is resolved and every address it resolves to must pass; the first becomes the replica's address, so
  the EndpointSlice and every probe connect to that checked IP, never to the name again (no window in which the
  name could be rebound to another address). The name is resolved again on every poll and judged again;
- a name that does not resolve right now is neither allowed nor refused (``unknown``): the replica keeps the
  address it had, and gets none until the name resolves.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass

#: Resolves a host name to its addresses, as a client would (``getaddrinfo``); OSError when it cannot.
Resolver = Callable[[str], Sequence[str]]

_HOST_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")
#: Shown of a refused address at most (a provider's reply is not ours to echo at length).
SHOWN = 64


def system_resolver(host: str) -> list[str]:
    """Every address ``host`` resolves to on this machine, as a TCP client would connect."""
    infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    return sorted({str(info[4][0]) for info in infos})


@dataclass(frozen=True)
class Verdict:
    #: The IP address traffic and probes go to; empty unless allowed.
    address: str = ""
    #: Why the address may not receive traffic ("which is not ..."); empty unless refused.
    refusal: str = ""
    #: Why nothing could be judged right now (a name that does not resolve); empty otherwise.
    unknown: str = ""


def ranges_text(ranges: Sequence[str]) -> str:
    return f"in addressRanges ({', '.join(ranges)})" if ranges else "a public address (addressRanges is empty)"


#: NAT64's well-known prefix (RFC 6052): the last 32 bits are the IPv4 address a translator connects to.
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries and leads to (IPv4-mapped, 6to4, NAT64), or None."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def _allowed(ip: ipaddress.IPv4Address | ipaddress.IPv6Address, ranges: Sequence[str]) -> bool:
    """Inside ``ranges`` (public, with none); an IPv6 address that carries an IPv4 one must pass as that too, or a
    translator would carry traffic to loopback or the metadata address."""
    inner = _embedded_ipv4(ip) if isinstance(ip, ipaddress.IPv6Address) else None
    if inner is not None and not _allowed(inner, ranges):
        return False
    if not ranges:
        return ip.is_global
    return any(ip in ipaddress.ip_network(r) for r in ranges)


def _inet_aton_reads(text: str) -> bool:
    """Whether the C resolver would take ``text`` for an IPv4 address in one of its legacy forms."""
    try:
        socket.inet_aton(text)
    except OSError:
        return False
    return True


def _host_name(text: str) -> bool:
    name = text[:-1] if text.endswith(".") else text
    return 0 < len(name) <= 253 and all(_HOST_LABEL.match(label) for label in name.split("."))


def check(address: str, ranges: Sequence[str], resolve: Resolver = system_resolver) -> Verdict:
    """Judge ``address`` (as the provider reported it) against ``ranges`` (CIDRs; empty: public addresses only)."""
    text = address.strip()
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        pass
    else:
        if _allowed(ip, ranges):
            return Verdict(address=str(ip))
        return Verdict(refusal=f"which is not {ranges_text(ranges)}")
    if _inet_aton_reads(text):
        return Verdict(
            refusal="which is no canonical IP address (a short, decimal, octal or hexadecimal form that resolvers "
            "read as IPv4): report dotted-quad IPv4 or IPv6"
        )
    if not _host_name(text):
        return Verdict(refusal="which is neither an IP address nor a host name")
    try:
        resolved = [ipaddress.ip_address(a.split("%", 1)[0]) for a in resolve(text)]
    except (OSError, ValueError) as exc:
        return Verdict(unknown=f"the host name does not resolve ({type(exc).__name__}: {str(exc)[:SHOWN]})")
    if not resolved:
        return Verdict(unknown="the host name resolves to no address")
    bad = sorted({str(a) for a in resolved if not _allowed(a, ranges)})
    if bad:
        return Verdict(refusal=f"which resolves to {', '.join(bad[:4])}, not {ranges_text(ranges)}")
    return Verdict(address=str(resolved[0]))
