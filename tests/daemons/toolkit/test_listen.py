"""Listen-address flags: every accepted form, and refusals that name the flag and never echo an unbounded value."""

from __future__ import annotations

import pytest

from daemons.toolkit.listen import ListenError, check_port, parse_listen


@pytest.mark.parametrize(
    ("text", "default_host", "parsed"),
    [
        (":9102", "0.0.0.0", ("0.0.0.0", 9102)),
        ("127.0.0.1:0", "0.0.0.0", ("127.0.0.1", 0)),
        ("[::1]:80", "0.0.0.0", ("::1", 80)),
        # $(POD_IP):PORT on an IPv6 cluster: the last colon starts the port
        ("fd00:10:244::17:9102", None, ("fd00:10:244::17", 9102)),
        ("10.244.1.17:9102", None, ("10.244.1.17", 9102)),
        ("localhost:65535", None, ("localhost", 65535)),
        ("node-1.example.org:18080", None, ("node-1.example.org", 18080)),
        (":10299", "127.0.0.1", ("127.0.0.1", 10299)),
    ],
)
def test_accepted(text: str, default_host: str | None, parsed: tuple[str, int]) -> None:
    assert parse_listen(text, default_host=default_host) == parsed


@pytest.mark.parametrize(
    ("text", "default_host"),
    [
        ("9102", "0.0.0.0"),  # no colon
        (":http", "0.0.0.0"),  # a service name is not a port
        (":70000", "0.0.0.0"),  # out of range
        (":-1", "0.0.0.0"),
        (":٩١", "0.0.0.0"),  # non-ASCII digits
        (":9102", None),  # a host is required here
        ("fd00:::1:80", "0.0.0.0"),  # not an IPv6 address before the last colon
        ("fd00::1", "0.0.0.0"),  # no port: "fd00:" is no address
        ("[not-ipv6]:80", "0.0.0.0"),
        ("bad host:80", "0.0.0.0"),
        ("", "0.0.0.0"),
    ],
)
def test_refused_naming_the_flag(text: str, default_host: str | None) -> None:
    with pytest.raises(ListenError, match=r"^--listen: .* is not .*HOST\]?:PORT"):
        parse_listen(text, default_host=default_host)


def test_message_is_bounded() -> None:
    with pytest.raises(ListenError) as info:
        parse_listen("x" * 10_000 + ":1", "--metrics-listen")
    message = str(info.value)
    assert message.startswith("--metrics-listen: ")
    assert len(message) < 200
    assert "..." in message


def test_port_range() -> None:
    assert check_port(0) == 0
    assert check_port(65535) == 65535
    with pytest.raises(ListenError, match=r"--port: 70000 is not a TCP port \(0-65535\)"):
        check_port(70000)
    with pytest.raises(ListenError, match="--port: -1"):
        check_port(-1)
