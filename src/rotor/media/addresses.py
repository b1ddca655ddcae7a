"""Which addresses a media fetch may connect to, and the one resolution of a
host name that decides it.

An address is public when it is global unicast: not loopback, private
(RFC 1918, ULA fc00::/7), link-local (169.254.0.0/16, fe80::/10), shared
(CGNAT 100.64.0.0/10), multicast, unspecified, reserved or documentation, and
not a cloud's metadata address (169.254.169.254, AWS's fd00:ec2::254). An IPv6
address that carries an IPv4 one (IPv4-mapped ::ffff:a.b.c.d, 6to4, Teredo's
client, NAT64's 64:ff9b::/96) is judged by that IPv4 address too, so
`::ffff:127.0.0.1` is loopback.

A host name is resolved once (`checked_addresses`) and every address it
resolves to must pass — one internal address refuses the name, so a name that
resolves to a public and a private address cannot be raced to the private
one. The fetch then connects to exactly the addresses checked here, never
resolving again (transport.py), so DNS rebinding between the check and the
connect cannot happen. The resolver is injectable: tests resolve names
themselves and never ask real DNS."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# (host, port) → the IP addresses the name resolves to, as strings
Resolver = Callable[[str, int], Awaitable[list[str]]]

METADATA = frozenset(
    {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}
)
_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))


class RefusedAddress(Exception):
    """`host` resolves to `address`, which is `kind` (loopback, private, ...)."""

    def __init__(self, host: str, address: str, kind: str) -> None:
        super().__init__(f"{host} resolves to {kind} address {address}")
        self.host = host
        self.address = address
        self.kind = kind


async def system_resolver(host: str, port: int) -> list[str]:
    """The system's resolver (the event loop's getaddrinfo), TCP addresses only."""
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def internal_kind(address: IPAddress) -> str | None:
    """What makes `address` internal ("a loopback", "a private", "a metadata",
    ...), or None for a public address."""
    if address in METADATA:
        return "a metadata"
    if isinstance(address, ipaddress.IPv6Address):
        translated = address.ipv4_mapped or _nat64(address)
        if translated is not None:  # the IPv4 address itself, spelled in IPv6
            return internal_kind(translated)
        for tunnelled in (address.sixtofour, address.teredo and address.teredo[1]):
            if tunnelled and internal_kind(tunnelled) is not None:
                return internal_kind(tunnelled)
    if address.is_loopback:
        return "a loopback"
    if address.is_unspecified:
        return "an unspecified"
    if address.is_link_local:
        return "a link-local"
    if address.is_multicast:
        return "a multicast"
    if any(address in net for net in _PRIVATE):
        return "a private"
    if any(address in net for net in _SHARED):
        return "a shared (CGNAT)"
    if not address.is_global:
        return "a reserved"
    return None


_PRIVATE = [
    ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7")
]
_SHARED = [ipaddress.ip_network("100.64.0.0/10")]


def _nat64(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if any(address in net for net in _NAT64):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


async def checked_addresses(
    host: str, port: int, resolver: Resolver, allow_internal: bool
) -> list[str]:
    """The addresses to connect to for `host`: the host itself when it is an IP
    literal, else what `resolver` says; RefusedAddress when any of them is
    internal and `allow_internal` is off. OSError when it resolves to nothing."""
    literal = _ip_literal(host)
    if literal is not None:
        addresses = [literal]
    else:
        addresses = []
        for resolved in await resolver(host, port):
            address = _ip_literal(resolved)
            if address is None:
                raise OSError(f"the resolver gave {resolved!r} for {host}, not an IP address")
            addresses.append(address)
        if not addresses:
            raise OSError(f"{host} resolves to no address")
    if not allow_internal:
        for address in addresses:
            kind = internal_kind(address)
            if kind is not None:
                raise RefusedAddress(host, str(address), kind)
    return [str(a) for a in addresses]


def _ip_literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]").partition("%")[0])
    except ValueError:
        return None
