"""A small streaming HTTP/1.1 client: keep-alive connections, chunked bodies.

A load generator must cost little next to the server it measures, so this is
raw asyncio streams rather than a general client: one header block built once,
TCP_NODELAY, and the body handed to a callback piece by piece as it arrives
(the caller timestamps each piece).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit


class HTTPError(Exception):
    """A transport failure, with the error kind results.json reports."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class Endpoint:
    """Where requests go: scheme, host, port and the base path (e.g. /v1)."""

    host: str
    port: int
    tls: bool
    base_path: str

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"--url {url!r}: expected http(s)://HOST[:PORT][/v1]")
        tls = parts.scheme == "https"
        path = parts.path.rstrip("/") or "/v1"
        return cls(parts.hostname, parts.port or (443 if tls else 80), tls, path)


class _Conn:
    __slots__ = ("reader", "writer", "used")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.used = False

    def close(self) -> None:
        self.writer.close()


class Connections:
    """Idle keep-alive connections to one server, opened as needed."""

    def __init__(self, endpoint: Endpoint, headers: dict[str, str]) -> None:
        self.endpoint = endpoint
        host = endpoint.host if endpoint.port in (80, 443) else f"{endpoint.host}:{endpoint.port}"
        lines = [f"Host: {host}", "Content-Type: application/json", "Accept: text/event-stream"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        self._head = ("\r\n".join(lines) + "\r\n").encode()
        self._idle: list[_Conn] = []
        self._ssl = ssl.create_default_context() if endpoint.tls else None

    async def _open(self) -> _Conn:
        ep = self.endpoint
        try:
            reader, writer = await asyncio.open_connection(
                ep.host, ep.port, ssl=self._ssl, limit=1 << 20
            )
        except OSError as e:
            raise HTTPError("connect", f"cannot connect to {ep.host}:{ep.port}: {e}") from None
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _Conn(reader, writer)

    def close(self) -> None:
        for conn in self._idle:
            conn.close()
        self._idle.clear()

    async def get(self, path: str) -> tuple[int, bytes]:
        """GET base_path + `path` → (status, whole body)."""
        parts: list[bytes] = []
        status = await self.post(path, None, parts.append, parts.append)
        return status, b"".join(parts)

    async def post(
        self,
        path: str,
        body: bytes | None,
        on_body: Callable[[bytes], None],
        on_error: Callable[[bytes], None],
    ) -> int:
        """POST `body` (GET when None) to base_path + `path`. On 200 every piece of the response
        body goes to `on_body` as it arrives; otherwise the whole body (the
        server's error) goes to `on_error`. Returns the status code."""
        for attempt in (0, 1):
            # the retry after a stale connection opens a new one: the other
            # idle ones went quiet at the same time, and are as likely closed
            conn = self._idle.pop() if self._idle and not attempt else await self._open()
            reused = conn.used
            try:
                return await self._exchange(conn, path, body, on_body, on_error)
            except _Stale:
                conn.close()
                if not reused or attempt:
                    raise HTTPError("connection_closed", "server closed the connection") from None
            except (OSError, asyncio.IncompleteReadError) as e:
                conn.close()
                raise HTTPError("connection_closed", f"connection lost: {e}") from None
            except BaseException:
                conn.close()
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def _exchange(
        self,
        conn: _Conn,
        path: str,
        body: bytes | None,
        on_body: Callable[[bytes], None],
        on_error: Callable[[bytes], None],
    ) -> int:
        reader = conn.reader
        target = self.endpoint.base_path.encode() + path.encode()
        if body is None:
            request = b"GET %s HTTP/1.1\r\n%s\r\n" % (target, self._head)
        else:
            request = b"POST %s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n%s" % (
                target,
                self._head,
                len(body),
                body,
            )
        try:
            conn.writer.write(request)
            status_line = await reader.readline()
        except OSError:  # reset before any answer: as good as closed
            status_line = b""
        if not status_line:
            raise _Stale
        conn.used = True
        try:
            status = int(status_line.split(b" ", 2)[1])
        except (IndexError, ValueError):
            raise HTTPError("protocol", f"bad status line {status_line[:80]!r}") from None
        length, chunked, keep = None, False, True
        while True:
            line = await reader.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            value = value.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value
            elif name == b"connection":
                keep = value != b"close"
        parts: list[bytes] = []
        emit = on_body if status == 200 else parts.append
        if chunked:
            while True:
                size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
                if size == 0:
                    await reader.readuntil(b"\r\n")  # no trailers are expected
                    break
                emit((await reader.readexactly(size + 2))[:-2])
        elif length is not None:
            emit(await reader.readexactly(length))
        else:
            keep = False
            while data := await reader.read(65536):
                emit(data)
        if status != 200:
            on_error(b"".join(parts))
        if keep:
            self._idle.append(conn)
        else:
            conn.close()
        return status


class _Stale(Exception):
    """A kept-alive connection the server had already closed."""
