"""A provider's address judged as a client would connect to it: every textual form, every resolved address."""

from __future__ import annotations

import socket

import pytest

from daemons.burst_provider.addresses import Verdict, check, system_resolver
from daemons.burst_provider.providers.base import InstanceState
from tests.daemons.burst_provider.support import make_pod, make_settings, provider_entry, rig

RANGES = ("198.51.100.0/24",)


def no_dns(host: str) -> list[str]:
    raise AssertionError(f"{host!r} should not have been resolved")


@pytest.mark.parametrize(
    "address",
    [
        "127.1",  # short form: 127.0.0.1
        "2130706433",  # decimal: 127.0.0.1
        "0177.0.0.1",  # octal: 127.0.0.1
        "0x7f.0.0.1",  # hexadecimal: 127.0.0.1
        "0xa9fea9fe",  # hexadecimal: 169.254.169.254, the cloud metadata address
        "169.254.43518",  # short form: 169.254.169.254
    ],
)
def test_legacy_ipv4_forms_are_refused_before_any_lookup(address: str) -> None:
    # the machine's resolver reads each as an IPv4 address, so a client would connect to one the check never saw
    assert socket.getaddrinfo(address, None, type=socket.SOCK_STREAM)
    for ranges in ((), ("0.0.0.0/0",)):
        verdict = check(address, ranges, no_dns)
        assert verdict.address == ""
        assert "no canonical IP address" in verdict.refusal


def test_literal_addresses_are_judged_as_they_are() -> None:
    assert check("198.51.100.7", RANGES, no_dns) == Verdict(address="198.51.100.7")
    assert check(" 198.51.100.7 ", RANGES, no_dns).address == "198.51.100.7"
    assert "not in addressRanges (198.51.100.0/24)" in check("127.0.0.1", RANGES, no_dns).refusal
    assert check("8.8.8.8", (), no_dns).address == "8.8.8.8"  # no ranges: public addresses only
    for private in ("10.0.0.1", "169.254.169.254", "127.0.0.1", "::1", "::ffff:127.0.0.1", "fe80::1"):
        assert "not a public address" in check(private, (), no_dns).refusal, private


@pytest.mark.parametrize(
    "address",
    [
        "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
        "64:ff9b::a9fe:a9fe",  # NAT64 of the metadata address 169.254.169.254
        "2002:7f00:1::1",  # 6to4 through 127.0.0.1
        "2002:a00:1::1",  # 6to4 through 10.0.0.1
    ],
)
def test_an_ipv6_address_carrying_a_private_ipv4_one_is_refused(address: str) -> None:
    assert "not a public address" in check(address, (), no_dns).refusal


def test_an_ipv6_address_carrying_a_public_ipv4_one_is_judged_by_both() -> None:
    assert check("64:ff9b::808:808", (), no_dns).address == "64:ff9b::808:808"  # NAT64 of 8.8.8.8
    assert check("2606:4700::1111", (), no_dns).address == "2606:4700::1111"  # carries none
    # Inside the ranges as IPv6, outside them as the IPv4 it leads to: refused.
    assert check("64:ff9b::7f00:1", ("64:ff9b::/96",), no_dns).refusal


def test_a_host_name_passes_only_when_every_address_it_resolves_to_does() -> None:
    answers = {
        "ok.example.net": ["198.51.100.9", "198.51.100.10"],
        "mixed.example.net": ["198.51.100.9", "169.254.169.254"],
        "metadata.example.net": ["169.254.169.254"],
    }

    def resolve(host: str) -> list[str]:
        return answers[host]

    assert check("ok.example.net", RANGES, resolve) == Verdict(address="198.51.100.9")
    mixed = check("mixed.example.net", RANGES, resolve)
    assert (mixed.address, mixed.refusal) == (
        "",
        "which resolves to 169.254.169.254, not in addressRanges (198.51.100.0/24)",
    )
    assert "resolves to 169.254.169.254" in check("metadata.example.net", (), resolve).refusal


def test_a_name_that_does_not_resolve_is_not_judged_and_junk_is_refused() -> None:
    def fails(host: str) -> list[str]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    verdict = check("gone.example.net", RANGES, fails)
    assert (verdict.address, verdict.refusal) == ("", "")
    assert "does not resolve" in verdict.unknown
    assert check("empty.example.net", RANGES, lambda _h: []).unknown == "the host name resolves to no address"
    for junk in ("", "http://198.51.100.7/", "a b", "-bad-.example.net", "x" * 300):
        assert check(junk, RANGES, no_dns).refusal == "which is neither an IP address nor a host name", junk


def test_the_system_resolver_answers_localhost() -> None:
    assert "127.0.0.1" in system_resolver("localhost") or "::1" in system_resolver("localhost")


def test_a_name_rebound_after_the_check_is_refused_on_the_next_poll_and_never_connected_to() -> None:
    """The replica's address is the IP that was judged; the name is judged again on every poll."""
    answers = {"r1.example.net": ["198.51.100.20"]}
    r = rig(
        settings=make_settings(provider_entry("fake-a", addressRanges=list(RANGES))),
        address_resolver=lambda host: answers[host],
    )
    svc, spawn, provider = r.svc, r.spawn, r.provider
    svc.create_pod(make_pod())
    spawn.run_all()
    (iid,) = provider.created
    provider.set_state(iid, InstanceState.RUNNING, address="r1.example.net")
    svc.poll_once()
    status = svc.get_pod("inference", "web-1")
    assert status is not None
    assert (status["phase"], status["address"]) == ("Running", "198.51.100.20")

    answers["r1.example.net"] = ["127.0.0.1"]  # the account's DNS now points the name at loopback
    svc.poll_once()
    spawn.run_all()
    status = svc.get_pod("inference", "web-1")
    assert status is not None
    assert (status["phase"], status["reason"]) == ("Failed", "AddressRefused")
    assert "'r1.example.net', which resolves to 127.0.0.1, not in addressRanges" in status["message"]
    assert provider.deleted == [iid]
