"""http(s) media fetched under MediaLimits (rotor/media/fetch.py over
media/transport.py), against a real loopback server. Names resolve through a
table (no real DNS) and public addresses are routed to the loopback server by
a fake network that records every address dialled, so each refusal is
observed as a connection never made and a request the server never saw."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from rotor.media.errors import MediaError
from rotor.media.fetch import Fetcher
from rotor.media.limits import MediaLimits

from support.media_http import (
    FakeNetwork,
    Handler,
    MediaServer,
    TableResolver,
    body,
    redirect,
    response_head,
    tls_contexts,
)

PUBLIC = "93.184.216.34"  # img.test
OTHER = "93.184.216.35"  # other.test
IMAGE = b"\x89PNG not decoded here" * 100
WHERE = "messages[1].content[2]"


@pytest.fixture
async def server() -> AsyncIterator[MediaServer]:
    server = await MediaServer(routes={"/img": body(IMAGE)}).start()
    yield server
    await server.close()


def internet(server: MediaServer, **table: list[str]) -> tuple[TableResolver, FakeNetwork]:
    names = {"img.test": [PUBLIC], "other.test": [OTHER]}
    names.update({k.replace("_", "."): v for k, v in table.items()})
    return TableResolver(names), FakeNetwork({PUBLIC: server.port, OTHER: server.port})


async def fetch(
    server: MediaServer, url: str, limits: MediaLimits | None = None, **table: list[str]
) -> tuple[bytes | MediaError, TableResolver, FakeNetwork]:
    resolver, network = internet(server, **table)
    fetcher = Fetcher(limits or MediaLimits(), resolver, network)
    try:
        return await fetcher.fetch(url, WHERE), resolver, network
    except MediaError as e:
        return e, resolver, network
    finally:
        await fetcher.aclose()


def failure(result: bytes | MediaError, reason: str) -> MediaError:
    assert isinstance(result, MediaError), result
    assert result.reason == reason, result
    assert str(result).startswith(f"{WHERE}: ")
    return result


async def test_an_image_is_fetched_from_a_public_address(server: MediaServer) -> None:
    """The name is resolved through the resolver, and the connection goes to the
    address it gave (port 80, the URL's)."""
    data, resolver, network = await fetch(server, "http://img.test/img")
    assert data == IMAGE
    assert resolver.asked == ["img.test"]
    assert network.dialled == [(PUBLIC, 80)]


async def test_the_connection_goes_to_the_address_checked_never_the_name(
    server: MediaServer,
) -> None:
    """DNS rebinding: a name that resolves to a public address and then to
    loopback. The network is handed the checked address (never the name, which
    it would resolve again), once per connection, and the fetch works."""
    answers = [[PUBLIC], ["127.0.0.1"]]
    resolver, network = internet(server)

    async def rebinding(host: str, port: int) -> list[str]:
        return answers.pop(0)

    fetcher = Fetcher(MediaLimits(), rebinding, network)
    try:
        assert await fetcher.fetch("http://img.test/img", WHERE) == IMAGE
    finally:
        await fetcher.aclose()
    assert network.dialled == [(PUBLIC, 80)]
    assert answers == [["127.0.0.1"]]  # asked once


async def test_a_real_loopback_fetch_when_internal_addresses_are_allowed(
    server: MediaServer,
) -> None:
    """The default network and an IP literal (nothing resolved): loopback is
    fetched only with allow_internal."""
    fetcher = Fetcher(MediaLimits(allow_internal=True))
    try:
        assert await fetcher.fetch(f"http://127.0.0.1:{server.port}/img", WHERE) == IMAGE
    finally:
        await fetcher.aclose()


async def test_a_loopback_literal_is_refused_by_default(server: MediaServer) -> None:
    fetcher = Fetcher(MediaLimits())
    try:
        with pytest.raises(MediaError) as caught:
            await fetcher.fetch(f"http://127.0.0.1:{server.port}/img", WHERE)
    finally:
        await fetcher.aclose()
    error = failure(caught.value, "refused_address")
    assert "loopback" in str(error) and "--allow-internal-media" in str(error)
    assert server.requests == []


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("10.0.0.1", "private"),
        ("192.168.1.20", "private"),
        ("169.254.169.254", "metadata"),
        ("fd00:ec2::254", "metadata"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),
        ("100.64.0.1", "shared"),
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("fd12:3456::1", "private"),
    ],
)
async def test_a_name_that_resolves_to_an_internal_address_is_refused(
    server: MediaServer, address: str, kind: str
) -> None:
    """Checked after resolution: nothing is dialled."""
    result, resolver, network = await fetch(server, "http://evil.test/img", evil_test=[address])
    error = failure(result, "refused_address")
    assert f"evil.test resolves to a {kind}" in str(error) or f"an {kind}" in str(error)
    assert resolver.asked == ["evil.test"]
    assert network.dialled == []


async def test_one_internal_address_among_public_ones_refuses_the_name(
    server: MediaServer,
) -> None:
    result, _, network = await fetch(server, "http://evil.test/img", evil_test=[PUBLIC, "10.0.0.1"])
    failure(result, "refused_address")
    assert network.dialled == []


async def test_an_internal_address_is_fetched_when_allowed(server: MediaServer) -> None:
    resolver = TableResolver({"intranet.test": ["10.0.0.1"]})
    network = FakeNetwork({"10.0.0.1": server.port})
    fetcher = Fetcher(MediaLimits(allow_internal=True), resolver, network)
    try:
        assert await fetcher.fetch("http://intranet.test/img", WHERE) == IMAGE
    finally:
        await fetcher.aclose()
    assert network.dialled == [("10.0.0.1", 80)]


@pytest.mark.parametrize("status", [403, 404, 500, 503])
async def test_a_status_of_400_or_more_names_the_status(server: MediaServer, status: int) -> None:
    server.routes["/img"] = body(b"nope", "text/plain", status)
    result, _, _ = await fetch(server, "http://img.test/img")
    assert f"answered HTTP {status}" in str(failure(result, "http_status"))


async def test_a_redirect_is_refused_by_default(server: MediaServer) -> None:
    """The target is never asked."""
    server.routes["/r"] = redirect("/img")
    result, _, _ = await fetch(server, "http://img.test/r")
    error = failure(result, "redirect_refused")
    assert "answered 302" in str(error) and "--allow-media-redirects" in str(error)
    assert server.requests == ["/r"]


async def test_redirects_are_followed_when_allowed(server: MediaServer) -> None:
    server.routes["/r"] = redirect("http://other.test/hop")
    server.routes["/hop"] = redirect("/img", 307)  # relative to other.test
    limits = MediaLimits(allow_redirects=True)
    data, resolver, network = await fetch(server, "http://img.test/r", limits)
    assert data == IMAGE
    assert server.requests == ["/r", "/hop", "/img"]
    # a redirect's connection is closed unread, so every hop connects, checked, anew
    assert resolver.asked == ["img.test", "other.test", "other.test"]
    assert network.dialled == [(PUBLIC, 80), (OTHER, 80), (OTHER, 80)]


async def test_a_redirect_to_loopback_is_refused_without_allow_internal(
    server: MediaServer,
) -> None:
    """Each hop's address is checked: redirects on, internal addresses off."""
    server.routes["/r"] = redirect(f"http://127.0.0.1:{server.port}/secret")
    server.routes["/secret"] = body(b"internal")
    result, _, network = await fetch(server, "http://img.test/r", MediaLimits(allow_redirects=True))
    failure(result, "refused_address")
    assert server.requests == ["/r"]
    assert network.dialled == [(PUBLIC, 80)]


async def test_a_redirect_to_a_name_of_an_internal_address_is_refused(
    server: MediaServer,
) -> None:
    server.routes["/r"] = redirect("http://metadata.test/latest/meta-data/")
    limits = MediaLimits(allow_redirects=True)
    result, resolver, network = await fetch(
        server, "http://img.test/r", limits, metadata_test=["169.254.169.254"]
    )
    assert "metadata" in str(failure(result, "refused_address"))
    assert resolver.asked == ["img.test", "metadata.test"]
    assert network.dialled == [(PUBLIC, 80)]


async def test_a_domain_outside_the_allow_list_is_refused_before_resolving(
    server: MediaServer,
) -> None:
    limits = MediaLimits(allowed_domains=frozenset({"IMG.test."}))
    result, resolver, _ = await fetch(server, "http://other.test/img", limits)
    assert "--allowed-media-domains" in str(failure(result, "domain_not_allowed"))
    assert resolver.asked == []
    data, _, _ = await fetch(server, "http://img.test/img", limits)
    assert data == IMAGE


async def test_a_redirect_outside_the_allow_list_is_refused(server: MediaServer) -> None:
    server.routes["/r"] = redirect("http://other.test/img")
    limits = MediaLimits(allow_redirects=True, allowed_domains=frozenset({"img.test"}))
    result, resolver, _ = await fetch(server, "http://img.test/r", limits)
    assert "a redirect to other.test" in str(failure(result, "domain_not_allowed"))
    assert resolver.asked == ["img.test"]
    assert server.requests == ["/r"]


@pytest.mark.parametrize(
    "location", ["file:///etc/passwd", "data:image/png;base64,AAAA", "ftp://img.test/x"]
)
async def test_a_redirect_to_another_scheme_is_refused(server: MediaServer, location: str) -> None:
    server.routes["/r"] = redirect(location)
    for limits in (MediaLimits(allow_redirects=True), MediaLimits()):
        result, _, network = await fetch(server, "http://img.test/r", limits)
        assert "a redirect to" in str(failure(result, "redirect_refused"))
        assert network.dialled == [(PUBLIC, 80)]


async def test_too_many_redirects_are_refused(server: MediaServer) -> None:
    server.routes["/loop"] = redirect("/loop")
    limits = MediaLimits(allow_redirects=True, max_redirects=3)
    result, _, _ = await fetch(server, "http://img.test/loop", limits)
    assert "more than 3 redirects" in str(failure(result, "redirect_refused"))
    assert server.requests == ["/loop"] * 4


async def test_a_body_of_exactly_the_cap_is_taken_and_one_byte_more_is_not(
    server: MediaServer,
) -> None:
    limits = MediaLimits(max_media_bytes=len(IMAGE))
    data, _, _ = await fetch(server, "http://img.test/img", limits)
    assert data == IMAGE
    server.routes["/img"] = body(IMAGE + b"!")
    result, _, _ = await fetch(server, "http://img.test/img", limits)
    error = failure(result, "too_large")
    assert f"{len(IMAGE) + 1} bytes, over the {len(IMAGE)}-byte cap" in str(error)


def endless(sent: list[int]) -> Handler:
    """A chunked body that never ends: 64 KiB chunks until the client leaves."""

    async def handle(path: str, writer: asyncio.StreamWriter) -> None:
        writer.write(response_head(200, {"transfer-encoding": "chunked"}))
        chunk = b"10000\r\n" + b"x" * 0x10000 + b"\r\n"
        while True:
            writer.write(chunk)
            await writer.drain()
            sent[0] += 0x10000

    return handle


async def test_a_body_that_never_ends_is_cut_at_the_cap(server: MediaServer) -> None:
    """No Content-Length to refuse up front: the cap is enforced while the body
    streams, and the connection is closed there — the server sees the client
    leave, mid-body."""
    sent = [0]
    server.routes["/endless"] = endless(sent)
    cap = 256 * 1024
    result, _, _ = await fetch(server, "http://img.test/endless", MediaLimits(max_media_bytes=cap))
    error = failure(result, "too_large")
    assert "the fetch was cut there" in str(error)
    await asyncio.wait_for(server.client_left.wait(), 10)
    assert server.finished == ["/endless"]
    assert sent[0] > cap


async def test_a_connect_that_never_completes_is_the_connect_timeout(
    server: MediaServer,
) -> None:
    resolver = TableResolver({"img.test": [PUBLIC]})
    network = FakeNetwork({}, silent=[PUBLIC])
    fetcher = Fetcher(MediaLimits(connect_timeout=0.05, total_timeout=30), resolver, network)
    try:
        with pytest.raises(MediaError) as caught:
            await fetcher.fetch("http://img.test/img", WHERE)
    finally:
        await fetcher.aclose()
    assert "connecting to img.test took over 0.05 s" in str(failure(caught.value, "timeout"))
    assert network.dialled == [(PUBLIC, 80)]


async def test_a_resolver_that_never_answers_is_the_connect_timeout(
    server: MediaServer,
) -> None:
    async def silent(host: str, port: int) -> list[str]:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    fetcher = Fetcher(MediaLimits(connect_timeout=0.05, total_timeout=30), silent)
    try:
        with pytest.raises(MediaError) as caught:
            await fetcher.fetch("http://img.test/img", WHERE)
    finally:
        await fetcher.aclose()
    failure(caught.value, "timeout")


async def test_a_server_that_never_answers_is_the_total_timeout(server: MediaServer) -> None:
    async def silence(path: str, writer: asyncio.StreamWriter) -> None:
        await asyncio.Event().wait()

    server.routes["/silent"] = silence
    limits = MediaLimits(connect_timeout=5, total_timeout=0.1)
    result, _, _ = await fetch(server, "http://img.test/silent", limits)
    assert "took over 0.1 s" in str(failure(result, "timeout"))
    assert server.requests == ["/silent"]


async def test_a_body_that_trickles_is_the_total_timeout(server: MediaServer) -> None:
    """Every read is quick, so only the total timeout ends it."""

    async def trickle(path: str, writer: asyncio.StreamWriter) -> None:
        writer.write(response_head(200, {"transfer-encoding": "chunked"}))
        while True:
            writer.write(b"1\r\nx\r\n")
            await writer.drain()
            await asyncio.sleep(0.01)

    server.routes["/trickle"] = trickle
    limits = MediaLimits(connect_timeout=5, total_timeout=0.2)
    result, _, _ = await fetch(server, "http://img.test/trickle", limits)
    assert "took over 0.2 s" in str(failure(result, "timeout"))


async def test_a_compressed_body_is_refused(server: MediaServer) -> None:
    async def gzipped(path: str, writer: asyncio.StreamWriter) -> None:
        writer.write(response_head(200, {"content-encoding": "gzip", "content-length": "4"}))
        writer.write(b"abcd")
        await writer.drain()

    server.routes["/gz"] = gzipped
    result, _, _ = await fetch(server, "http://img.test/gz")
    assert "Content-Encoding gzip" in str(failure(result, "fetch_failed"))


async def test_the_request_asks_for_the_bytes_uncompressed(server: MediaServer) -> None:
    seen: list[bytes] = []

    async def echo_headers(path: str, writer: asyncio.StreamWriter) -> None:
        await body(IMAGE)(path, writer)

    # the server's reader is not exposed; ask through a second, raw server instead
    async def raw(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await reader.readuntil(b"\r\n\r\n"))
        await echo_headers("/img", writer)
        writer.close()

    raw_server = await asyncio.start_server(raw, "127.0.0.1", 0)
    port = raw_server.sockets[0].getsockname()[1]
    fetcher = Fetcher(
        MediaLimits(), TableResolver({"img.test": [PUBLIC]}), FakeNetwork({PUBLIC: port})
    )
    try:
        assert await fetcher.fetch("http://img.test/img", WHERE) == IMAGE
    finally:
        await fetcher.aclose()
        raw_server.close()
    head = seen[0].lower()
    assert b"accept-encoding: identity" in head
    assert b"host: img.test" in head


async def test_a_refused_connection_and_an_unknown_name_are_fetch_failures(
    server: MediaServer,
) -> None:
    result, _, _ = await fetch(server, "http://unrouted.test/img", unrouted_test=["93.184.216.99"])
    assert "fetching the image from unrouted.test failed" in str(failure(result, "fetch_failed"))
    result, _, _ = await fetch(server, "http://nowhere.test/img")
    assert "cannot resolve nowhere.test" in str(failure(result, "fetch_failed"))


@pytest.mark.parametrize("url", ["http://", "http://[::1/x", "https:///path"])
async def test_a_url_that_is_not_one_is_a_bad_url(server: MediaServer, url: str) -> None:
    result, _, network = await fetch(server, url)
    failure(result, "bad_url")
    assert network.dialled == []


async def test_https_goes_to_the_checked_address_and_verifies_the_name() -> None:
    """TLS over the pinned address still speaks to the name: SNI and the
    certificate check are img.test's, so a certificate for another name fails
    even though the address is the one the name resolved to."""
    server_tls, client_tls = tls_contexts(["img.test"])
    server = await MediaServer(routes={"/img": body(IMAGE)}).start(tls=server_tls)
    table = {"img.test": [PUBLIC], "imposter.test": [PUBLIC]}
    resolver, network = TableResolver(table), FakeNetwork({PUBLIC: server.port})
    fetcher = Fetcher(MediaLimits(), resolver, network, tls=client_tls)
    try:
        assert await fetcher.fetch("https://img.test/img", WHERE) == IMAGE
        with pytest.raises(MediaError) as caught:
            await fetcher.fetch("https://imposter.test/img", WHERE)
    finally:
        await fetcher.aclose()
        await server.close()
    assert network.dialled == [(PUBLIC, 443), (PUBLIC, 443)]
    error = failure(caught.value, "fetch_failed")
    assert "CERTIFICATE_VERIFY_FAILED" in str(error) and "imposter.test" in str(error)
    assert server.requests == ["/img"]
