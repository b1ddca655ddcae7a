"""A hermetic internet for the media fetch tests: a loopback HTTP server whose
routes each write their raw answer (images, redirects, silence, endless
bodies), a resolver that answers from a table (no real DNS), and a network
that routes the public addresses it is given to the loopback server and
records every address dialled."""

from __future__ import annotations

import asyncio
import socket
import ssl
import tempfile
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpcore

# What a route does with a request: its path, and the writer to answer on
Handler = Callable[[str, asyncio.StreamWriter], Awaitable[None]]


def response_head(status: int, headers: dict[str, str] | None = None) -> bytes:
    lines = [f"HTTP/1.1 {status} X"] + [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def body(data: bytes, content_type: str = "image/png", status: int = 200) -> Handler:
    """A route answering `data` with its Content-Length."""

    async def handle(path: str, writer: asyncio.StreamWriter) -> None:
        headers = {"content-type": content_type, "content-length": str(len(data))}
        writer.write(response_head(status, headers) + data)
        await writer.drain()

    return handle


def redirect(location: str, status: int = 302) -> Handler:
    async def handle(path: str, writer: asyncio.StreamWriter) -> None:
        writer.write(response_head(status, {"location": location, "content-length": "0"}))
        await writer.drain()

    return handle


@dataclass
class MediaServer:
    """An HTTP/1.1 server on 127.0.0.1; `routes` maps a path to its handler
    (404 otherwise). `requests` lists the paths asked, `finished` the paths
    whose handler ended (normally or by the client going away), and
    `client_left` is set when a handler's write found the client gone."""

    routes: dict[str, Handler] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    client_left: asyncio.Event = field(default_factory=asyncio.Event)
    port: int = 0
    _server: asyncio.Server | None = None
    _connections: set[asyncio.Task[Any]] = field(default_factory=set)

    async def start(self, tls: ssl.SSLContext | None = None) -> MediaServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=tls)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        """Stop listening, and end every connection still served (a route that never answers)."""
        assert self._server is not None
        self._server.close()
        for task in self._connections:
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                path = head.split(b" ", 2)[1].decode()
                self.requests.append(path)
                handler = self.routes.get(path, body(b"no such path", "text/plain", 404))
                try:
                    await handler(path, writer)
                finally:
                    self.finished.append(path)
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            self.client_left.set()
        finally:
            writer.close()
            self._connections.discard(task)


class FakeNetwork(httpcore.AsyncNetworkBackend):
    """Connects `routes`' addresses (an IP → a loopback port) to 127.0.0.1 at
    that port, through the real network; an address in `silent` never
    connects; any other address is refused. `dialled` lists every (address,
    port) asked, in order."""

    def __init__(self, routes: dict[str, int], silent: Iterable[str] = ()) -> None:
        self.routes = routes
        self.silent = set(silent)
        self.dialled: list[tuple[str, int]] = []
        self._real = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        self.dialled.append((host, port))
        if host in self.silent:
            await asyncio.Event().wait()
        if host not in self.routes:
            raise httpcore.ConnectError(f"no route to {host}")
        return await self._real.connect_tcp("127.0.0.1", self.routes[host], timeout=timeout)

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("no unix sockets here")

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class TableResolver:
    """A resolver answering from `table` (a name → its addresses), recording
    each name asked; an unknown name fails as DNS would."""

    def __init__(self, table: dict[str, list[str]]) -> None:
        self.table = table
        self.asked: list[str] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.asked.append(host)
        if host not in self.table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return list(self.table[host])


def tls_contexts(names: list[str]) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(server, client) TLS contexts: a throwaway CA, a server certificate for
    `names` signed by it, and a client that trusts only that CA."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    valid = (now - datetime.timedelta(hours=1), now + datetime.timedelta(hours=1))

    def certificate(
        subject: str, key: ec.EllipticCurvePrivateKey, issuer: str, signer: Any, ca: bool
    ) -> x509.Certificate:
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(valid[0])
            .not_valid_after(valid[1])
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            sans = x509.SubjectAlternativeName([x509.DNSName(n) for n in names])
            builder = builder.add_extension(sans, critical=False)
        else:
            usage = x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False,
            )  # fmt: skip
            builder = builder.add_extension(usage, critical=True)
        return builder.sign(signer, hashes.SHA256())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = certificate("rotor test CA", ca_key, "rotor test CA", ca_key, ca=True)
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = certificate(names[0], key, "rotor test CA", ca_key, ca=False)

    pem = serialization.Encoding.PEM
    with tempfile.TemporaryDirectory() as folder:
        chain, key_file = Path(folder, "chain.pem"), Path(folder, "key.pem")
        chain.write_bytes(leaf.public_bytes(pem))
        key_file.write_bytes(
            key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        )
        server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server.load_cert_chain(chain, key_file)
    client = ssl.create_default_context(cadata=ca.public_bytes(pem).decode())
    return server, client
