"""A request's images over the engine socket (`--http-workers`,
runtime/socket/*): a 12 MB image reaches the engine process's engine byte
for byte in one frame; a request larger than a frame may be is refused
(400) before it is sent, and the connection serves the next one."""

from __future__ import annotations

import hashlib
import os
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from rotor.protocol.engine import EngineError, EngineImage, EngineRequest, pulled
from rotor.runtime.socket import frames
from rotor.runtime.socket.client import SocketEngine
from rotor.runtime.socket.server import serve_engine

from support.mocker import MakeEngine, request
from support.seeing import Seeing

MB = 1 << 20


@pytest.fixture
async def linked(tmp_path: Path, make_engine: MakeEngine) -> AsyncIterator[tuple]:
    """The engine process's side and an HTTP process's, over a unix socket."""
    engine = Seeing(await make_engine())
    path = str(tmp_path / "engine.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    sock.listen(4)
    server = await serve_engine(engine, sock)
    client = SocketEngine(engine.card, path)
    await client.start()
    try:
        yield engine, client
    finally:
        await client.stop()
        server.close()
        await server.wait_closed()


def with_image(data: bytes) -> EngineRequest:
    image = EngineImage(hashlib.sha256(data).hexdigest(), 1, 1, 7, data)
    return request({"output": " ok", "end": "length"}, images=[image])


async def test_a_12_mb_image_reaches_the_engine(linked: tuple) -> None:
    engine, client = linked
    big = os.urandom(12 * MB)
    outs = [out async for out in pulled(client.generate(with_image(big)))]
    assert outs[-1].finish == "length"
    assert [i.data for i in engine.seen[0].images] == [big]


async def test_a_request_over_a_frame_is_refused_and_the_connection_stays(
    linked: tuple,
) -> None:
    engine, client = linked
    with pytest.raises(EngineError) as e:
        async for _ in pulled(client.generate(with_image(bytes(frames.MAX_FRAME)))):
            pass
    assert e.value.kind == "refused" and "frame" in e.value.message
    assert engine.seen == []
    small = os.urandom(1000)
    outs = [out async for out in pulled(client.generate(with_image(small)))]
    assert outs[-1].finish == "length" and engine.seen[0].images[0].data == small
