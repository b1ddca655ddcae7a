"""The bench's HTTP client against a server that closes idle keep-alive
connections (as uvicorn does after 5 s): a request on a connection the
server already closed is sent again on a new one, never counted as failed,
however many idle connections went stale together."""

from __future__ import annotations

import asyncio

from rotor.bench.http import Connections, Endpoint

BODY = b'{"ok": true}'


async def test_stale_idle_connections_are_replaced_not_failed() -> None:
    open_conns: list[asyncio.StreamWriter] = []
    served = 0

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal served
        open_conns.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                )
                await reader.readexactly(length)
                served += 1
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    connections = Connections(Endpoint.parse(f"http://127.0.0.1:{port}/v1"), {})
    got: list[bytes] = []
    try:
        # three requests at once: three connections, all idle afterwards
        statuses = await asyncio.gather(
            *(connections.post("/x", b"{}", got.append, got.append) for _ in range(3))
        )
        assert statuses == [200, 200, 200] and len(open_conns) == 3
        for writer in open_conns:  # the server's keep-alive timeout closes them all
            writer.close()
        await asyncio.sleep(0)  # (the close reaches the client's side of each socket)
        assert await connections.post("/x", b"{}", got.append, got.append) == 200
        assert served == 4 and got == [BODY] * 4
    finally:
        connections.close()
        server.close()
        await server.wait_closed()
