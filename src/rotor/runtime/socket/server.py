"""The engine process's side: an Engine served over a unix socket to the HTTP
processes of `rotor run --http-workers N`.

One task per request (never per token; an engine that pushes hands its
outputs over itself once the first is out). Outputs are not written as they
come: a connection collects them per request and writes once per event-loop
turn, so one engine step for 32 streams is one write carrying one frame per
request, however many tokens each frame holds.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from functools import partial
from typing import cast

from rotor.engines.base import Embedder, Engine, Scorer
from rotor.protocol.codec import (
    CodecError,
    decode_embed_request,
    decode_request,
    decode_score_request,
    encode_embed_error,
    encode_embeddings,
    encode_error,
    encode_outputs,
    encode_score_error,
    encode_scores,
)
from rotor.protocol.engine import EngineError, EngineOutput, EngineRequest
from rotor.protocol.scores import ScorePair
from rotor.runtime.relay import Relay
from rotor.runtime.socket import frames

log = logging.getLogger("rotor.socket")


class _Connection(asyncio.Protocol):
    """One HTTP process: its requests, and the frames waiting to be written."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.transport: asyncio.Transport | None = None
        self.reader = frames.Reader(self._on_frame)
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self._seq: dict[str, int] = {}  # per request: the number of its next frame
        self._outputs: dict[str, list[EngineOutput]] = {}  # per request, since the last write
        self._frames: list[bytes] = []
        self._flush_scheduled = False

    # -- asyncio.Protocol ------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream connection's (a unix socket's): asyncio's Protocol types it as the base
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        try:
            self.reader.feed(data)
        except (frames.WireError, CodecError, UnicodeDecodeError) as e:
            log.error("dropping an HTTP process's connection: %s", e)
            assert self.transport is not None
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        for rid, task in list(self.tasks.items()):  # its clients are gone with it
            self.engine.abort(rid)
            task.cancel()

    # -- frames in ---------------------------------------------------------------

    def _on_frame(self, kind: bytes, seq: int, rid: str, payload: bytes) -> None:
        if kind == frames.GENERATE:
            request = decode_request(payload)
            if rid != request.request_id:
                raise frames.WireError(f"frame id {rid!r} is not the request's id")
            if rid in self.tasks:
                # the running one's numbering goes on: this error cannot join it
                log.error("an HTTP process sent request %s twice", rid)
                return
            self._seq[rid] = 0
            self.tasks[rid] = asyncio.ensure_future(self._run(request))
        elif kind == frames.ABORT:
            task = self.tasks.get(rid)
            if task is not None:
                self.engine.abort(rid)
                task.cancel()
        elif kind == frames.STATE:
            self._write(frames.frame(frames.STATE, "", frames.encode_state(self.engine.state())))
        elif kind == frames.EMBED:
            inputs, dimensions = decode_embed_request(payload)
            self.tasks[rid] = asyncio.ensure_future(self._embed(rid, inputs, dimensions))
        elif kind == frames.SCORE:
            pairs = decode_score_request(payload)
            self.tasks[rid] = asyncio.ensure_future(self._score(rid, pairs))
        else:
            raise frames.WireError(f"frame kind {kind!r} is not one an HTTP process sends")

    async def _embed(self, rid: str, inputs: list[list[int]], dimensions: int | None) -> None:
        try:
            if not isinstance(self.engine, Embedder):
                raise EngineError("the engine cannot embed", "refused", "model")
            answer = encode_embeddings(await self.engine.embed(inputs, dimensions))
        except EngineError as e:
            answer = encode_embed_error(e)
        except Exception as e:  # a broken engine fails the request, not the process
            log.exception("embed request %s failed", rid)
            answer = encode_embed_error(EngineError(f"{type(e).__name__}: {e}", "internal"))
        finally:
            self.tasks.pop(rid, None)
        self._write(frames.frame(frames.VECTORS, rid, answer))

    async def _score(self, rid: str, pairs: list[ScorePair]) -> None:
        try:
            if not isinstance(self.engine, Scorer):
                raise EngineError("the engine cannot score pairs", "refused", "model")
            answer = encode_scores(await self.engine.score(pairs))
        except EngineError as e:
            answer = encode_score_error(e)
        except Exception as e:  # a broken engine fails the request, not the process
            log.exception("score request %s failed", rid)
            answer = encode_score_error(EngineError(f"{type(e).__name__}: {e}", "internal"))
        finally:
            self.tasks.pop(rid, None)
        self._write(frames.frame(frames.SCORES, rid, answer))

    async def _run(self, request: EngineRequest) -> None:
        """Its outputs into the next write, each as the engine puts it, in the
        engine's own turn (`Relay`); then its end."""
        rid = request.request_id
        stream = self.engine.generate(request)
        relay = Relay(partial(self._add, rid))
        stream.subscribe(relay)
        try:
            error = await relay.over
        except asyncio.CancelledError:
            stream.stop()
            self._outputs.pop(rid, None)  # aborted: the client reads no more of it
            self.tasks.pop(rid, None)
            self._seq.pop(rid, None)
            raise
        self.tasks.pop(rid, None)
        self._end(rid, error)

    def _add(self, rid: str, output: EngineOutput) -> None:
        pending = self._outputs.get(rid)
        if pending is None:
            self._outputs[rid] = [output]
            self._schedule()
        else:
            pending.append(output)

    # -- frames out --------------------------------------------------------------

    def _end(self, rid: str, error: EngineError | None) -> None:
        self._take_outputs(rid)  # what it produced goes before its end
        seq = self._seq.pop(rid, 0)
        if error is not None:
            self._write(frames.frame(frames.ERROR, rid, encode_error(error), seq))
        else:
            self._write(frames.frame(frames.DONE, rid, b"", seq))

    def _take_outputs(self, rid: str) -> None:
        outputs = self._outputs.pop(rid, None)
        if outputs:
            seq = self._seq[rid]
            self._seq[rid] = seq + 1
            self._frames.append(frames.frame(frames.OUTPUTS, rid, encode_outputs(outputs), seq))

    def _write(self, data: bytes) -> None:
        self._frames.append(data)
        self._schedule()

    def _schedule(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        for rid in list(self._outputs):
            self._take_outputs(rid)
        frames, self._frames = self._frames, []
        if frames and self.transport is not None:
            self.transport.write(b"".join(frames))


async def serve_engine(engine: Engine, sock: socket.socket) -> asyncio.AbstractServer:
    """Serve `engine` on a listening unix socket (bound before the HTTP
    processes were started, so they can connect at once)."""
    loop = asyncio.get_running_loop()
    return await loop.create_unix_server(lambda: _Connection(engine), sock=sock)
