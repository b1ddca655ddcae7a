"""Which addresses a fetch may reach (rotor/media/addresses.py): public
unicast only unless internal addresses are allowed, IPv4 carried in IPv6
judged as IPv4, every address a name resolves to checked."""

from __future__ import annotations

import ipaddress

import pytest

from rotor.media.addresses import RefusedAddress, checked_addresses, internal_kind, system_resolver

from support.media_http import TableResolver


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "a loopback"),
        ("127.255.0.9", "a loopback"),
        ("::1", "a loopback"),
        ("10.1.2.3", "a private"),
        ("172.16.0.1", "a private"),
        ("192.168.0.1", "a private"),
        ("fc00::1", "a private"),
        ("fd12:3456::1", "a private"),
        ("169.254.169.254", "a metadata"),
        ("fd00:ec2::254", "a metadata"),
        ("169.254.10.10", "a link-local"),
        ("fe80::1", "a link-local"),
        ("100.64.0.1", "a shared (CGNAT)"),
        ("100.127.255.254", "a shared (CGNAT)"),
        ("0.0.0.0", "an unspecified"),
        ("::", "an unspecified"),
        ("224.0.0.1", "a multicast"),
        ("ff02::1", "a multicast"),
        ("240.0.0.1", "a reserved"),
        ("255.255.255.255", "a reserved"),
        ("192.0.2.1", "a reserved"),  # documentation (TEST-NET-1)
        ("2001:db8::1", "a reserved"),  # documentation
        ("::ffff:127.0.0.1", "a loopback"),  # IPv4-mapped
        ("::ffff:169.254.169.254", "a metadata"),
        ("2002:a00:1::", "a private"),  # 6to4 of 10.0.0.1
        ("64:ff9b::a9fe:a9fe", "a metadata"),  # NAT64 of 169.254.169.254
        ("2001:0:4136:e378:8000:63bf:f5ff:fffe", "a private"),  # Teredo, client 10.0.0.1
    ],
)
def test_internal_addresses_say_what_they_are(address: str, kind: str) -> None:
    assert internal_kind(ipaddress.ip_address(address)) == kind


@pytest.mark.parametrize(
    "address",
    ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808"],
)
def test_public_addresses_pass(address: str) -> None:
    assert internal_kind(ipaddress.ip_address(address)) is None


async def test_every_address_of_a_name_is_checked() -> None:
    resolver = TableResolver(
        {"mixed.test": ["8.8.8.8", "10.0.0.1"], "ok.test": ["8.8.8.8", "1.1.1.1"]}
    )
    with pytest.raises(RefusedAddress) as caught:
        await checked_addresses("mixed.test", 80, resolver, allow_internal=False)
    assert (caught.value.host, caught.value.address, caught.value.kind) == (
        "mixed.test",
        "10.0.0.1",
        "a private",
    )
    assert await checked_addresses("mixed.test", 80, resolver, allow_internal=True) == [
        "8.8.8.8",
        "10.0.0.1",
    ]
    assert await checked_addresses("ok.test", 80, resolver, allow_internal=False) == [
        "8.8.8.8",
        "1.1.1.1",
    ]


async def test_an_ip_literal_is_not_resolved() -> None:
    resolver = TableResolver({})
    with pytest.raises(RefusedAddress):
        await checked_addresses("[::1]", 80, resolver, allow_internal=False)
    assert await checked_addresses("8.8.8.8", 80, resolver, allow_internal=False) == ["8.8.8.8"]
    assert resolver.asked == []


async def test_a_resolver_that_answers_nothing_or_not_an_address_fails() -> None:
    resolver = TableResolver({"empty.test": [], "odd.test": ["not-an-ip"]})
    with pytest.raises(OSError, match="resolves to no address"):
        await checked_addresses("empty.test", 80, resolver, allow_internal=True)
    with pytest.raises(OSError, match="not an IP address"):
        await checked_addresses("odd.test", 80, resolver, allow_internal=True)


async def test_the_system_resolver_answers_a_numeric_host_without_dns() -> None:
    assert await system_resolver("127.0.0.1", 80) == ["127.0.0.1"]
