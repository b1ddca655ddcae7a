"""An httpx transport that connects only to addresses it has checked.

httpx resolves and connects inside its network backend, so the check lives
there (`CheckedNetwork.connect_tcp`): the host name is resolved once
(addresses.checked_addresses: every address public unless internal addresses
are allowed), and the TCP connection is made to one of exactly those
addresses — the name is never resolved again, so a DNS answer that changes
between the check and the connect (rebinding) changes nothing. TLS still
speaks to the name: SNI and the certificate check use the URL's host, not the
address. Every connection of every redirect hop goes through here.

No proxy is ever used (a proxy would connect on rotor's behalf, past the
check), environment variables included."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Iterable
from typing import Any, NoReturn

import httpcore
import httpx

from rotor.media.addresses import Resolver, checked_addresses

# httpcore's errors as httpx names them (httpx's own transport maps them the same way)
_ERRORS: list[tuple[type[Exception], type[httpx.HTTPError]]] = [
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
]


def _raise_as_httpx(error: Exception) -> NoReturn:
    """Raise httpcore's `error` as httpx's error of its name; any other, as it is."""
    for core, mapped in _ERRORS:
        if isinstance(error, core):
            raise mapped(str(error)) from error
    raise error


class CheckedNetwork(httpcore.AsyncNetworkBackend):
    """A network backend whose connections go only to checked addresses.
    `network` is the backend that really connects (tests pass one that routes
    public addresses to loopback servers)."""

    def __init__(
        self,
        resolver: Resolver,
        allow_internal: bool,
        network: httpcore.AsyncNetworkBackend | None = None,
    ) -> None:
        self._resolver = resolver
        self._allow_internal = allow_internal
        self._network = network if network is not None else httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """Resolve `host`, check every address, connect to the first that
        answers — all within `timeout` (the connect timeout)."""
        try:
            return await asyncio.wait_for(
                self._connect(host, port, local_address, socket_options), timeout
            )
        except asyncio.TimeoutError:
            raise httpcore.ConnectTimeout(f"no connection to {host} within {timeout} s") from None

    async def _connect(
        self,
        host: str,
        port: int,
        local_address: str | None,
        socket_options: Iterable[Any] | None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            addresses = await checked_addresses(host, port, self._resolver, self._allow_internal)
        except OSError as e:
            raise httpcore.ConnectError(f"cannot resolve {host}: {e}") from e
        failure: Exception | None = None
        for address in addresses:
            try:
                return await self._network.connect_tcp(
                    address, port, local_address=local_address, socket_options=socket_options
                )
            except (httpcore.ConnectError, OSError) as e:
                failure = e
        raise httpcore.ConnectError(f"cannot connect to {host}: {failure}")

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("media is never fetched over a unix socket")

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class CheckedTransport(httpx.AsyncBaseTransport):
    """httpx's transport over an httpcore pool whose network is CheckedNetwork."""

    def __init__(
        self,
        network: CheckedNetwork,
        ssl_context: ssl.SSLContext | None = None,
        max_connections: int = 64,
    ) -> None:
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context if ssl_context is not None else httpx.create_ssl_context(),
            max_connections=max_connections,
            max_keepalive_connections=max_connections // 4,
            network_backend=network,
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.AsyncByteStream)
        core = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        try:
            response = await self._pool.handle_async_request(core)
        except Exception as e:
            _raise_as_httpx(e)
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_Body(response.stream),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._pool.aclose()


class _Body(httpx.AsyncByteStream):
    """A response body from httpcore, its errors as httpx's."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for part in self._stream:
                yield part
        except Exception as e:
            _raise_as_httpx(e)

    async def aclose(self) -> None:
        if hasattr(self._stream, "aclose"):
            await self._stream.aclose()
