"""An image's bytes fetched over http(s), with every limit of MediaLimits a
fetch has: the domain allow-list, internal addresses refused (after DNS, on
every connection: transport.py), redirects off unless allowed and each hop
checked as the first URL was, the connect and total timeouts, a status of 400
or more an error naming it, and the byte cap enforced while the body streams
(a Content-Length over the cap is refused before the body is read; a body
that runs over it is cut there, its connection closed)."""

from __future__ import annotations

import asyncio
import ssl

import httpcore
import httpx

from rotor.media.addresses import RefusedAddress, Resolver, system_resolver
from rotor.media.errors import MediaError
from rotor.media.limits import MediaLimits, normalize_host
from rotor.media.transport import CheckedNetwork, CheckedTransport

REDIRECTS = frozenset({301, 302, 303, 307, 308})


class Fetcher:
    """Fetches http(s) URLs under `limits`; one client (and its connection pool)
    for every fetch. `resolver` and `network` are for tests: names resolved
    without DNS, and connections routed to loopback servers; `tls` is the
    certificates trusted (default: the system's and certifi's, as httpx's)."""

    def __init__(
        self,
        limits: MediaLimits,
        resolver: Resolver = system_resolver,
        network: httpcore.AsyncNetworkBackend | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self._limits = limits
        checked = CheckedNetwork(resolver, limits.allow_internal, network)
        self._client = httpx.AsyncClient(
            transport=CheckedTransport(checked, tls),
            follow_redirects=False,
            trust_env=False,
            timeout=httpx.Timeout(limits.total_timeout, connect=limits.connect_timeout),
            # the bytes as sent: a compressed body would be a second size to cap
            headers={"accept-encoding": "identity", "user-agent": "rotor"},
        )

    async def fetch(self, url: str, where: str) -> bytes:
        """The body of `url` (redirects followed as allowed), or MediaError."""
        try:
            return await asyncio.wait_for(self._follow(url, where), self._limits.total_timeout)
        except asyncio.TimeoutError:
            raise MediaError(
                where,
                "timeout",
                f"fetching the image from {_host(url)} took over {self._limits.total_timeout:g} s",
            ) from None

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _follow(self, url: str, where: str) -> bytes:
        limits = self._limits
        try:
            current = httpx.URL(url)
        except httpx.InvalidURL as e:
            raise MediaError(where, "bad_url", f"the image URL is not a valid URL ({e})") from None
        hops = 0
        while True:
            self._check(current, where, redirected=hops > 0)
            host = current.host
            try:
                async with self._client.stream("GET", current) as response:
                    status = response.status_code
                    if status in REDIRECTS and "location" in response.headers:
                        target = _join(current, response.headers["location"], where)
                        if not limits.allow_redirects:
                            raise MediaError(
                                where,
                                "redirect_refused",
                                f"{host} answered {status}, a redirect to {_origin(target)}; "
                                "rotor follows no redirect of a media URL unless "
                                "allowed (--allow-media-redirects)",
                            )
                        hops += 1
                        if hops > limits.max_redirects:
                            raise MediaError(
                                where,
                                "redirect_refused",
                                f"fetching the image took more than {limits.max_redirects} "
                                "redirects",
                            )
                        current = target
                        continue
                    if not 200 <= status < 300:
                        raise MediaError(
                            where,
                            "http_status",
                            f"fetching the image from {host} answered HTTP {status}",
                        )
                    return await self._body(response, host, where)
            except RefusedAddress as e:
                raise MediaError(
                    where,
                    "refused_address",
                    f"{e.host} resolves to {e.kind} address; rotor fetches media from "
                    "public addresses only (--allow-internal-media)",
                ) from None
            except httpx.ConnectTimeout:
                raise MediaError(
                    where,
                    "timeout",
                    f"connecting to {host} took over {limits.connect_timeout:g} s",
                ) from None
            except httpx.TimeoutException:
                raise MediaError(
                    where,
                    "timeout",
                    f"fetching the image from {host} took over {limits.total_timeout:g} s",
                ) from None
            except httpx.InvalidURL:
                # httpx reads a redirect's Location even when it follows none
                raise MediaError(
                    where,
                    "redirect_refused",
                    f"{host} answered a redirect to a URL that is not fetched",
                ) from None
            except httpx.HTTPError as e:
                raise MediaError(
                    where,
                    "fetch_failed",
                    f"fetching the image from {host} failed: {str(e) or type(e).__name__}",
                ) from None

    def _check(self, url: httpx.URL, where: str, redirected: bool) -> None:
        """The scheme and the domain allow-list, for the first URL and each hop."""
        hop = "a redirect to " if redirected else ""
        if url.scheme not in ("http", "https"):
            raise MediaError(
                where,
                "redirect_refused" if redirected else "bad_url",
                f"{hop}a {url.scheme or 'schemeless'} URL is not fetched",
            )
        if not url.host:
            raise MediaError(where, "bad_url", f"{hop}the image URL names no host")
        allowed = self._limits.allowed_domains
        if allowed is not None and normalize_host(url.host) not in allowed:
            raise MediaError(
                where,
                "domain_not_allowed",
                f"{hop}{url.host} is not one of the domains media is fetched from "
                "(--allowed-media-domains)",
            )

    async def _body(self, response: httpx.Response, host: str, where: str) -> bytes:
        cap = self._limits.max_media_bytes
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            raise MediaError(
                where,
                "fetch_failed",
                f"{host} sent the image with Content-Encoding {encoding}; rotor asks for "
                "and takes the bytes uncompressed",
            )
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > cap:
            raise MediaError(
                where,
                "too_large",
                f"the image from {host} is {int(declared)} bytes, over the {cap}-byte cap "
                "(--max-media-bytes)",
            )
        body = bytearray()
        async for chunk in response.aiter_raw():
            body += chunk
            if len(body) > cap:
                raise MediaError(
                    where,
                    "too_large",
                    f"the image from {host} is over the {cap}-byte cap (--max-media-bytes); "
                    "the fetch was cut there",
                )
        return bytes(body)


def _join(base: httpx.URL, location: str, where: str) -> httpx.URL:
    try:
        return base.join(location)
    except httpx.InvalidURL as e:
        raise MediaError(where, "bad_url", f"a redirect's Location is not a URL ({e})") from None


def _origin(url: httpx.URL) -> str:
    return f"{url.scheme}://{url.netloc.decode('ascii', 'replace')}" if url.host else str(url)[:64]


def _host(url: str) -> str:
    try:
        return httpx.URL(url).host or "its host"
    except httpx.InvalidURL:
        return "its host"
